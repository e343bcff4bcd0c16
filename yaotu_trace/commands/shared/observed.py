"""The engine's own cached tokens against the exact replay (docs/replay.md): the section
`trace analyze` and `trace diagnose` show for a capture that carries them, and what
`trace check --fail-on observed-shortfall` judges."""

from __future__ import annotations

from typing import TYPE_CHECKING

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.data.observed_hits import PoolSize, Reconciliation
from yaotu_trace.data.schema import Trace
from yaotu_trace.data.telemetry_only import is_telemetry_only
from yaotu_trace.prefix.reconcile import ENGINE_COUNTED, SHORTFALL_POINTS, SHORTFALL_RELATIVE

if TYPE_CHECKING:
    from yaotu_trace.data.engine_metrics import EngineMetrics


def reconciles(trace: Trace) -> bool:
    """Whether `trace` is a capture whose cached_tokens are the serving engine's own count,
    with the prompt content a replay needs."""
    return (not is_telemetry_only(trace) and trace.format_name in ENGINE_COUNTED
            and trace.has("cached_tokens") and trace.content_column is not None)


def observed_vs_replayed(trace: Trace, *, settings: EngineSettings | None = None,
                         metrics: EngineMetrics | None = None,
                         margins: tuple[float, float] = (SHORTFALL_POINTS, SHORTFALL_RELATIVE)
                         ) -> Reconciliation | None:
    """Observed and replayed hits over time under the effective rules (the preset and block
    size of `settings` when given), the shortfall judged at `margins`, the capacity reason
    tested at the deployment's pool when `settings` (`--kv-capacity`) or `metrics` name it;
    None for a trace whose cached_tokens are not the engine's own."""
    if not reconciles(trace):
        return None
    # NOTE: the replay's compiled kernels load only for a capture that is reconciled; a trace
    # without the engine's counts never pays for them (tests/cli/test_startup.py).
    from yaotu_trace.prefix.reconcile_replay import reconcile_trace

    s = settings or EngineSettings()
    rules, name, _ = s.replay_rules(trace)
    return reconcile_trace(trace, rules, preset=name,
                           pool=pool_size(s, metrics, rules.block_size_tokens), margins=margins)


def pool_size(settings: EngineSettings, metrics: EngineMetrics | None,
              block_size_tokens: int) -> PoolSize | None:
    """The KV pool of one instance in blocks of `block_size_tokens`: `--kv-capacity`, else
    the pool the engine's metrics state (SGLang's max_total_num_tokens, vLLM's
    cache_config_info, a server log's KV cache size); None when neither names it."""
    if settings.kv_capacity_tokens is not None:
        tokens, source = float(settings.kv_capacity_tokens), "--kv-capacity"
    elif metrics is not None and (g := metrics.gauge("max_total_tokens", how="max")) is not None:
        tokens = float(g["value"].max())
        source = f"{metrics.name_of('max_total_tokens')} in --metrics"
    else:
        return None
    return PoolSize(blocks=max(1, int(tokens // block_size_tokens)), source=source)
