"""A benchmark result that holds run-level numbers only: what it says, for `trace analyze`.

Most benchmark results people keep (a `vllm bench serve --save-result` file without
`--save-detailed`, AIPerf's `profile_export_aiperf.json`, an inference-perf stage report) hold
aggregates: throughput, request counts and latency percentiles, no per-request rows. Such a
file is not a trace, so no command can replay or profile it; `trace analyze` shows what it holds
(`BenchSummary`, with units as the tool gave them) and names what needs per-request data.
A format module offers a summary through its descriptor (`TraceFormatSpec.summary`, read by
`ingest.summary.read_summary`); its reader refuses the same file with one line pointing at the
per-request export.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from yaotu_trace.data.compressed import open_compressed

# What `trace analyze` shows of a trace and a summary cannot: each needs one row per request.
UNAVAILABLE: Final = (
    "arrivals (per-request send times)",
    "lengths (per-request prompt and output tokens)",
    "population (tenants, sessions, models per request)",
    "observed timing distributions (per-request TTFT, ITL, end-to-end)",
    "prefix reuse (prompt content)",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchValue:
    """One number (or setting) of the run, named as the tool names it (`key`)."""

    key: str
    label: str
    value: float | str
    unit: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchLatency:
    """One latency metric's statistics over the run's requests: `stats` maps "mean", "median",
    "p99", ... to a value in `unit`."""

    metric: str  # "TTFT"
    name: str  # "time to first token"
    unit: str
    stats: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchSummary:
    """What a summary-only benchmark result holds, and what it cannot give."""

    tool: str  # "vllm bench serve"
    format_name: str  # the `--input-format` name: "vllm-bench"
    run: tuple[BenchValue, ...]  # settings: model, request rate, ...
    totals: tuple[BenchValue, ...]  # counts, durations, throughputs
    latencies: tuple[BenchLatency, ...]
    unavailable: tuple[str, ...] = UNAVAILABLE
    fix: str  # how to get the per-request data
    notes: tuple[str, ...] = field(default_factory=tuple)


def document_head(path: Path, size: int = 65536) -> str:
    """The first characters of a JSON document, so that a summary reader can pass over a large
    per-request file without parsing it."""
    with open_compressed(path) as fh:
        return fh.read(size).decode("utf-8", errors="replace")


def latencies(
    doc: Mapping[str, Any], pattern: re.Pattern[str], names: Mapping[str, tuple[str, str]],
    unit: str,
) -> tuple[BenchLatency, ...]:
    """The latency statistics of flat keys such as `p99_ttft_ms`.

    `pattern` has the groups `stat` and `metric`; `names` maps a metric's key to its short and
    long names, in display order. Statistics that are not finite numbers are left out.
    """
    found: dict[str, dict[str, float]] = {}
    for key, value in doc.items():
        match = pattern.fullmatch(key)
        if match is None or match["metric"] not in names or not is_number(value):
            continue
        found.setdefault(match["metric"], {})[match["stat"]] = float(value)
    return tuple(
        BenchLatency(metric=names[m][0], name=names[m][1], unit=unit, stats=_ordered(found[m]))
        for m in names if m in found
    )


def distribution(metric: str, name: str, unit: str, stats: object) -> BenchLatency | None:
    """A metric's statistics given as one object (`{"mean": ..., "p99": ..., "max": ...}`), or
    None when there are none; entries that are not finite numbers are left out."""
    if not isinstance(stats, Mapping):
        return None
    found = {str(k): float(v) for k, v in stats.items() if is_number(v)}
    if not found:
        return None
    return BenchLatency(metric=metric, name=name, unit=unit, stats=_ordered(found))


def values(
    doc: Mapping[str, Any], known: Mapping[str, tuple[str, str]], *, numbers_only: bool = True,
) -> tuple[BenchValue, ...]:
    """The keys of `known` (key -> label, unit) that `doc` holds, in `known`'s order."""
    return tuple(
        BenchValue(key=key, label=label, value=_value(doc[key]), unit=unit)
        for key, (label, unit) in known.items()
        if key in doc and (is_number(doc[key]) or (not numbers_only and _is_setting(doc[key])))
    )


def other_numbers(doc: Mapping[str, Any], taken: Iterable[str]) -> tuple[BenchValue, ...]:
    """Top-level numbers no table above named, under their own key; the unit from the key's
    suffix (`_ms`, `_s`) when it has one."""
    skip = set(taken)
    return tuple(
        BenchValue(key=key, label=key, value=float(value), unit=_unit_of(key))
        for key, value in doc.items() if key not in skip and is_number(value)
    )


def finite_numbers(values: object) -> np.ndarray | None:
    """A JSON list of finite numbers as a float64 array, or None for anything else (a true, a
    string, a NaN inside). Types are checked once per list, in C, not once per value in Python:
    a benchmark file holds one gap per streamed chunk, millions in all."""
    if not isinstance(values, list) or not set(map(type, values)) <= {int, float}:
        return None
    array = np.asarray(values, dtype=np.float64)
    return array if bool(np.isfinite(array).all()) else None


def is_number(value: object) -> bool:
    """A finite int or float (a JSON true is not a number)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _is_setting(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _value(value: Any) -> float | str:
    return float(value) if is_number(value) else str(value)


def _unit_of(key: str) -> str:
    for suffix, unit in (("_ms", "ms"), ("_s", "s"), ("_tokens", "tokens")):
        if key.endswith(suffix):
            return unit
    return ""


def _ordered(stats: Mapping[str, float]) -> dict[str, float]:
    """mean, median, std, then percentiles ascending (p25 < p99 < p99.9), min and max last."""
    def rank(name: str) -> tuple[int, float]:
        if name.startswith("p") and _is_percentile(name[1:]):
            return (3, float(name[1:]))
        order = {"mean": 0, "median": 1, "std": 2, "min": 4, "max": 5}
        return (order.get(name, 6), 0.0)

    return {name: stats[name] for name in sorted(stats, key=rank)}


def _is_percentile(text: str) -> bool:
    try:
        return 0 <= float(text) <= 100
    except ValueError:
        return False
