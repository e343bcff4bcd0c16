"""The Prometheus export a vLLM engine would have given for a run: `trace simulate
--metrics-out FILE`, in the long CSV shape `--metrics` reads (`timestamp, metric, labels,
value`; `yaotu_trace.ingest.telemetry.metrics`).

Everything is computed from the run's two tables, so a real step log and request table give
an export too: the step log (instance, start_s, end_s, num_running, num_waiting,
kv_blocks_used, kv_blocks_total, num_preempted) and the request table (arrival_s,
scheduled_s, first_token_s, finish_s, token_times_s, prompt_len, output_len, cached_tokens,
instance). Series whose inputs are absent are left out.

Scrapes are taken every `scrape_interval_s` (1 s by default, so that a 5 s queueing window
holds five samples; a Prometheus server is often set to 5–15 s) from the first arrival or step
start until the first scrape after the last event; a scrape at t sees what happened before
t. Every series carries `instance="<name>"` (the step log's or request table's instance; a
request without one ran on the step log's only instance, else "0").
What a scrape at time t reads, per instance (engines.md §1.9):

- gauges `vllm:num_requests_running`, `vllm:num_requests_waiting` (and
  `vllm:num_requests_waiting_by_reason`: all of them `reason="capacity"`, none `deferred`: the
  modelled engine queues a P/D request on its decode instance once its KV is there),
  `vllm:kv_cache_usage_perc` = kv_blocks_used / kv_blocks_total (the usable blocks, vLLM's
  num_gpu_blocks − 1, which is what its `get_usage()` divides by): the last step whose
  end_s < t (vLLM publishes a step's scheduler stats once its output is processed; they stay
  as they were while the engine idles); 0 before the first step ends;
- counters (Σ over events before t): `vllm:num_preemptions_total` (num_preempted of
  steps ended), `vllm:prompt_tokens_total` (prompt_len at first_token_s),
  `vllm:generation_tokens_total` (one per entry of token_times_s, else output_len at
  finish_s), `vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total` (prompt_len
  and cached_tokens at scheduled_s);
- histograms (`_bucket{le=...}`, `_sum`, `_count`, vLLM's bucket sets):
  `vllm:request_queue_time_seconds` (scheduled_s − arrival_s) and
  `vllm:e2e_request_latency_seconds` (finish_s − arrival_s) observed at finish_s,
  `vllm:time_to_first_token_seconds` (first_token_s − arrival_s) at first_token_s, and
  `vllm:iteration_tokens_total` (prefill_tokens + decode_tokens of each step) at its end_s;
- the info gauge `vllm:cache_config_info{block_size, num_gpu_blocks}` = 1 at every scrape, when
  the block size is given and the step log has kv_blocks_total (the usable blocks, so
  num_gpu_blocks is its largest value per instance plus vLLM's null block): the KV pool,
  which vLLM exports once at start-up;
- `yaotu:run_info{run_id}` = 1 at the first scrape, when the run's id is given
  (`data/run_id.py`): so that `--metrics` refuses the export beside another run's trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd

from yaotu_trace.data.metric_names import RUN_INFO
from yaotu_trace.errors import ConfigError

# A scrape every second: five samples per default queueing window (`window_s` = 5 s).
SCRAPE_INTERVAL_S: Final = 1.0
# vLLM's bucket sets (vllm/v1/metrics/loggers.py, engines.md §1.9).
LATENCY_BUCKETS_S: Final = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                            40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS_S: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                         1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITERATION_BUCKETS: Final = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
EXPORT_COLUMNS: Final = ("timestamp", "metric", "labels", "value")
NO_INSTANCE: Final = "0"
# Scrapes per series: a day at one a second is 86,400; more is a mistyped interval, not a run.
MAX_SCRAPES: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class _Events:
    """Timed observations of one instance: (time_s, value), any order."""

    time_s: np.ndarray
    value: np.ndarray

    def kept(self) -> _Events:
        ok = np.isfinite(self.time_s) & np.isfinite(self.value)
        return _Events(self.time_s[ok], self.value[ok])


def scrape_times(requests: pd.DataFrame, steps: pd.DataFrame | None,
                 scrape_interval_s: float = SCRAPE_INTERVAL_S) -> np.ndarray:
    """Scrape instants: every `scrape_interval_s` from the first event to the first scrape
    after the last one."""
    if not scrape_interval_s > 0:
        raise ValueError("scrape_interval_s must be positive")
    times = [_column(requests, c) for c in ("arrival_s", "scheduled_s", "first_token_s",
                                            "finish_s")]
    if steps is not None and len(steps):
        times += [_column(steps, "start_s"), _column(steps, "end_s")]
    every = np.concatenate([t[np.isfinite(t)] for t in times if t is not None])
    if every.size == 0:
        return np.zeros(0)
    lo, hi = float(every.min()), float(every.max())
    # The last scrape comes after the last event: a scrape sees only what happened before it.
    scrapes = np.floor((hi - lo) / scrape_interval_s) + 2
    if not scrapes <= MAX_SCRAPES:
        raise ConfigError(
            f"--scrape-interval-s {scrape_interval_s:g}: the run spans {hi - lo:.6g} s, which "
            f"is {scrapes:.3g} scrapes; at most {MAX_SCRAPES:,} are written: give at least "
            f"{(hi - lo) / (MAX_SCRAPES - 2):.3g} s")
    count = int(scrapes)
    return lo + scrape_interval_s * np.arange(count)


def metrics_export(requests: pd.DataFrame, steps: pd.DataFrame | None = None, *,
                   scrape_interval_s: float = SCRAPE_INTERVAL_S,
                   block_size_tokens: int | None = None, run: str | None = None) -> pd.DataFrame:
    """The run's Prometheus export as rows (timestamp, metric, labels, value), sorted by
    metric, labels and timestamp; `block_size_tokens` adds the pool's `cache_config_info`,
    `run` (the run's id) its `yaotu:run_info`."""
    at = scrape_times(requests, steps, scrape_interval_s)
    series = list(_all_series(requests, steps, at))
    if block_size_tokens is not None and steps is not None and len(steps):
        series += list(_cache_config(steps, at, block_size_tokens))
    frames = [_series(at, name, instance, extra, values)
              for name, instance, extra, values in series]
    if run is not None and at.size:
        frames.append(pd.DataFrame({"timestamp": at[:1], "metric": RUN_INFO,
                                    "labels": f'{{run_id="{run}"}}', "value": [1.0]}))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
            EXPORT_COLUMNS, ("float64", object, object, "float64"), strict=True)})
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["metric", "labels", "timestamp"], kind="stable",
                           ignore_index=True)


