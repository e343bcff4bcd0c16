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
- `num_preempted` = `prefix_cache_stats.preempted_requests`: vLLM counts a preemption there
  when the request is admitted again, so the step is the readmission's, and the total is the
  run's preemptions once every preempted request came back; `recomputed_tokens` = its
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
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from yaotu_trace.data.compressed import open_compressed
from yaotu_trace.data.values import SOURCE_ROW
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

    times, cols, unused = _records(path)
    if len(times) < 2:
        raise TraceSchemaError(f"{path}: {len(times)} step-stats line(s); a step needs the line "
                               "before it (the first seeds the clock), and an empty file means "
                               f"the engine ran without stats (--disable-log-stats); {FIX}")
    end_s = np.asarray(times, dtype=np.float64) / 1000.0
    data = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    start_s = end_s[:-1].copy()
    idle = (data["running"][:-1] + data["waiting"][:-1]) == 0
    if arrivals_s is not None and arrivals_s.size and idle.any():
        ordered = np.sort(np.asarray(arrivals_s, dtype=np.float64))
        nxt = np.searchsorted(ordered, start_s, side="right")
        ok = idle & (nxt < ordered.size)
        start_s[ok] = np.minimum(ordered[np.minimum(nxt[ok], ordered.size - 1)], end_s[1:][ok])
    frame = pd.DataFrame({
        "start_s": start_s, "end_s": end_s[1:],
        "prefill_tokens": data["prefill"][1:].astype(np.int64),
        "num_running": data["running"][1:].astype(np.int64),
        "num_waiting": data["waiting"][1:].astype(np.int64),
        "kv_usage": data["usage"][1:],
        "num_preempted": data["preempted"][1:].astype(np.int64),
        "recomputed_tokens": data["recomputed"][1:].astype(np.int64),
    })
    frame[SOURCE_ROW] = np.arange(2, len(times) + 1)  # errors name the file's line
    notes = [f"engine steps from vllm-vcr's step-stats sidecar ({path.name}): one per line "
             "after the first, each from the line before (after an idle engine, from the next "
             "arrival); num_waiting = num_waiting_reqs + num_skipped_waiting_reqs, kv_usage = "
             "kv_cache_usage, prefill_tokens the uncached prompt tokens of the requests "
             "admitted (a chunked prompt whole in its first step), num_preempted the requests "
             "readmitted after a preemption and recomputed_tokens what they computed (an upper "
             "bound of the recompute: a prefill preempted before it finished counts whole)"]
    if derived is not None:
        notes.append(_decode_from(frame, end_s, derived, path))
    if unused:
        names = sorted(unused, key=lambda k: (-unused[k], k))
        notes.append("step-stats fields the step log does not use, with the number of the "
                     f"{len(times):,} lines where each holds a value: "
                     + ", ".join(f"{k} ({unused[k]:,})" for k in names))
    return frame, tuple(notes)


def _records(path: Path) -> tuple[list[float], dict[str, list[float]], Counter[str]]:
    """Each line's time (ms) and the numbers the step log takes from it, in file order."""
    times: list[float] = []
    cols: dict[str, list[float]] = {"running": [], "waiting": [], "usage": [], "prefill": [],
                                    "preempted": [], "recomputed": []}
    unused: Counter[str] = Counter()
    for line, text in text_lines(path):
        if not text.strip():
            continue
        record = json_record(text, path, "line", line)
        ts = number(record.get("ts_ms"), path, "line", line, "ts_ms", FIX)
        if ts < 0:
            raise fail(path, "line", line, "ts_ms", f"{ts} ms is negative", FIX)
        if times and ts < times[-1]:
            raise fail(path, "line", line, "ts_ms", f"{ts} ms comes before the line above "
                       f"({times[-1]} ms): two captures joined?", "keep one capture's lines "
                       "in the order vllm-vcr wrote them")
        times.append(ts)
        for key, value in _line(record, path, line, unused).items():
            cols[key].append(value)
    return times, cols, unused


def _line(record: dict[str, Any], path: Path, line: int, unused: Counter[str]
          ) -> dict[str, float]:
    """The step-log numbers of one line's `scheduler` (its unused fields tallied)."""
    stats = record.get("scheduler")
    if not isinstance(stats, dict):
        raise fail(path, "line", line, "scheduler", "not an object", FIX)
    prefix = stats.get("prefix_cache_stats")
    p = "scheduler.prefix_cache_stats."
    if not isinstance(prefix, dict):
        raise fail(path, "line", line, p[:-1], "not an object", FIX)

    def count(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
        if obj.get(key) is None and default is not None:
            return default
        return whole(obj.get(key), path, "line", line, where + key, FIX)

    usage = number(stats.get("kv_cache_usage"), path, "line", line,
                   "scheduler.kv_cache_usage", FIX)
    if not 0.0 <= usage <= 1.0:
        raise fail(path, "line", line, "scheduler.kv_cache_usage",
                   f"{usage} is not a share of the pool (0 to 1)", FIX)
    queries, hits = count(prefix, "queries", p), count(prefix, "hits", p)
    pq, ph = count(prefix, "preempted_queries", p, 0), count(prefix, "preempted_hits", p, 0)
    if hits > queries or ph > pq:
        raise fail(path, "line", line, p + "hits", f"more hits than queried tokens "
                   f"({hits:,} of {queries:,}, preempted {ph:,} of {pq:,})", FIX)
    _tally(unused, record, {"ts_ms", "scheduler"}, "")
    _tally(unused, stats, _SCHEDULER_USED, "scheduler.")
    _tally(unused, prefix, _PREFIX_USED, p)
    return {"running": count(stats, "num_running_reqs", "scheduler."),
            "waiting": (count(stats, "num_waiting_reqs", "scheduler.")
                        + count(stats, "num_skipped_waiting_reqs", "scheduler.", 0)),
            "usage": usage, "prefill": queries - hits + pq - ph,
            "preempted": count(prefix, "preempted_requests", p, 0), "recomputed": pq - ph}


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
    right = np.clip(np.searchsorted(line_s, theirs), 0, line_s.size - 1)
    left = np.maximum(right - 1, 0)
    nearer = np.where(np.abs(line_s[left] - theirs) <= np.abs(line_s[right] - theirs),
                      left, right)
    matched = np.abs(line_s[nearer] - theirs) <= SAME_INSTANT_S
    lost = int((~matched).sum())
    if theirs.size and lost > MAX_UNMATCHED_SHARE * theirs.size:
        raise TraceSchemaError(
            f"{path}: {lost:,} of the trace's {theirs.size:,} engine steps end at no step-stats "
            "line: the trace and the sidecar are not of one capture; give the "
            "--step-stats-out file of the same `vllm-vcr record` run")
    decode = np.zeros(line_s.size, dtype=np.int64)
    np.add.at(decode, nearer[matched],
              derived["decode_tokens"].to_numpy(dtype=np.int64)[matched])
    frame["decode_tokens"] = decode[1:]
    note = ("decode_tokens from the trace's outputs that reached the tap in each step's "
            "message")
    if lost:
        note += f"; {lost:,} of its {theirs.size:,} steps end at no sidecar line (left out)"
    return note
