"""vllm-vcr's step-stats sidecar as a step log (`--steps step-stats.jsonl`).

`vllm-vcr record --step-stats-out FILE` writes one JSON line per engine output message that
carried vLLM's `SchedulerStats` (neuralmagic/vllm-vcr `crates/sim-protocol/src/step_stats.rs`,
`StepStatsRecord`): `{"ts_ms": …, "scheduler": {…}}`, the stats as vLLM's engine-core client
deserialises them, `ts_ms` on the clock of the trace's `arrival_ms` (ms since the capture
began). The engine sends them with every step's outputs, so each line closes one step.

Mapping (vLLM 0.33 `v1/core/sched/scheduler.py::make_stats`, `v1/metrics/stats.py`):

- a step per line after the first, from the line before to its own `ts_ms` (vllm-vcr's own
  `step_spans`: the first line seeds the clock); after a line that left the engine empty (none
  running or waiting) the engine idled, and the step starts at the trace's first arrival after
  that line instead (when the trace has arrivals);
- `num_running` = `num_running_reqs`; `num_waiting` = `num_waiting_reqs` +
  `num_skipped_waiting_reqs` (vLLM's own `vllm:num_requests_waiting` adds the two);
- `kv_usage` = `kv_cache_usage` (blocks in use over the pool, vLLM's `BlockPool.get_usage`);
- `prefill_tokens` = the prompt tokens not cached of the requests admitted in the step:
  `prefix_cache_stats` queries − hits, plus preempted_queries − preempted_hits for the ones that
  come back after a preemption. A chunked prompt counts whole in the step that admitted it,
  and one preempted before its prefill finished counts whole at both admissions: the part it
  had not reached is counted twice (vLLM's stats do not say how far it got);
- `num_readmitted` = `prefix_cache_stats.preempted_requests`: vLLM counts a preemption there
  when the request is admitted again, so the step is the readmission's (not `num_preempted`:
  the KV usage then is not the usage that preempted it), and the total is the run's
  preemptions once every preempted request came back; `recomputed_tokens` = its
  preempted_queries − preempted_hits, what the readmissions compute: the work a preemption
  threw away, plus (for a prefill preempted before it finished) the part never reached. The
  memory axis takes their sum as the recompute's upper bound, where it otherwise estimates it
  (on vLLM's own run of tests/fixtures/captures/vcr/stats/long_prefill: 34,446 tokens against
  15,873 computed twice, where the estimate from preemption counts says 73,101);
- with a vllm-vcr trace of the same capture, `decode_tokens` = the output tokens of the step
  the trace's outputs show ending at the same instant (its derived steps: both files stamp the
  message's arrival at the tap); a step that sent no output decoded none. A trace whose steps
  do not end at the sidecar's instants is from another capture and is refused.

Fields the step log does not use are counted and named in a note, where they hold a value.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from yaotu_trace.catalog.units import MAX_COUNT
from yaotu_trace.data.compressed import open_compressed
from yaotu_trace.data.metric_names import VLLM_RESIDENCY_BUCKETS
from yaotu_trace.data.values import SOURCE_ROW, TIME_LIMIT_S
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.traces.common import fail, json_record, number, text_lines, whole

if TYPE_CHECKING:
    import pandas as pd

FIX: Final = "pass the file `vllm-vcr record --step-stats-out` wrote"
# The same engine message reaches both files at one instant: its derived step ends there.
SAME_INSTANT_S: Final = 1e-6
# A capture's trace may hold a few steps the sidecar lost (a failed write is only logged);
# more than this share unmatched and the two files are not of one capture.
MAX_UNMATCHED_SHARE: Final = 0.01
_SCHEDULER_USED: Final = frozenset({"num_running_reqs", "num_waiting_reqs",
                                    "num_skipped_waiting_reqs", "kv_cache_usage",
                                    "prefix_cache_stats"})
_PREFIX_USED: Final = frozenset({"queries", "hits", "preempted_requests", "preempted_queries",
                                 "preempted_hits"})
# What `--metrics` reads: what vLLM's Prometheus logger records of the same statistics.
_METRICS_USED: Final = frozenset({"num_running_reqs", "num_waiting_reqs",
                                  "num_skipped_waiting_reqs", "kv_cache_usage",
                                  "prefix_cache_stats", "connector_prefix_cache_stats",
                                  "kv_cache_eviction_events"})
_PREFIX_METRICS_USED: Final = frozenset({"queries", "hits"})
# The residency histograms are written at most this often (s of the capture), and at its last
# line: a scrape's resolution or finer, where a snapshot per step would be most of the rows.
HISTOGRAM_EVERY_S: Final = 1.0
# vLLM's residency histograms (`--kv-cache-metrics`), in the order of an event's values.
_RESIDENCY: Final = ("vllm:kv_block_lifetime_seconds", "vllm:kv_block_idle_before_evict_seconds",
                     "vllm:kv_block_reuse_gap_seconds")


def is_step_stats(path: Path) -> bool:
    """Whether `path` is a step-stats sidecar: its first line an object with `ts_ms` and a
    `scheduler` object."""
    try:
        with open_compressed(path) as fh:
            for raw in fh:
                text = raw.decode("utf-8", errors="replace").strip()
                if text:
                    record = json.loads(text)
                    return (isinstance(record, dict) and "ts_ms" in record
                            and isinstance(record.get("scheduler"), dict))
    except (OSError, ValueError, RecursionError):
        return False
    return False


def read_step_stats(path: Path, arrivals_s: np.ndarray | None = None,
                    derived: pd.DataFrame | None = None) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The sidecar as step-log columns, and the notes that say how it was read.

    `arrivals_s` are the trace's arrivals (the start of a step after an idle engine);
    `derived` the steps a vllm-vcr trace of the same capture records (their decode tokens).
    """
    import pandas as pd

    times, lines, unused = _records(path, _SCHEDULER_USED, _PREFIX_USED)
    if len(times) < 2:
        raise TraceSchemaError(f"{path}: {len(times)} step-stats line(s); a step needs the line "
                               "before it (the first seeds the clock), and an empty file means "
                               f"the engine ran without stats (--disable-log-stats); {FIX}")
    end_s = np.asarray(times, dtype=np.float64) / 1000.0

    def col(value: Callable[[_Stats], float]) -> np.ndarray:
        return np.array([value(x) for x in lines[1:]])

    running = np.array([x.running for x in lines])
    waiting = np.array([x.waiting + x.deferred for x in lines])
    start_s = end_s[:-1].copy()
    idle = (running[:-1] + waiting[:-1]) == 0
    if arrivals_s is not None and arrivals_s.size and idle.any():
        ordered = np.sort(np.asarray(arrivals_s, dtype=np.float64))
        nxt = np.searchsorted(ordered, start_s, side="right")
        ok = idle & (nxt < ordered.size)
        start_s[ok] = np.minimum(ordered[np.minimum(nxt[ok], ordered.size - 1)], end_s[1:][ok])
    frame = pd.DataFrame({
        "start_s": start_s, "end_s": end_s[1:],
        "prefill_tokens": col(lambda x: x.queries - x.hits + x.pq - x.ph).astype(np.int64),
        "num_running": running[1:].astype(np.int64),
        "num_waiting": waiting[1:].astype(np.int64),
        "kv_usage": col(lambda x: x.usage),
        "num_readmitted": col(lambda x: x.preempted).astype(np.int64),
        "recomputed_tokens": col(lambda x: x.pq - x.ph).astype(np.int64),
    })
    frame[SOURCE_ROW] = np.arange(2, len(times) + 1)  # errors name the file's line
    notes = [f"engine steps from vllm-vcr's step-stats sidecar ({path.name}): one per line "
             "after the first, each from the line before (after an idle engine, from the next "
             "arrival); num_waiting = num_waiting_reqs + num_skipped_waiting_reqs, kv_usage = "
             "kv_cache_usage, prefill_tokens the uncached prompt tokens of the requests "
             "admitted (a chunked prompt whole in its first step), num_readmitted the requests "
             "readmitted after a preemption and recomputed_tokens what they computed (an upper "
             "bound of the recompute: a prefill preempted before it finished counts whole)"]
    if derived is not None:
        notes.append(_decode_from(frame, end_s, derived, path))
    return frame, (*notes, *_unused_note(unused, len(times), "the step log"))