def _series(at: np.ndarray, name: str, instance: str, extra: str,
            values: np.ndarray) -> pd.DataFrame:
    labels = f'{{instance="{instance}"{extra}}}'
    return pd.DataFrame({"timestamp": at, "metric": name, "labels": labels,
                         "value": values.astype(np.float64)})


def _all_series(requests: pd.DataFrame, steps: pd.DataFrame | None, at: np.ndarray
                ) -> Iterator[tuple[str, str, str, np.ndarray]]:
    default = NO_INSTANCE
    if steps is not None and len(steps):
        yield from _step_series(steps, at)
        named = set(_instances(steps))
        # Requests without an instance ran on the step log's only instance, when it has one.
        default = named.pop() if len(named) == 1 else NO_INSTANCE
    yield from _request_series(requests, at, default)


def _cache_config(steps: pd.DataFrame, at: np.ndarray, block_size_tokens: int
                  ) -> Iterator[tuple[str, str, str, np.ndarray]]:
    """vLLM's info gauge of the cache config: the pool of each instance, as labels."""
    total = _column(steps, "kv_blocks_total")
    if total is None:
        return
    inst = _instances(steps)
    for name in sorted(set(inst)):
        blocks = total[inst == name]
        if np.isfinite(blocks).any():
            extra = (f',block_size="{int(block_size_tokens)}",'
                     f'num_gpu_blocks="{int(np.nanmax(blocks)) + 1}"')
            yield "vllm:cache_config_info", name, extra, np.ones(at.size)


