"""`trace models`: the model catalog with KV bytes per token (what --model accepts).

The catalog is not a trace's report: it has no input, and `trace models` stays free of the
analysis libraries (the `Report` type imports NumPy), so the command returns its own value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yaotu_trace.catalog.models import ModelSpec, kv_bytes_by_dtype, load_catalog

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
