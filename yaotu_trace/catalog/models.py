"""The model catalog: attention shapes and KV bytes per token, so capacities in bytes mean blocks.

The data is `resources/models.json` (cost-model.md §1.2, and the models kvcache-simulator 0.1.3
knows, each entry naming its source); the formulas are cost-model.md §1.1, summed over the
layers that keep a per-token cache:

- MHA / GQA / MQA: `kv_layers · kv_heads · (head_dim + v_head_dim) · bytes` (K and V, so
  `2 · layers · kv_heads · head_dim · bytes` when the widths agree; `head_dim` is read from the
  config, never derived as hidden / query heads).
- MLA (DeepSeek-V3, Kimi-K2): `(kv_lora_rank + qk_rope_head_dim) · kv_layers · bytes`, the latent
  cache that vLLM, SGLang and DeepSeek's reference keep (no head dimension, no factor 2).
- Sliding-window layers of a hybrid model (Gemma 4, Command A, MiMo) add their own K and V per
  token; a DeepSeek sparse-attention indexer (DeepSeek-V3.2, GLM-5, MiniMax-M3) adds
  `indexer_layers · indexer_head_dim · bytes`. Linear-attention layers (Qwen3.5, Kimi-K3) keep
  one state per sequence, not per token, so they add nothing here.

A window only caps the KV of one sequence past `sliding_window_tokens`; a per-block prefix cache
keeps every block of a prefix, so the per-token figure counts the windowed layers at every token
(kvcache-simulator's figure for a request no longer than the window).

The KV data type scales every element (`KV_DTYPES`): bf16/fp16 2 bytes, fp8 (e4m3 or e5m2) 1,
fp4 vLLM's NVFP4 layout, `head_dim // 2` bytes of 4-bit values plus `head_dim // 16` bytes of
fp8 scales per head (one scale per 16 values), i.e. 0.5625 bytes per element at 128.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Final, Literal

from yaotu_trace.errors import ConfigError

Attention = Literal["mha", "gqa", "mqa", "mla"]
KvDtype = Literal["bf16", "fp16", "fp8", "fp4"]
KV_DTYPES: Final[tuple[KvDtype, ...]] = ("bf16", "fp16", "fp8", "fp4")
# Names engines and papers use for the same storage (vLLM's --kv-cache-dtype, torch dtypes).
_KV_DTYPE_ALIASES: Final[dict[str, KvDtype]] = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8", "nvfp4": "fp4",
}
_NATIVE_DTYPE: Final[dict[int, KvDtype]] = {2: "bf16", 1: "fp8"}
SourceStatus = Literal["cost-model", "config", "peer table"]
_SOURCE_STATUSES: Final = ("cost-model", "config", "peer table")


def parse_kv_dtype(text: str, option: str = "--kv-dtype") -> KvDtype:
    """A KV data type as users write it (`bf16`, `FP8`, `fp8_e4m3`, `nvfp4`); anything else is
    a one-line `ConfigError` listing the choices."""
    wanted = str(text).strip().lower()
    if wanted in KV_DTYPES:
        return wanted
    if wanted in _KV_DTYPE_ALIASES:
        return _KV_DTYPE_ALIASES[wanted]
    if wanted == "mxfp4":
        raise ConfigError(f"{option} mxfp4 is not a KV cache format of vLLM or SGLang; use fp4 "
                          "(NVFP4: 4-bit values and one fp8 scale per 16)")
    raise ConfigError(f"{option} {text!r}: choose one of {', '.join(KV_DTYPES)}")


def vector_bytes(dim: int, kv_dtype: KvDtype) -> int:
    """Bytes of one cached vector of `dim` elements (one head's K, or one latent) at `kv_dtype`.

    fp4 is vLLM's NVFP4 page layout (`nvfp4_kv_cache_full_dim`: dim // 2 + dim // 16).
    """
    if kv_dtype == "fp4":
        return dim // 2 + dim // 16
    return dim * (1 if kv_dtype == "fp8" else 2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One model's shape, as far as the KV cache and the cost model need it.

    `kv_layers` are the layers with a full-attention cache (default: every layer but the
    sliding ones); `layers` is the config's `num_hidden_layers`. Parameter counts and
    `hidden_size` are None where the source gives only the attention shape.
    """

    name: str
    aliases: tuple[str, ...]
    attention: Attention
    layers: int
    query_heads: int
    kv_heads: int
    head_dim: int | None
    kv_dtype_bytes: int
    hidden_size: int | None = None
    total_params: int | None = None
    active_nonembedding_params: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window_tokens: int | None = None
    kv_layers: int | None = None
    sliding_layers: int | None = None
    sliding_kv_heads: int | None = None
    sliding_head_dim: int | None = None
    sliding_v_head_dim: int | None = None
    indexer_layers: int | None = None
    indexer_head_dim: int | None = None
    indexer_dtype: KvDtype | None = None
    source: str = ""
    source_status: SourceStatus = "cost-model"

    def __post_init__(self) -> None:
        """A shape with a zero or negative size would price every token at nothing: refused."""
        required = ("layers", "query_heads", "kv_heads", "kv_dtype_bytes")
        optional = ("hidden_size", "total_params", "active_nonembedding_params", "head_dim",
                    "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim",
                    "v_head_dim", "sliding_window_tokens", "kv_layers", "sliding_layers",
                    "sliding_kv_heads", "sliding_head_dim", "sliding_v_head_dim",
                    "indexer_layers", "indexer_head_dim")
        for name in required + optional:
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model {self.name}: {name} {value!r} must be a whole number "
                                  ">= 1; fix its entry in models.json")
        self._check_shape()

    def _check_shape(self) -> None:
        """Fields that only mean something together, or only for one attention kind."""
        def bad(problem: str) -> ConfigError:
            return ConfigError(f"model {self.name}: {problem}; fix its entry in models.json")

        if self.kv_dtype_bytes not in _NATIVE_DTYPE:
            raise bad(f"kv_dtype_bytes {self.kv_dtype_bytes} must be 2 (bf16/fp16) or 1 (fp8)")
        if self.attention == "mla":
            if self.kv_lora_rank is None or self.qk_rope_head_dim is None:
                raise bad("MLA needs kv_lora_rank and qk_rope_head_dim")
            if self.sliding_layers is not None:
                raise bad("sliding_layers is for MHA/GQA models, not MLA")
        elif self.head_dim is None:
            raise bad("the catalog lacks head_dim")
        sliding = (self.sliding_kv_heads, self.sliding_head_dim, self.sliding_v_head_dim)
        if self.sliding_layers is None and any(v is not None for v in sliding):
            raise bad("sliding_kv_heads and sliding_head_dim need sliding_layers")
        if self.sliding_layers is not None and self.sliding_window_tokens is None:
            raise bad("sliding_layers needs sliding_window_tokens")
        if (self.indexer_layers is None) != (self.indexer_head_dim is None):
            raise bad("indexer_layers and indexer_head_dim go together")
        if self.indexer_dtype is not None and self.indexer_dtype not in KV_DTYPES:
            raise bad(f"indexer_dtype {self.indexer_dtype!r} must be one of {', '.join(KV_DTYPES)}")
        cached = (self.kv_layers or 0) + (self.sliding_layers or 0)
        if cached > self.layers or (self.indexer_layers or 0) > self.layers:
            raise bad(f"{max(cached, self.indexer_layers or 0)} cached layers exceed its "
                      f"{self.layers} layers")
        if self.source_status not in _SOURCE_STATUSES:
            raise bad(f"source_status {self.source_status!r} must be one of "
                      f"{', '.join(_SOURCE_STATUSES)}")

    @property
    def full_attention_layers(self) -> int:
        """Layers with a full-attention (per-token, unwindowed or all-windowed) cache."""
        if self.kv_layers is not None:
            return self.kv_layers
        return self.layers - (self.sliding_layers or 0)

    @property
    def kv_dtype(self) -> KvDtype:
        """The catalog's (native) KV data type: what `--kv-dtype` defaults to."""
        return _NATIVE_DTYPE[self.kv_dtype_bytes]

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per cached token at the catalog's KV dtype (see `kv_bytes_per_token`)."""
        return kv_bytes_per_token(self)

    def kv_bytes_at(self, kv_dtype: str | None) -> int:
        """KV bytes per cached token at `kv_dtype` (None: the catalog's)."""
        return kv_bytes_per_token(self, kv_dtype=kv_dtype)

    def params(self, purpose: str) -> tuple[int, int]:
        """(total, active non-embedding) parameters; a one-line `ConfigError` when the catalog
        has none (the source gives the attention shape only)."""
        if self.total_params is None or self.active_nonembedding_params is None:
            raise ConfigError(f"model {self.name}: the catalog has its KV shape but no parameter "
                              f"count, which {purpose} needs; pick a model with parameters "
                              "(`trace models`)")
        return self.total_params, self.active_nonembedding_params