def _column(df: pd.DataFrame, name: str) -> np.ndarray | None:
    if name not in df.columns or not df[name].notna().any():
        return None
    return df[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _instances(df: pd.DataFrame, default: str = NO_INSTANCE) -> np.ndarray:
    """Each row's instance name (`default` where none is given)."""
    if "instance" not in df.columns:
        return np.full(len(df), default, dtype=object)
    return df["instance"].astype(object).where(df["instance"].notna(), default
                                               ).astype(str).to_numpy(dtype=object)


def _last_at(at: np.ndarray, end_s: np.ndarray, value: np.ndarray) -> np.ndarray:
    """A gauge as scraped: the value of the last step ended before t (0 before the first)."""
    order = np.argsort(end_s, kind="stable")
    k = np.searchsorted(end_s[order], at, side="left")
    held = np.concatenate([[0.0], np.nan_to_num(value[order])])
    return held[k]


def _cumulative(at: np.ndarray, events: _Events) -> np.ndarray:
    """A counter as scraped: Σ value of the events before each t."""
    ev = events.kept()
    order = np.argsort(ev.time_s, kind="stable")
    sums = np.concatenate([[0.0], np.cumsum(ev.value[order])])
    return sums[np.searchsorted(ev.time_s[order], at, side="left")]


def _step_series(steps: pd.DataFrame, at: np.ndarray
                 ) -> Iterator[tuple[str, str, str, np.ndarray]]:
    inst = _instances(steps)
    end = steps["end_s"].to_numpy(dtype=np.float64)
    gauges: dict[str, np.ndarray] = {}
    for name, column in (("vllm:num_requests_running", "num_running"),
                         ("vllm:num_requests_waiting", "num_waiting")):
        if (values := _column(steps, column)) is not None:
            gauges[name] = values
    used, total = _column(steps, "kv_blocks_used"), _column(steps, "kv_blocks_total")
    if used is not None and total is not None:
        gauges["vllm:kv_cache_usage_perc"] = used / np.maximum(total, 1)
    preempted = _column(steps, "num_preempted")
    token_columns = [v for c in ("prefill_tokens", "decode_tokens")
                     if (v := _column(steps, c)) is not None]
    tokens = sum((np.nan_to_num(v) for v in token_columns), np.zeros(len(steps)))
    for name in sorted(set(inst)):
        here = inst == name
        for metric, values in gauges.items():
            yield metric, name, "", _last_at(at, end[here], values[here])
        if "vllm:num_requests_waiting" in gauges:
            # vLLM 0.33 splits the waiting requests by reason; the modelled engine defers none
            # (a P/D request joins the decode queue once its KV is there)
            waiting = _last_at(at, end[here], gauges["vllm:num_requests_waiting"][here])
            yield "vllm:num_requests_waiting_by_reason", name, ',reason="capacity"', waiting
            yield ("vllm:num_requests_waiting_by_reason", name, ',reason="deferred"',
                   np.zeros_like(waiting))
        if preempted is not None:
            yield ("vllm:num_preemptions_total", name, "",
                   _cumulative(at, _Events(end[here], preempted[here])))
        if token_columns:
            yield from _histogram("vllm:iteration_tokens_total", name, at,
                                  _Events(end[here], tokens[here]), ITERATION_BUCKETS)


def _histogram(metric: str, instance: str, at: np.ndarray, observed: _Events,
               buckets: tuple[float, ...]) -> Iterator[tuple[str, str, str, np.ndarray]]:
    """A histogram's `_bucket` (cumulative, with `+Inf`), `_sum` and `_count` series."""
    ev = observed.kept()
    ones = np.ones(ev.time_s.size)
    for le in buckets:
        yield (f"{metric}_bucket", instance, f',le="{float(le)}"',
               _cumulative(at, _Events(ev.time_s, np.where(ev.value <= le, 1.0, 0.0))))
    count = _cumulative(at, _Events(ev.time_s, ones))
    yield f"{metric}_bucket", instance, ',le="+Inf"', count
    yield f"{metric}_sum", instance, "", _cumulative(at, ev)
    yield f"{metric}_count", instance, "", count


def _has_token_times(requests: pd.DataFrame) -> bool:
    return "token_times_s" in requests.columns and bool(requests["token_times_s"].notna().any())


def _token_lists(requests: pd.DataFrame) -> list[np.ndarray]:
    """Each request's token times (empty where it has none)."""
    # NOTE: a request the engine never ran (rejected) has pd.NA, which is no NumPy scalar.
    return [np.zeros(0) if v is None or v is pd.NA or (np.isscalar(v) and pd.isna(v))
            else np.asarray(v, dtype=np.float64) for v in requests["token_times_s"]]


def _generated(requests: pd.DataFrame, finish: np.ndarray | None) -> _Events | None:
    """One event per output token: its time in token_times_s, else output_len at finish_s."""
    if _has_token_times(requests):
        lists = _token_lists(requests)
        times = np.concatenate(lists) if lists else np.zeros(0)
        return _Events(times, np.ones(times.size))
    if finish is None:
        return None
    return _Events(finish, requests["output_len"].to_numpy(dtype=np.float64))


def _token_owner(requests: pd.DataFrame, inst: np.ndarray) -> np.ndarray:
    """The instance of each entry of token_times_s (its request's)."""
    return np.repeat(inst, [v.size for v in _token_lists(requests)])


def _request_series(requests: pd.DataFrame, at: np.ndarray, default: str
                    ) -> Iterator[tuple[str, str, str, np.ndarray]]:
    inst = _instances(requests, default)
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    scheduled, first, finish = (_column(requests, c)
                                for c in ("scheduled_s", "first_token_s", "finish_s"))
    prompt = requests["prompt_len"].to_numpy(dtype=np.float64)
    cached = _column(requests, "cached_tokens")
    generated = _generated(requests, finish)
    owner = _token_owner(requests, inst) if _has_token_times(requests) else inst
    for name in sorted(set(inst)):
        here = inst == name
        if first is not None:
            yield ("vllm:prompt_tokens_total", name, "",
                   _cumulative(at, _Events(first[here], prompt[here])))
        if generated is not None:
            mine = owner == name
            yield ("vllm:generation_tokens_total", name, "",
                   _cumulative(at, _Events(generated.time_s[mine], generated.value[mine])))
        if scheduled is not None and cached is not None:
            yield ("vllm:prefix_cache_queries_total", name, "",
                   _cumulative(at, _Events(scheduled[here], prompt[here])))
            yield ("vllm:prefix_cache_hits_total", name, "",
                   _cumulative(at, _Events(scheduled[here], cached[here])))
        if scheduled is not None and finish is not None:
            yield from _histogram("vllm:request_queue_time_seconds", name, at,
                                  _Events(finish[here], (scheduled - arrival)[here]),
                                  LATENCY_BUCKETS_S)
        if finish is not None:
            yield from _histogram("vllm:e2e_request_latency_seconds", name, at,
                                  _Events(finish[here], (finish - arrival)[here]),
                                  LATENCY_BUCKETS_S)
        if first is not None:
            yield from _histogram("vllm:time_to_first_token_seconds", name, at,
                                  _Events(first[here], (first - arrival)[here]),
                                  TTFT_BUCKETS_S)
