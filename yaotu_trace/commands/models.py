"""`trace models`: the model catalog with KV bytes per token (what --model accepts).

The catalog is not a trace's report: it has no input, and `trace models` stays free of the
analysis libraries (the `Report` type imports NumPy), so the command returns its own value and
writes its own table, Markdown and JSON (`catalog_text`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from yaotu_trace._version import __version__
from yaotu_trace.catalog.models import ModelSpec, kv_bytes_by_dtype, load_catalog
from yaotu_trace.errors import ConfigError
from yaotu_trace.render import OutputFormat, fmt

# The context length the catalog prices a request's KV cache at, tokens.
CONTEXT_TOKENS = 32_768


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCatalog:
    """Every model `--model` accepts, in catalog order."""

    models: tuple[ModelSpec, ...]

    def rows(self) -> list[dict[str, Any]]:
        """One JSON-ready row per model (the `models` array of `trace models -f json`)."""
        return [_row(spec) for spec in self.models]


def models() -> ModelCatalog:
    """`trace models`: the model catalog."""
    return ModelCatalog(models=tuple(load_catalog()))


def _row(spec: ModelSpec) -> dict[str, Any]:
    """One catalog entry as JSON-ready builtins."""
    kv = spec.kv_bytes_per_token
    return {
        "name": spec.name,
        "aliases": list(spec.aliases),
        "attention": spec.attention,
        "layers": spec.layers,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "kv_lora_rank": spec.kv_lora_rank,
        "qk_rope_head_dim": spec.qk_rope_head_dim,
        "kv_dtype_bytes": spec.kv_dtype_bytes,
        "kv_dtype": spec.kv_dtype,
        "kv_bytes_per_token": kv,
        "kv_bytes_per_token_by_dtype": kv_bytes_by_dtype(spec),
        "kv_bytes_at_32k_tokens": kv * CONTEXT_TOKENS,
        "sliding_window_tokens": spec.sliding_window_tokens,
        **{name: getattr(spec, name) for name in _SHAPE_EXTRAS},
        "total_params": spec.total_params,
        "active_nonembedding_params": spec.active_nonembedding_params,
        "source": spec.source,
        "source_status": spec.source_status,
    }


# Shape fields of hybrid models (None for a model every layer of which caches alike).
_SHAPE_EXTRAS = ("v_head_dim", "kv_layers", "sliding_layers", "sliding_kv_heads",
                 "sliding_head_dim", "sliding_v_head_dim", "indexer_layers", "indexer_head_dim",
                 "indexer_dtype")


# What the catalog's table says under it: how the figures are computed, and what to pass.
FOOTER = ("KV bytes per token: layers · KV heads · (K + V head dim) · dtype bytes (MLA: "
          "layers · (kv_lora_rank + rope dim) · dtype bytes), plus sliding-window (SWA) "
          "layers and a sparse-attention indexer (idx) where the model has them. fp4 is "
          "NVFP4 (4-bit values and one fp8 scale per 16, vLLM's layout), none for MLA; "
          "KV @32k at the model's dtype (bf16 unless stated). Pass --model NAME "
          "(case-insensitive, aliases and Hugging Face ids accepted) with --kv-dtype, or "
          "--kv-bytes-per-token N. Sources: docs/models.md.")
HEADER = ("model", "attention", "cached per token: layers × KV heads × dim", "bf16 B/token",
          "fp8", "fp4", "KV @32k tok", "params B (total / active)")


def catalog_text(catalog: ModelCatalog, fmt_choice: OutputFormat) -> str:
    """The catalog as `trace models` writes it: a table (150 columns), Markdown or JSON."""
    if fmt_choice is OutputFormat.JSON:
        return _json(catalog)
    if fmt_choice is OutputFormat.HTML:
        raise ConfigError("trace models has no html format; use table, json or markdown")
    rows = [_cells(spec) for spec in catalog.models]
    if fmt_choice is OutputFormat.MARKDOWN:
        # NOTE: the Markdown renderer imports the Report type, and with it NumPy; only this
        # format pays for it, so that the table stays instant.
        from yaotu_trace.render.markdown import table as markdown_table

        lines = markdown_table(list(HEADER), rows, "lll" + "r" * (len(HEADER) - 3))
        return "\n".join(["### Model catalog", "", *lines, "", f"_{FOOTER}_"]) + "\n"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Model catalog",
                  title_justify="left", caption=FOOTER, caption_justify="left")
    for i, column in enumerate(HEADER):
        table.add_column(column, justify="left" if i < 3 else "right", no_wrap=i in (0, 2))
    for r in rows:
        table.add_row(*r)
    buffer = io.StringIO()
    Console(file=buffer, width=150, color_system=None, no_color=True, highlight=False).print(table)
    return buffer.getvalue()


def _json(catalog: ModelCatalog) -> str:
    """The catalog as JSON, in the envelope every JSON document of the tool opens with
    (docs/json.md)."""
    # NOTE: the schema version lives with the Report type, which imports NumPy; only the JSON
    # format pays for it, so that the table stays instant.
    from yaotu_trace.data.report import SCHEMA_VERSION

    doc = {"schema_version": SCHEMA_VERSION,
           "tool": {"name": "yaotu-trace", "version": __version__}, "command": "models",
           "models": catalog.rows(),
           "kv_dtype": "kv_bytes_per_token is at each model's kv_dtype (bf16 for most); "
                       "kv_bytes_per_token_by_dtype gives every --kv-dtype"}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _cells(spec: ModelSpec) -> list[str]:
    """One catalog entry as the table's cells."""
    by_dtype = kv_bytes_by_dtype(spec)
    return [spec.name, spec.attention.upper(), _shape(spec),
            *(fmt.count(v) if v is not None else "—"
              for v in (by_dtype["bf16"], by_dtype["fp8"], by_dtype["fp4"])),
            fmt.bytes_(spec.kv_bytes_per_token * CONTEXT_TOKENS),
            _params(spec.total_params, spec.active_nonembedding_params)]


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