def metric_rows(path: Path) -> tuple[list[tuple[float, str, str, float]], tuple[str, ...]]:
    """The sidecar as the series vLLM's `PrometheusStatLogger.record` makes of the same
    `SchedulerStats` (`--metrics`): rows (time s, name, labels, value) at each line's time,
    and zero for every counter and histogram at the capture's start (the tap's first instant).

    Gauges: running, waiting (+ deferred; by reason), KV usage. Counters: prefix-cache queries
    and hits, hits by source (`device`; a connector's by its tiers), a connector's queries and
    hits (`external_prefix_cache_*`). Histograms (`--kv-cache-metrics`, vLLM's residency
    buckets): each eviction event's lifetime and idle time, and each of its reuse gaps,
    written every `HISTOGRAM_EVERY_S` and at the last line (the totals exact).
    """
    times, lines, unused = _records(path, _METRICS_USED, _PREFIX_METRICS_USED)
    if not times:
        raise TraceSchemaError(f"{path}: no step-stats line; the engine ran without stats "
                               f"(--disable-log-stats); {FIX}")
    label = "engine=0"
    rows: list[tuple[float, str, str, float]] = []
    totals: dict[tuple[str, str], float] = {}
    hists = {name: ([0] * (len(VLLM_RESIDENCY_BUCKETS) + 1), [0.0])
             for name in _RESIDENCY}

    def emit_counters(t: float) -> None:
        for (name, labels), value in sorted(totals.items()):
            rows.append((t, name, labels, value))

    def emit_histograms(t: float) -> None:
        for name, (counts, total) in hists.items():
            running = 0
            for le, n in zip((*VLLM_RESIDENCY_BUCKETS, float("inf")), counts, strict=True):
                running += n
                bound = "+Inf" if le == float("inf") else repr(float(le))
                rows.append((t, name + "_bucket", f"{label},le={bound}", float(running)))
            rows.append((t, name + "_count", label, float(running)))
            rows.append((t, name + "_sum", label, total[0]))

    def count(name: str, amount: float, labels: str = label) -> None:
        totals[(name, labels)] = totals.get((name, labels), 0.0) + amount

    count("vllm:prefix_cache_queries_total", 0)
    count("vllm:prefix_cache_hits_total", 0)
    count("vllm:prompt_tokens_cached_by_source_total", 0, f"{label},source=device")
    connected = any(x.connector is not None for x in lines)
    if connected:
        count("vllm:external_prefix_cache_queries_total", 0)
        count("vllm:external_prefix_cache_hits_total", 0)
    start_s = 0.0 if times[0] > 0 else times[0] / 1000.0
    emit_counters(start_s)
    events = any(x.events for x in lines)
    if events:
        emit_histograms(start_s)
    shown_s, pending = start_s, False  # the histograms' last snapshot; events since then
    for n, (ts, x) in enumerate(zip(times, lines, strict=True)):
        t = ts / 1000.0
        rows += [(t, "vllm:num_requests_running", label, float(x.running)),
                 (t, "vllm:num_requests_waiting", label, float(x.waiting + x.deferred)),
                 (t, "vllm:num_requests_waiting_by_reason", f"{label},reason=capacity",
                  float(x.waiting)),
                 (t, "vllm:num_requests_waiting_by_reason", f"{label},reason=deferred",
                  float(x.deferred)),
                 (t, "vllm:kv_cache_usage_perc", label, x.usage)]
        count("vllm:prefix_cache_queries_total", x.queries)
        count("vllm:prefix_cache_hits_total", x.hits)
        count("vllm:prompt_tokens_cached_by_source_total", x.hits, f"{label},source=device")
        if x.connector is not None:
            queries, hits, by_source = x.connector
            count("vllm:external_prefix_cache_queries_total", queries)
            count("vllm:external_prefix_cache_hits_total", hits)
            for source, n in by_source:
                count("vllm:prompt_tokens_cached_by_source_total", n, f"{label},source={source}")
        emit_counters(t)
        for lifetime, idle_s, gaps in x.events:
            for name, values in zip(_RESIDENCY, ((lifetime,), (idle_s,), gaps), strict=True):
                counts, total = hists[name]
                for value in values:
                    counts[bisect_left(VLLM_RESIDENCY_BUCKETS, value)] += 1
                    total[0] += value
        pending = pending or bool(x.events)
        if pending and (t - shown_s >= HISTOGRAM_EVERY_S or n == len(lines) - 1):
            emit_histograms(t)
            shown_s, pending = t, False
    notes = [f"{path.name} read as the series vLLM's Prometheus logger records from the same "
             "statistics (from zero at the capture's start, on the trace's clock)"]
    if not events:
        notes.append("no eviction event in the sidecar: the engine ran without "
                     "--kv-cache-metrics, so there are no residency histograms")
    return rows, (*notes, *_unused_note(unused, len(times), "--metrics"))


