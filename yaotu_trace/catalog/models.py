"""The model catalog: attention shapes and KV bytes per token, so capacities in bytes mean blocks.

The data is `resources/models.json` (cost-model.md §1.2); the formulas are cost-model.md §1.1:

- MHA / GQA / MQA: `kv_bytes_per_token = 2 · layers · kv_heads · head_dim · kv_dtype_bytes`
  (K and V; `head_dim` is read from the config, never derived as hidden / query heads).
- MLA (DeepSeek-V3): `(kv_lora_rank + qk_rope_head_dim) · layers · kv_dtype_bytes`, the latent
  cache that vLLM, SGLang and DeepSeek's reference keep (no head dimension, no factor 2).

Sliding-window models are listed with their full-attention per-token size; the window only caps
the KV of one sequence past `sliding_window_tokens`, which a per-block prefix cache does not
model, so the catalog reports the window and leaves the per-token figure unchanged.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from yaotu_trace.errors import ConfigError

Attention = Literal["mha", "gqa", "mqa", "mla"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One model's shape, as far as the KV cache and the cost model need it."""

    name: str
    aliases: tuple[str, ...]
    attention: Attention
    layers: int
    hidden_size: int
    query_heads: int
    kv_heads: int
    head_dim: int | None
    kv_dtype_bytes: int
    total_params: int
    active_nonembedding_params: int
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window_tokens: int | None = None

    def __post_init__(self) -> None:
        """A shape with a zero or negative size would price every token at nothing: refused."""
        required = ("layers", "hidden_size", "query_heads", "kv_heads", "kv_dtype_bytes",
                    "total_params", "active_nonembedding_params")
        optional = ("head_dim", "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank",
                    "qk_nope_head_dim", "v_head_dim", "sliding_window_tokens")
        for name in required + optional:
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model {self.name}: {name} {value!r} must be a whole number "
                                  ">= 1; fix its entry in models.json")

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per cached token at the catalog's KV dtype (see `kv_bytes_per_token`)."""
        return kv_bytes_per_token(self)


def kv_bytes_per_token(model: ModelSpec, *, kv_dtype_bytes: int | None = None) -> int:
    """Bytes of KV cache one token occupies on one full (unsharded) replica.

    `kv_dtype_bytes` overrides the catalog dtype (1 for an FP8 KV cache, 2 for bf16/fp16).
    """
    s = model.kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    if s < 1:
        raise ConfigError(f"KV dtype bytes must be >= 1, got {s}; use 2 for bf16 or 1 for fp8")
    if model.attention == "mla":
        if model.kv_lora_rank is None or model.qk_rope_head_dim is None:
            raise ConfigError(
                f"model {model.name}: MLA needs kv_lora_rank and qk_rope_head_dim in the catalog"
            )
        return (model.kv_lora_rank + model.qk_rope_head_dim) * model.layers * s
    if model.head_dim is None:
        raise ConfigError(f"model {model.name}: the catalog lacks head_dim; add it to models.json")
    return 2 * model.layers * model.kv_heads * model.head_dim * s


@cache
def load_catalog() -> tuple[ModelSpec, ...]:
    """All catalog models, in the order of the data file (read once per process)."""
    text = resources.files("yaotu_trace.resources").joinpath("models.json").read_text("utf-8")
    data = json.loads(text)
    specs: list[ModelSpec] = []
    for entry in data["models"]:
        fields = dict(entry)
        fields["aliases"] = tuple(fields.get("aliases", ()))
        specs.append(ModelSpec(**fields))
    return tuple(specs)


def _keys(spec: ModelSpec) -> tuple[str, ...]:
    """Lower-case names a user may type for a model: name, aliases, aliases without the org."""
    names = [spec.name, *spec.aliases]
    names += [n.rsplit("/", 1)[-1] for n in names if "/" in n]
    return tuple(dict.fromkeys(n.lower() for n in names))


def find_model(name: str) -> ModelSpec:
    """Look a model up by name or alias, case-insensitively (an `org/` prefix is optional).

    An unknown name raises a one-line `ConfigError` listing the closest catalog names.
    """
    wanted = name.strip().lower()
    catalog = load_catalog()
    for spec in catalog:
        keys = _keys(spec)
        if wanted in keys or wanted.rsplit("/", 1)[-1] in keys:
            return spec
    names = [spec.name for spec in catalog]
    lowered = {n.lower(): n for n in names}
    close = [lowered[c] for c in difflib.get_close_matches(wanted, list(lowered), n=3, cutoff=0.5)]
    close += [n for n in names if wanted and wanted in n.lower() and n not in close]
    hint = f"did you mean {', '.join(close[:3])}?" if close else f"known: {', '.join(names)}"
    raise ConfigError(
        f"unknown model {name!r}; {hint} (see `trace models`, or pass --kv-bytes-per-token)"
    )
