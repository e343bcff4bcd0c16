"""The diagnosis options shared by `diagnose`, `check` and `report`, checked before any work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.axes.thresholds import Thresholds

# Model FLOP utilisation assumed when the ledger turns FLOPs into GPU-seconds (cost-model §2.4).
LEDGER_MFU = 0.5
# KV block size of the diagnosis when none is given, tokens.
DEFAULT_BLOCK_TOKENS = 16


def diagnosis_settings(
    *,
    model: str | None = None,
    kv_capacity: str | None = None,
    block_size: int | None = None,
    preset: str | None = None,
    threshold: Sequence[str] | None = None,
    kv_bytes_per_token: int | None = None,
    kv_dtype: str | None = None,
    gpu: str | None = None,
    **engine: Any,
) -> tuple[EngineSettings, Thresholds]:
    """Check the diagnosis options before any work and turn them into engine settings.

    `engine` passes the remaining `EngineSettings` fields of `trace diagnose` through as given;
    one left out (None) keeps the field's default (the link speed's is `DEFAULT_LINK_GBPS`).
    """
    from yaotu_trace.axes.base import EngineSettings
    from yaotu_trace.axes.thresholds import parse_threshold_options

    thresholds = parse_threshold_options(list(threshold or []))
    if preset is not None:
        from yaotu_trace.prefix.rules import rules_for

        rules_for(preset)  # an unknown preset is a one-line ConfigError before any work
    spec, model_kv = None, None
    if model is not None or kv_dtype is not None:
        from yaotu_trace.catalog.models import find_model, model_kv_bytes_per_token

        model_kv = model_kv_bytes_per_token(model, kv_dtype, kv_bytes_per_token)[1]
        spec = None if model is None else find_model(model)
    gpu_spec = None
    if gpu is not None:
        from yaotu_trace.catalog.gpus import find_gpu

        gpu_spec = find_gpu(gpu)
    kv_b = kv_bytes_per_token or model_kv
    block = block_size or DEFAULT_BLOCK_TOKENS
    settings = EngineSettings(
        block_size_tokens=block,
        block_size_given=block_size is not None,
        kv_capacity_tokens=_capacity_tokens(kv_capacity, block, kv_b),
        kv_bytes_per_token=kv_b,
        active_params=None if spec is None else spec.active_nonembedding_params,
        model=None if spec is None else spec.name,
        replay_preset=preset,
        gpu=None if gpu_spec is None else gpu_spec.name,
        gpu_flops_per_s=None if gpu_spec is None else gpu_spec.bf16_flops * LEDGER_MFU,
        **{name: value for name, value in engine.items() if value is not None},
    )
    return settings, thresholds


def _capacity_tokens(kv_capacity: str | None, block_tokens: int,
                     kv_bytes_per_token: int | None) -> float | None:
    """`--kv-capacity` (blocks, tokens or bytes) in tokens; None when unlimited or not given."""
    if kv_capacity is None:
        return None
    from yaotu_trace.catalog.units import parse_capacity

    cap = parse_capacity(kv_capacity)
    if cap.unlimited:
        return None
    if cap.unit == "blocks":
        tokens: float | None = float(int(cap.amount) * block_tokens)
    else:
        as_tokens = cap.to_tokens(kv_bytes_per_token)
        tokens = None if as_tokens is None else float(as_tokens)
    if tokens is not None and tokens < block_tokens:
        raise ConfigError(f"--kv-capacity {kv_capacity!r} holds less than one {block_tokens}-token "
                          "block; give a larger capacity")
    return tokens
