"""`trace models`: the model catalog with KV bytes per token at each KV dtype (what --model
accepts)."""

from __future__ import annotations

import io
import json

from yaotu_trace.catalog.models import ModelSpec
from yaotu_trace.cli.app import command, report_format, write_atomically
from yaotu_trace.cli.options import FormatOpt, OutputOpt
from yaotu_trace.cli.progress import QuietOpt
from yaotu_trace.errors import ConfigError
from yaotu_trace.files import STDOUT
from yaotu_trace.render import OutputFormat, fmt


def _window(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def _heads(layers: int, heads: int, k_dim: int, v_dim: int | None) -> str:
    return f"{layers} × {heads} × {k_dim}" + (f"/{v_dim}" if v_dim and v_dim != k_dim else "")


def _shape(spec: ModelSpec) -> str:
    """What one token caches: layers × KV heads × head dim (K/V), MLA latent, SWA, indexer."""
    layers = spec.full_attention_layers
    if spec.attention == "mla":
        text = f"{layers} × ({spec.kv_lora_rank} + {spec.qk_rope_head_dim})"
    else:
        assert spec.head_dim is not None
        text = _heads(layers, spec.kv_heads, spec.head_dim, spec.v_head_dim)
    if spec.sliding_layers is not None:
        k_dim = spec.sliding_head_dim or spec.head_dim or 0
        text += " + " + _heads(spec.sliding_layers, spec.sliding_kv_heads or spec.kv_heads,
                               k_dim, spec.sliding_v_head_dim)
    if spec.sliding_window_tokens is not None:
        text += f" SWA {_window(spec.sliding_window_tokens)}"
    if spec.indexer_layers is not None:
        text += f" + idx {spec.indexer_layers} × {spec.indexer_head_dim}"
    cached = layers + (spec.sliding_layers or 0)
    return text + (f" (of {spec.layers})" if cached < spec.layers else "")


def _params(total: int | None, active: int | None) -> str:
    if total is None or active is None:
        return "—"
    return f"{total / 1e9:.1f} / {active / 1e9:.1f}"


def _text(fmt_choice: OutputFormat) -> str:
    from yaotu_trace.catalog.models import kv_bytes_by_dtype
    from yaotu_trace.commands.models import CONTEXT_TOKENS, models

    catalog = models()
    specs = catalog.models
    if fmt_choice is OutputFormat.JSON:
        from yaotu_trace._version import __version__
        from yaotu_trace.data.report import SCHEMA_VERSION

        # The envelope every JSON document of the tool opens with (docs/json.md).
        doc = {"schema_version": SCHEMA_VERSION,
               "tool": {"name": "yaotu-trace", "version": __version__}, "command": "models",
               "models": catalog.rows(),
               "kv_dtype": "kv_bytes_per_token is at each model's kv_dtype (bf16 for most); "
                           "kv_bytes_per_token_by_dtype gives every --kv-dtype"}
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if fmt_choice is OutputFormat.HTML:
        raise ConfigError("trace models has no html format; use table, json or markdown")
    header = ["model", "attention", "cached per token: layers × KV heads × dim", "bf16 B/token",
              "fp8", "fp4", "KV @32k tok", "params B (total / active)"]
    rows = []
    for s in specs:
        by_dtype = kv_bytes_by_dtype(s)
        rows.append([s.name, s.attention.upper(), _shape(s),
                     *(fmt.count(v) if v is not None else "—"
                       for v in (by_dtype["bf16"], by_dtype["fp8"], by_dtype["fp4"])),
                     fmt.bytes_(s.kv_bytes_per_token * CONTEXT_TOKENS),
                     _params(s.total_params, s.active_nonembedding_params)])
    footer = ("KV bytes per token: layers · KV heads · (K + V head dim) · dtype bytes (MLA: "
              "layers · (kv_lora_rank + rope dim) · dtype bytes), plus sliding-window (SWA) "
              "layers and a sparse-attention indexer (idx) where the model has them. fp4 is "
              "NVFP4 (4-bit values and one fp8 scale per 16, vLLM's layout), none for MLA; "
              "KV @32k at the model's dtype (bf16 unless stated). Pass --model NAME "
              "(case-insensitive, aliases and Hugging Face ids accepted) with --kv-dtype, or "
              "--kv-bytes-per-token N. Sources: docs/models.md.")
    if fmt_choice is OutputFormat.MARKDOWN:
        from yaotu_trace.render.markdown import table as markdown_table

        lines = markdown_table(header, rows, "lll" + "r" * (len(header) - 3))
        return "\n".join(["### Model catalog", "", *lines, "", f"_{footer}_"]) + "\n"
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Model catalog",
                  title_justify="left", caption=footer, caption_justify="left")
    for i, column in enumerate(header):
        table.add_column(column, justify="left" if i < 3 else "right", no_wrap=i in (0, 2))
    for r in rows:
        table.add_row(*r)
    buffer = io.StringIO()
    Console(file=buffer, width=150, color_system=None, no_color=True, highlight=False).print(table)
    return buffer.getvalue()


@command()
def models(format: FormatOpt = None, output: OutputOpt = None, quiet: QuietOpt = False) -> None:
    """List the model catalog with KV bytes per token per KV dtype (the names --model accepts).

    Examples:

      trace models

      trace models --format json
    """
    del quiet  # the catalog is printed at once: no progress to hide
    write_atomically(output or STDOUT, _text(report_format(format, output)))