def kv_bytes_per_token(model: ModelSpec, *, kv_dtype_bytes: int | None = None,
                       kv_dtype: str | None = None) -> int:
    """Bytes of KV cache one token occupies on one full (unsharded) replica.

    `kv_dtype` (`bf16`, `fp16`, `fp8`, `fp4`) or `kv_dtype_bytes` (bytes per element, every
    element alike) override the catalog's dtype. An indexer whose dtype the model fixes keeps it.
    """
    if kv_dtype_bytes is not None and kv_dtype is not None:
        raise ConfigError("give the KV dtype by name or by bytes per element, not both")
    if kv_dtype_bytes is not None:
        s = kv_dtype_bytes
        if s < 1:
            raise ConfigError(f"KV dtype bytes must be >= 1, got {s}; use 2 for bf16 or 1 for "
                              "fp8")

        def width(dim: int) -> int:
            return dim * s
        dtype_name = f"{s}-byte"
    else:
        dtype = model.kv_dtype if kv_dtype is None else parse_kv_dtype(kv_dtype)

        def width(dim: int) -> int:
            return vector_bytes(dim, dtype)
        dtype_name = dtype
        if dtype == "fp4" and model.attention == "mla":
            raise ConfigError(f"--kv-dtype fp4 has no plain MLA layout in vLLM or SGLang (only "
                              f"DeepSeek's packed nvfp4_ds_mla); for {model.name} use bf16 or "
                              "fp8, or give the size with --kv-bytes-per-token")
    total = 0
    if model.attention == "mla":
        assert model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
        total += model.full_attention_layers * width(model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        assert model.head_dim is not None  # checked when the entry is read
        v_dim = model.v_head_dim or model.head_dim
        total += model.full_attention_layers * model.kv_heads * (width(model.head_dim)
                                                                 + width(v_dim))
    if model.sliding_layers is not None:
        heads = model.sliding_kv_heads or model.kv_heads
        k_dim = model.sliding_head_dim or model.head_dim or 0
        v_dim = model.sliding_v_head_dim or k_dim
        total += model.sliding_layers * heads * (width(k_dim) + width(v_dim))
    if model.indexer_layers is not None and model.indexer_head_dim is not None:
        fixed = model.indexer_dtype
        index_width = vector_bytes(model.indexer_head_dim, fixed) if fixed is not None \
            else width(model.indexer_head_dim)
        total += model.indexer_layers * index_width
    if total < 1:
        raise ConfigError(f"model {model.name} has no KV bytes at {dtype_name}; fix its entry in "
                          "models.json")
    return total


def kv_bytes_by_dtype(model: ModelSpec) -> dict[KvDtype, int | None]:
    """KV bytes per token at every KV dtype; None where the dtype has no layout for the model."""
    sizes: dict[KvDtype, int | None] = {}
    for dtype in KV_DTYPES:
        try:
            sizes[dtype] = kv_bytes_per_token(model, kv_dtype=dtype)
        except ConfigError:
            sizes[dtype] = None
    return sizes


def model_kv_bytes_per_token(model: str | None, kv_dtype: str | None,
                             kv_bytes_per_token: int | None = None
                             ) -> tuple[str | None, int | None]:
    """(catalog name, KV bytes per token) of `--model` at `--kv-dtype`; (None, None) without a
    model. `--kv-dtype` scales the catalog's figure, so without `--model`, or with
    `--kv-bytes-per-token` (which sets the figure itself), it is refused."""
    if kv_dtype is not None and kv_bytes_per_token is not None:
        parse_kv_dtype(kv_dtype)
        raise ConfigError("--kv-dtype scales --model's KV bytes per token and "
                          "--kv-bytes-per-token sets them; pass only one of them")
    if model is None:
        if kv_dtype is not None:
            parse_kv_dtype(kv_dtype)
            raise ConfigError("--kv-dtype scales a catalog model's KV bytes per token; pass "
                              "--model NAME too, or give the size with --kv-bytes-per-token")
        return None, None
    spec = find_model(model)
    return spec.name, spec.kv_bytes_at(kv_dtype)


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


# Suffixes of checkpoint names that keep the architecture: `Qwen3-8B-Instruct-2507` is Qwen3-8B.
_VARIANT = re.compile(r"(-(instruct|chat|it|hf|base|fp8|bf16|thinking|\d{4}))+$")


def _norm(name: str) -> str:
    """A name as compared: lower case, spaces and underscores as dashes."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _keys(spec: ModelSpec) -> tuple[str, ...]:
    """Normalised names a user may type for a model: name, aliases, aliases without the org."""
    names = [spec.name, *spec.aliases]
    names += [n.rsplit("/", 1)[-1] for n in names if "/" in n]
    return tuple(dict.fromkeys(_norm(n) for n in names))


@cache
def _index() -> dict[str, ModelSpec]:
    """Every key of every model, to its model (first model wins; a test keeps keys unique)."""
    index: dict[str, ModelSpec] = {}
    for spec in load_catalog():
        for key in _keys(spec):
            index.setdefault(key, spec)
    return index


def find_model(name: str) -> ModelSpec:
    """Look a model up by name or alias, case-insensitively (an `org/` prefix is optional; an
    `-Instruct`, `-chat` or `-hf` suffix of a checkpoint of the same architecture too).

    An unknown name raises a one-line `ConfigError` listing the closest catalog names.
    """
    wanted = _norm(name)
    index = _index()
    bare = wanted.rsplit("/", 1)[-1]
    for key in (wanted, bare, _VARIANT.sub("", wanted), _VARIANT.sub("", bare)):
        if key in index:
            return index[key]
    names = [spec.name for spec in load_catalog()]
    lowered = {n.lower(): n for n in names}
    close = [lowered[c] for c in difflib.get_close_matches(bare, list(lowered), n=3, cutoff=0.5)]
    close += [n for n in names if bare and bare in n.lower() and n not in close]
    known = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    hint = f"did you mean {', '.join(close[:3])}?" if close else f"known: {known}"
    raise ConfigError(
        f"unknown model {name!r}; {hint} (see `trace models`, or pass --kv-bytes-per-token)"
    )
