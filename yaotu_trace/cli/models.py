"""`trace models`: the model catalog with KV bytes per token (what --model accepts)."""

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


def _shape(spec: ModelSpec) -> str:
    if spec.attention == "mla":
        return f"latent {spec.kv_lora_rank} + rope {spec.qk_rope_head_dim}"
    return f"{spec.kv_heads} × {spec.head_dim}"


def _params(total: int, active: int) -> str:
    return f"{total / 1e9:.1f} / {active / 1e9:.1f}"


def _text(fmt_choice: OutputFormat) -> str:
    from yaotu_trace.commands.models import CONTEXT_TOKENS, models

    catalog = models()
    specs = catalog.models
    if fmt_choice is OutputFormat.JSON:
        from yaotu_trace._version import __version__
        from yaotu_trace.data.report import SCHEMA_VERSION

        # The envelope every JSON document of the tool opens with (docs/json.md).
        doc = {"schema_version": SCHEMA_VERSION,
               "tool": {"name": "yaotu-trace", "version": __version__}, "command": "models",
               "models": catalog.rows(), "kv_dtype": "bf16 unless kv_dtype_bytes says"}
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if fmt_choice is OutputFormat.HTML:
        raise ConfigError("trace models has no html format; use table, json or markdown")
    header = ["model", "attention", "layers", "KV heads × dim", "KV B/token", "KV @32k tok",
              "params, B (total / active)"]
    rows = []
    for s in specs:
        kv = s.kv_bytes_per_token
        note = f" (SWA {s.sliding_window_tokens // 1024}k)" if s.sliding_window_tokens else ""
        rows.append([s.name, s.attention.upper(), str(s.layers), _shape(s), fmt.count(kv) + note,
                     fmt.bytes_(kv * CONTEXT_TOKENS),
                     _params(s.total_params, s.active_nonembedding_params)])
    footer = ("KV bytes per token: 2 · layers · KV heads · head dim · dtype bytes (MLA: "
              "(kv_lora_rank + rope dim) · layers · dtype bytes); bf16 KV. Pass --model NAME "
              "(case-insensitive, aliases accepted) or --kv-bytes-per-token N.")
    if fmt_choice is OutputFormat.MARKDOWN:
        lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(["### Model catalog", "", *lines, "", f"_{footer}_"]) + "\n"
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Model catalog",
                  title_justify="left", caption=footer, caption_justify="left")
    for i, column in enumerate(header):
        table.add_column(column, justify="left" if i < 2 else "right", no_wrap=i == 0)
    for r in rows:
        table.add_row(*r)
    buffer = io.StringIO()
    Console(file=buffer, width=110, color_system=None, no_color=True, highlight=False).print(table)
    return buffer.getvalue()


@command()
def models(format: FormatOpt = None, output: OutputOpt = None, quiet: QuietOpt = False) -> None:
    """List the model catalog with KV bytes per token (the names --model accepts).

    Examples:

      trace models

      trace models --format json
    """
    del quiet  # the catalog is printed at once: no progress to hide
    write_atomically(output or STDOUT, _text(report_format(format, output)))
