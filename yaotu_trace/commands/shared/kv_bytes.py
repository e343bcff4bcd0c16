"""The KV bytes per token a command's `--model`, `--kv-dtype` and `--kv-bytes-per-token` give,
resolved one way for every command that turns capacities into bytes (sweep, analyze)."""

from __future__ import annotations

from yaotu_trace.catalog.models import model_kv_bytes_per_token
from yaotu_trace.errors import ConfigError


def kv_bytes_per_token_of(model: str | None, kv_bytes_per_token: int | None,
                          kv_dtype: str | None = None) -> tuple[str | None, int | None]:
    """(catalog name, KV bytes per token) of `--model` at `--kv-dtype` and
    `--kv-bytes-per-token`, which must agree: two different sizes would make every capacity
    in bytes ambiguous, so a clash is refused rather than one silently winning."""
    if model is None and kv_dtype is None:
        return None, kv_bytes_per_token
    name, kv = model_kv_bytes_per_token(model, kv_dtype, kv_bytes_per_token)
    if kv_bytes_per_token is not None and kv_bytes_per_token != kv:
        raise ConfigError(
            f"--model {name} has {kv} KV bytes per token but "
            f"--kv-bytes-per-token says {kv_bytes_per_token}; pass only one of them"
        )
    return name, kv