_Event = tuple[float, float, tuple[float, ...]]  # an eviction: lifetime, idle, reuse gaps (s)


@dataclass(frozen=True, slots=True)
class _Stats:
    """What one line's `scheduler` says: counts after the step, the step's prefix-cache
    lookups, its eviction events (lifetime s, idle s, reuse gaps s) and a connector's lookups
    (queries, hits, hits by source)."""

    running: int
    waiting: int
    deferred: int
    usage: float
    queries: int
    hits: int
    pq: int
    ph: int
    preempted: int
    events: tuple[_Event, ...]
    connector: tuple[int, int, tuple[tuple[str, int], ...]] | None


def _records(path: Path, used: frozenset[str], used_prefix: frozenset[str]
             ) -> tuple[list[float], list[_Stats], Counter[str]]:
    """Each line's time (ms) and statistics, in file order, and the fields outside `used`
    (of `scheduler`) and `used_prefix` (of its `prefix_cache_stats`) that hold a value."""
    times: list[float] = []
    lines: list[_Stats] = []
    unused: Counter[str] = Counter()
    for line, text in text_lines(path):
        if not text.strip():
            continue
        record = json_record(text, path, "line", line)
        ts = number(record.get("ts_ms"), path, "line", line, "ts_ms", FIX)
        if not 0 <= ts <= TIME_LIMIT_S * 1000.0:
            raise fail(path, "line", line, "ts_ms", f"{ts:g} ms is "
                       + ("negative" if ts < 0 else f"beyond {TIME_LIMIT_S:g} s"), FIX)
        if times and ts < times[-1]:
            raise fail(path, "line", line, "ts_ms", f"{ts} ms comes before the line above "
                       f"({times[-1]} ms): two captures joined?", "keep one capture's lines "
                       "in the order vllm-vcr wrote them")
        times.append(ts)
        lines.append(_line(record, path, line))
        _tally(unused, record, {"ts_ms", "scheduler"}, "")
        _tally(unused, record["scheduler"], used, "scheduler.")
        _tally(unused, record["scheduler"]["prefix_cache_stats"], used_prefix,
               "scheduler.prefix_cache_stats.")
    return times, lines, unused


def _line(record: dict[str, Any], path: Path, line: int) -> _Stats:
    """One line's `scheduler`, checked."""
    stats = record.get("scheduler")
    if not isinstance(stats, dict):
        raise fail(path, "line", line, "scheduler", "not an object", FIX)
    p = "scheduler.prefix_cache_stats."

    def count(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
        if obj.get(key) is None and default is not None:
            return default
        value = whole(obj.get(key), path, "line", line, where + key, FIX)
        if value > MAX_COUNT:
            raise fail(path, "line", line, where + key, f"{value:.3g} is beyond "
                       f"{MAX_COUNT:.0e}, more than any engine counts", FIX)
        return value

    def lookups(obj: Any, where: str) -> tuple[int, int]:
        if not isinstance(obj, dict):
            raise fail(path, "line", line, where[:-1], "not an object", FIX)
        queries, hits = count(obj, "queries", where), count(obj, "hits", where)
        if hits > queries:
            raise fail(path, "line", line, where + "hits", f"more hits than queried tokens "
                       f"({hits:,} of {queries:,})", FIX)
        return queries, hits

    queries, hits = lookups(stats.get("prefix_cache_stats"), p)
    prefix = stats["prefix_cache_stats"]
    pq, ph = count(prefix, "preempted_queries", p, 0), count(prefix, "preempted_hits", p, 0)
    if ph > pq:
        raise fail(path, "line", line, p + "preempted_hits", f"more hits than queried tokens "
                   f"({ph:,} of {pq:,})", FIX)
    usage = number(stats.get("kv_cache_usage"), path, "line", line,
                   "scheduler.kv_cache_usage", FIX)
    if not 0.0 <= usage <= 1.0:
        raise fail(path, "line", line, "scheduler.kv_cache_usage",
                   f"{usage} is not a share of the pool (0 to 1)", FIX)
    connector = None
    if stats.get("connector_prefix_cache_stats") is not None:
        where = "scheduler.connector_prefix_cache_stats."
        c_queries, c_hits = lookups(stats["connector_prefix_cache_stats"], where)
        by_source = stats["connector_prefix_cache_stats"].get("hits_by_source") or {}
        if not isinstance(by_source, dict):
            raise fail(path, "line", line, where + "hits_by_source", "not an object", FIX)
        connector = (c_queries, c_hits, tuple(
            (str(k), whole(v, path, "line", line, where + f"hits_by_source.{k}", FIX))
            for k, v in sorted(by_source.items())))
    return _Stats(
        running=count(stats, "num_running_reqs", "scheduler."),
        waiting=count(stats, "num_waiting_reqs", "scheduler."),
        deferred=count(stats, "num_skipped_waiting_reqs", "scheduler.", 0),
        usage=usage, queries=queries, hits=hits, pq=pq, ph=ph,
        preempted=count(prefix, "preempted_requests", p, 0),
        events=_events(stats.get("kv_cache_eviction_events"), path, line),
        connector=connector)


def _events(value: Any, path: Path, line: int) -> tuple[_Event, ...]:
    """The eviction events of a line: (lifetime s, idle s, reuse gaps s) each."""
    key = "scheduler.kv_cache_eviction_events"
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(path, "line", line, key, "not a list of events", FIX)
    out = []
    for event in value:
        if not isinstance(event, dict) or not isinstance(event.get("reuse_gaps_seconds", []),
                                                           list):
            raise fail(path, "line", line, key, "an event is not an object with "
                       "lifetime_seconds, idle_seconds and reuse_gaps_seconds", FIX)
        times = [number(event.get(k), path, "line", line, f"{key}.{k}", FIX)
                 for k in ("lifetime_seconds", "idle_seconds")]
        gaps = tuple(number(g, path, "line", line, f"{key}.reuse_gaps_seconds", FIX)
                     for g in event.get("reuse_gaps_seconds", []))
        if min((*times, *gaps)) < 0:
            raise fail(path, "line", line, key, "a negative time in an event", FIX)
        if max((*times, *gaps)) > TIME_LIMIT_S:
            raise fail(path, "line", line, key, f"a time beyond {TIME_LIMIT_S:g} s in an "
                       "event", FIX)
        out.append((times[0], times[1], gaps))
    return tuple(out)


def _unused_note(unused: Counter[str], lines: int, reader: str) -> tuple[str, ...]:
    """The note naming the fields `reader` leaves out, where they hold a value."""
    if not unused:
        return ()
    names = sorted(unused, key=lambda k: (-unused[k], k))
    return (f"step-stats fields {reader} does not use, with the number of the {lines:,} lines "
            "where each holds a value: " + ", ".join(f"{k} ({unused[k]:,})" for k in names),)


def _tally(unused: Counter[str], obj: dict[str, Any], used: frozenset[str] | set[str],
           prefix: str) -> None:
    """Count the keys of `obj` outside `used` that hold a value (not null, zero, false or
    empty): what the file says that the step log leaves out."""
    for key, value in obj.items():
        if key not in used and value not in (None, 0, False, "", [], {}):
            if isinstance(value, dict) and not any(v not in (None, 0, False, "", [], {})
                                                   for v in value.values()):
                continue  # an object of zeros (hits_by_source without a connector) says nothing
            unused[prefix + key] += 1


def _decode_from(frame: pd.DataFrame, line_s: np.ndarray, derived: pd.DataFrame,
                 path: Path) -> str:
    """Give `frame` (the steps of lines 2…) the decode tokens of the trace's derived steps that
    end at a line's instant (`line_s`, every line), or refuse a trace whose steps mostly end
    elsewhere (another capture). Returns the note."""
    theirs = derived["end_s"].to_numpy(dtype=np.float64)
    nearer, matched = _same_capture(line_s, theirs, path)
    decode = np.zeros(line_s.size, dtype=np.int64)
    np.add.at(decode, nearer[matched],
              derived["decode_tokens"].to_numpy(dtype=np.int64)[matched])
    frame["decode_tokens"] = decode[1:]
    note = ("decode_tokens from the trace's outputs that reached the tap in each step's "
            "message")
    lost = int((~matched).sum())
    if lost:
        note += f"; {lost:,} of its {theirs.size:,} steps end at no sidecar line (left out)"
    return note


def check_same_capture(path: Path, line_s: np.ndarray, output_s: np.ndarray) -> None:
    """Refuse the sidecar at `path` (its lines' times `line_s`, given as --metrics) when the
    outputs of the vllm-vcr trace it is given with (`output_s`: the instants they reached the
    tap) mostly came at none of its lines: it is another capture's."""
    _same_capture(np.sort(line_s), output_s, path, "output times")


def _same_capture(line_s: np.ndarray, theirs: np.ndarray, path: Path,
                  what: str = "engine steps") -> tuple[np.ndarray, np.ndarray]:
    """For each of the trace's step ends `theirs`, the nearest line and whether it is the
    same instant; refused when more than `MAX_UNMATCHED_SHARE` of them are at no line."""
    if not line_s.size:
        raise TraceSchemaError(f"{path}: no step-stats line; {FIX}")
    right = np.clip(np.searchsorted(line_s, theirs), 0, line_s.size - 1)
    left = np.maximum(right - 1, 0)
    nearer = np.where(np.abs(line_s[left] - theirs) <= np.abs(line_s[right] - theirs),
                      left, right)
    matched = np.abs(line_s[nearer] - theirs) <= SAME_INSTANT_S
    lost = int((~matched).sum())
    if theirs.size and lost > MAX_UNMATCHED_SHARE * theirs.size:
        raise TraceSchemaError(
            f"{path}: {lost:,} of the trace's {theirs.size:,} {what} are at no step-stats "
            "line: the trace and the sidecar are not of one capture; give the "
            "--step-stats-out file of the same `vllm-vcr record` run")
    return nearer, matched
