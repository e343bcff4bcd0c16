"""Reading an engine's Prometheus time series (`--metrics FILE`) into one long table.

Two export shapes are accepted:

- JSON as the Prometheus HTTP API returns a range query:
  `{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"__name__":
  ..., labels...}, "values": [[ts, "v"], ...]}]}}` (a top-level list of such documents, and
  `resultType: vector` with one `"value"` per series, are accepted too);
- CSV with the columns `timestamp, metric, labels, value` (labels as `{k="v",...}`, `k=v;k=v`
  or empty; timestamps in Unix seconds or ISO 8601).

The result is `EngineMetrics`: rows of (time_s, metric, labels, value), NaN samples dropped,
plus lookups that map the vLLM and SGLang names of engines.md §1.9 and §2.7 to one canonical
key per quantity. Errors are one line: file, line or element, field, and how to fix it.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import tzinfo
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from yaotu_trace.data.values import check_unique_names
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import prom_text
from yaotu_trace.ingest.metric_names import (
    CACHE_CONFIG_INFO,
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    LABELLED,
    POOL_FROM_CACHE_CONFIG,
    prometheus_names,
    unused_names,
)
from yaotu_trace.ingest.serverlog import EXPECTED, is_server_log, read_server_log

CSV_COLUMNS: Final = ("timestamp", "metric", "labels", "value")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMetrics:
    """Prometheus samples in long form: `frame` has time_s, metric, labels, value (float).

    Counters are read as Prometheus' `increase()` reads them, reset-aware, with two rules
    for what a range does not show: an export of one instant (a single saved `/metrics` body,
    an instant query) holds each counter's total since its series began, and a counter series
    that first appears after the export's first sample began then, from zero (SGLang creates
    its retraction counter at the first retraction).
    """

    frame: pd.DataFrame
    path: str
    # What the reader knows about the samples' dating that the diagnosis should say.
    notes: tuple[str, ...] = ()
    # The year given to a server log's year-less times (None: none assumed), so that the
    # trace's own year can replace it.
    log_year: int | None = None
    # The zone a server log's zone-less times were read in (`--log-tz`; None: UTC), kept so
    # that reading it again with the trace's year keeps it.
    log_zone: tzinfo | None = None
    # Whether a counter series that appears after the export's first sample began then, from
    # zero (a Prometheus series is created when first counted). A server log places its own
    # counters' starting values, so it says False.
    new_series_from_zero: bool = True

    @property
    def names(self) -> frozenset[str]:
        """Every metric name present."""
        return frozenset(self.frame["metric"].unique().tolist())

    @property
    def instant(self) -> bool:
        """Whether every sample is of one instant: counters are then totals since start."""
        times = self.frame["time_s"]
        return bool(len(times)) and float(times.min()) == float(times.max())

    def engines(self, key: str) -> int:
        """How many label sets (engines, instances) export `key`'s series."""
        name = self.name_of(key)
        return 0 if name is None else int(self._series(name)["labels"].nunique())

    def _first(self, candidates: tuple[str, ...], suffix: str = "") -> str | None:
        names = self.names
        return next((c for c in candidates if c + suffix in names), None)

    def name_of(self, key: str) -> str | None:
        """The engine's metric name serving canonical `key`, or None when not exported."""
        if key in GAUGES:
            return self._first(GAUGES[key])
        if key in COUNTERS:
            return self._first(COUNTERS[key])
        if key in HISTOGRAMS:
            return self._first(HISTOGRAMS[key], "_count")
        raise KeyError(key)

    def _series(self, name: str) -> pd.DataFrame:
        return self.frame[self.frame["metric"] == name]

    def label_values(self, key: str) -> tuple[str, ...]:
        """The values of `key`'s splitting label (`LABELLED`) that the export carries."""
        name = self.name_of(key)
        if name is None or key not in LABELLED:
            return ()
        label = LABELLED[key]
        found = {_label_values(text).get(label) for text in self._series(name)["labels"]}
        return tuple(sorted(v for v in found if v))

    def _labelled(self, key: str, value: str | None) -> pd.DataFrame | None:
        name = self.name_of(key)
        if name is None:
            return None
        rows = self._series(name)
        if value is None:
            return rows
        label = LABELLED[key]
        keep = rows["labels"].astype(str).map(lambda t: _label_values(t).get(label) == value)
        return rows[keep.to_numpy(dtype=bool)]

    def gauge(self, key: str, how: str = "sum", value: str | None = None) -> pd.DataFrame | None:
        """A gauge over time, combined across label sets (engines) per timestamp.

        `how` is "sum" for counts (requests waiting in all engines) or "max" for ratios (the
        fullest engine's KV usage); `value` keeps one value of `key`'s splitting label.
        Returns columns time_s, value sorted by time.
        """
        rows = self._labelled(key, value)
        if rows is None:
            return None
        grouped = rows.groupby("time_s", sort=True)["value"]
        out = grouped.max() if how == "max" else grouped.sum()
        return out.reset_index()

    def _origin_s(self) -> float:
        """Before this, a series that appears later did not exist (inf: never assume so)."""
        return float(self.frame["time_s"].min()) if self.new_series_from_zero else np.inf

    def counter_increase(self, key: str, value: str | None = None) -> float | None:
        """Total increase of a counter over the export (see the class docstring), summed over
        label sets; `value` keeps one value of `key`'s splitting label."""
        rows = self._labelled(key, value)
        if rows is None:
            return None
        return _increase(rows, self._origin_s(), self.instant)

    def counter_steps(self, key: str) -> pd.DataFrame | None:
        """Times at which a counter went up and by how much (columns time_s, delta)."""
        name = self.name_of(key)
        if name is None:
            return None
        parts = [_deltas(rows, self._origin_s(), self.instant)
                 for _, rows in self._series(name).groupby("labels", sort=False)]
        if not parts:
            return None
        out = pd.concat(parts, ignore_index=True)
        return out[out["delta"] > 0].sort_values("time_s").reset_index(drop=True)

    def histogram_mean(self, key: str) -> float | None:
        """Mean observation of a histogram over the export: Δ`_sum` / Δ`_count`."""
        name = self.name_of(key)
        if name is None or name + "_sum" not in self.names:
            return None
        count = _increase(self._series(name + "_count"), self._origin_s(), self.instant)
        total = _increase(self._series(name + "_sum"), self._origin_s(), self.instant)
        if not count:
            return None
        return total / count

    def histogram_count(self, key: str) -> float | None:
        """Observations added to a histogram over the export (Δ`_count`)."""
        name = self.name_of(key)
        if name is None:
            return None
        return _increase(self._series(name + "_count"), self._origin_s(), self.instant)

    def histogram_sum(self, key: str) -> float | None:
        """The observations' total added over the export (Δ`_sum`)."""
        name = self.name_of(key)
        if name is None or name + "_sum" not in self.names:
            return None
        return _increase(self._series(name + "_sum"), self._origin_s(), self.instant)

    def bucket_increase(self, key: str, le: float) -> float | None:
        """Observations at or below `le` added over the export (the `_bucket{le}` series)."""
        name = self.name_of(key)
        if name is None or name + "_bucket" not in self.names:
            return None
        rows = self._series(name + "_bucket")
        bound = rows["labels"].astype(str).map(lambda t: _le(_label_values(t).get("le")))
        rows = rows[(bound == le).to_numpy(dtype=bool)]
        return None if rows.empty else _increase(rows, self._origin_s(), self.instant)


def _le(text: str | None) -> float:
    try:
        return float(text) if text is not None else np.nan
    except ValueError:
        return np.nan


def _label_values(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def _deltas(series: pd.DataFrame, origin_s: float, instant: bool) -> pd.DataFrame:
    """One label set's increases (time_s, delta): a drop is a restart from zero, and the
    first sample counts from zero when the export is one instant or the series began after
    the export's first sample."""
    series = series.sort_values("time_s")
    times = series["time_s"].to_numpy(dtype=np.float64)
    values = series["value"].to_numpy(dtype=np.float64)
    delta = np.diff(values)
    delta = np.where(delta < 0, values[1:], delta)
    first = values[0] if (instant or times[0] > origin_s) else 0.0
    return pd.DataFrame({"time_s": times, "delta": np.concatenate(([first], delta))})


def _increase(rows: pd.DataFrame, origin_s: float, instant: bool) -> float:
    return float(sum(_deltas(series, origin_s, instant)["delta"].sum()
                     for _, series in rows.groupby("labels", sort=False)))


def read_metrics(path: str | Path, *, year: int | None = None,
                 zone: tzinfo | None = None) -> EngineMetrics:
    """Read a Prometheus range-query export (JSON or CSV), /metrics text (`prom_text`) or an
    engine server log (`serverlog`, found by its content; `year` dates its year-less times,
    `zone` is the zone of its zone-less ones, UTC when None: `serverlog.log_zone`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    notes: tuple[str, ...] = ()
    log_year = None
    kind = "export"  # a range or instant query's export; else "log" or "text"
    if path.is_dir() and prom_text.is_scrape_folder(path):
        rows, notes = prom_text.read_prom_folder(path)
        kind = "text"
    elif path.is_file() and (suffix == ".log" or (
            suffix not in (".json", ".csv", ".tsv") and is_server_log(path))):
        rows, log_notes, log_year = read_server_log(path, year=year, zone=zone)
        notes = tuple(log_notes)
        kind = "log"
    elif path.is_file() and suffix in prom_text.SUFFIXES and prom_text.looks_like_text(path):
        rows, notes = prom_text.read_prom_text(path)
        kind = "text"
    elif path.is_file() and suffix in prom_text.SUFFIXES and suffix:
        raise TraceReadError(
            f"{path}: is neither /metrics text (no '# HELP', '# TYPE' or 'name{{labels}} "
            f"value' line at its start) nor an engine server log ({EXPECTED}); save the "
            "engine's /metrics response as it is (curl -s http://HOST:PORT/metrics > m.prom)"
        )
    elif path.is_dir():
        raise TraceReadError(f"{path}: is a folder, not a metrics file; give the export's "
                             "file (.json or .csv) or a folder of /metrics text snapshots")
    elif not path.is_file():
        raise TraceReadError(f"{path}: no such metrics file; check the --metrics path")
    else:
        try:
            rows = _read_export(path, suffix)
        except (TraceReadError, TraceSchemaError) as err:
            raise _as_trace(path) or err from None
    frame = pd.DataFrame(rows, columns=["time_s", "metric", "labels", "value"])
    frame = frame.astype({"time_s": "float64", "value": "float64", "metric": object,
                          "labels": object})
    frame = frame[np.isfinite(frame["value"].to_numpy())].reset_index(drop=True)
    if frame.empty:
        raise TraceReadError(
            f"{path}: the metrics export holds no samples; export a range query with data"
        )
    if kind != "log":
        frame, named = _engine_names(frame, path)
        notes = (*notes, *named)
    frame = _with_pool_from_cache_config(frame)
    metrics = EngineMetrics(frame=frame, path=str(path), notes=notes, log_year=log_year,
                            log_zone=zone, new_series_from_zero=kind != "log")
    if metrics.instant and kind == "export":  # a text snapshot's own notes say so
        metrics = replace(metrics, notes=(*metrics.notes, _totals_note(metrics)))
    if metrics.instant:
        return _without_instant_gauges(metrics)
    late = _born_late(metrics) if kind != "log" else []
    if late:
        names = sorted({name for name, _ in late})
        shown = ", ".join(names[:NAMED_UNUSED])
        more = f" and {len(names) - NAMED_UNUSED} more" if len(names) > NAMED_UNUSED else ""
        metrics = replace(metrics, notes=(*metrics.notes, (
            f"{len(late)} counter series first appear after the export's first sample and are "
            f"counted from zero, as created then (engines create some on first use): "
            f"{shown}{more}")))
    return metrics


def _born_late(metrics: EngineMetrics) -> list[tuple[str, str]]:
    """The counter series (name, labels) whose first sample comes after the export's first."""
    counters = {n for names in COUNTERS.values() for n in names}
    frame = metrics.frame[metrics.frame["metric"].isin(counters)]
    if frame.empty:
        return []
    first = frame.groupby(["metric", "labels"], sort=True)["time_s"].min()
    origin = float(metrics.frame["time_s"].min())
    return [(str(name), str(labels)) for (name, labels), t in first.items() if t > origin]


# Gauges that hold for the whole process (the pool's size), judged even from one instant.
_CONFIG_GAUGES: Final = ("max_total_tokens", "page_size", "max_running")


def _without_instant_gauges(metrics: EngineMetrics) -> EngineMetrics:
    """An export of one instant without its changing gauges: a queue, a KV usage at
    preemption or an imbalance between engines needs them over time, so they are named in a
    note with their values and not judged."""
    kept = {n for key in _CONFIG_GAUGES for n in GAUGES[key]}
    changing = {n for key, names in GAUGES.items() if key not in _CONFIG_GAUGES for n in names}
    frame = metrics.frame
    drop = frame["metric"].isin(changing - kept).to_numpy(dtype=bool)
    if not drop.any():
        return metrics
    shown = []
    for key in ("num_waiting", "num_running", "kv_usage"):
        g = metrics.gauge(key, how="max" if key == "kv_usage" else "sum")
        if g is not None and len(g):
            shown.append(f"{key} {float(g['value'].iloc[-1]):g}")
    values = f" ({', '.join(shown)})" if shown else ""
    if drop.all():
        raise TraceReadError(
            f"{metrics.path}: is one instant of gauges only{values}: a gauge at one instant "
            "shows no queue, KV usage or imbalance over time and the file has no counter to "
            "total; export a range query, or save /metrics scrapes over the run")
    note = (f"the metrics export {metrics.path} is one instant: its gauges{values} are shown "
            "here and not judged, since a queue, a KV usage at preemption or an imbalance "
            "between engines needs them over time (export a range query, or save /metrics "
            "scrapes over the run)")
    return replace(metrics, frame=frame[~drop].reset_index(drop=True),
                   notes=(*metrics.notes, note))


# Unused series named in a note before the rest are only counted.
NAMED_UNUSED = 5


def _engine_names(frame: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """Series under the engines' own names, with notes on renamed and unused ones; a file
    none of whose series this tool reads is refused rather than judged on nothing."""
    renames = prometheus_names(frame["metric"].unique())
    notes: list[str] = []
    if renames:
        frame = frame.assign(metric=frame["metric"].map(lambda n: renames.get(n, n)))
        example = min(renames)
        notes.append(f"{len(renames)} series named as Prometheus 2.x stores them are read "
                     f"under the engine's names, e.g. {example} as {renames[example]}")
    names = frame["metric"].unique()
    unused = unused_names(names)
    if len(unused) == len(names):
        shown = ", ".join(unused[:NAMED_UNUSED])
        raise TraceReadError(
            f"{path}: none of its {len(unused)} series is one this tool reads (e.g. {shown}); "
            "--metrics reads vLLM (vllm:…) and SGLang (sglang:…) engine series: export "
            "those (docs/inputs.md lists them)")
    if unused:
        per_series = frame[frame["metric"].isin(unused)].groupby("metric")["labels"].nunique()
        shown = ", ".join(unused[:NAMED_UNUSED])
        more = f" and {len(unused) - NAMED_UNUSED} more" if len(unused) > NAMED_UNUSED else ""
        notes.append(f"{int(per_series.sum())} series of {len(unused)} name(s) are not used: "
                     f"{shown}{more}")
    return frame, tuple(notes)


def _totals_note(metrics: EngineMetrics) -> str:
    """What a one-instant export's counters cover: since each series' `_created` time where
    the file has one (vLLM), else since the engine's process started (SGLang's multiprocess
    collector writes none)."""
    created = sorted(n for n in metrics.names if n.endswith("_created"))
    since = ("since each series' _created time" if created else
             "since the engine started (the file has no _created samples to date them)")
    engines = metrics.engines("preemptions") or metrics.engines("num_running")
    over = f", summed over {engines} engines" if engines > 1 else ""
    return (f"the metrics export {metrics.path} is one instant: its counters are read as "
            f"totals {since}{over}, not as increases over a range")


def _read_export(path: Path, suffix: str) -> list[tuple[float, str, str, float]]:
    if suffix == ".json":
        return _read_json(path)
    if suffix in (".csv", ".tsv"):
        return _read_csv(path)
    raise TraceReadError(
        f"{path}: metrics are read from .json (Prometheus API export), .csv "
        f"(timestamp, metric, labels, value), an engine server log ({EXPECTED}) or "
        f"/metrics text (.txt, .prom); got '{suffix or '(no extension)'}'"
    )


def _as_trace(path: Path) -> TraceReadError | None:
    """The error for a request trace (or a benchmark summary) given as --metrics: where it
    belongs, rather than which metrics field it lacks."""
    from yaotu_trace.ingest.detect import detect_format

    try:
        fmt = detect_format(path)
    except TraceReadError as err:
        return err if "summary table" in str(err) else None
    return TraceReadError(
        f"{path}: is a request trace ({fmt.value}), not engine telemetry; give it as the "
        f"trace (trace diagnose {path}), and the engine's log or /metrics export as --metrics")


def _with_pool_from_cache_config(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` plus the KV pool in tokens that each `vllm:cache_config_info` sample names.

    Newer vLLM puts the engine's own count in a `kv_cache_size_tokens` label; older releases
    give `num_gpu_blocks` and `block_size`, whose usable pool is (num_gpu_blocks − 1) ×
    block_size, since block 0 is vLLM's null block (as a step log's kv_blocks_total counts it).
    """
    info = frame[frame["metric"] == CACHE_CONFIG_INFO]
    if info.empty:
        return frame
    labels = info["labels"].astype(str)

    def number(key: str) -> pd.Series:
        found = labels.str.extract(rf"(?:^|,){key}=(\d+)(?:,|$)")[0]
        return pd.to_numeric(found, errors="coerce")

    blocks, size, stated = number("num_gpu_blocks"), number("block_size"), number(
        "kv_cache_size_tokens")
    tokens = stated.where(stated > 0, (blocks - 1) * size)
    known = (tokens > 0).to_numpy()
    if not known.any():
        return frame
    pool = pd.DataFrame({"time_s": info["time_s"].to_numpy()[known],
                         "metric": POOL_FROM_CACHE_CONFIG,
                         "labels": _engine_labels(labels[known]),
                         "value": tokens.to_numpy(dtype=np.float64)[known]})
    return pd.concat([frame, pool], ignore_index=True)


def _engine_labels(labels: pd.Series) -> list[str]:
    """The engine-identifying labels of an info sample (instance, pod, engine), as a key."""
    keep = ("instance", "pod", "engine")
    out = []
    for text in labels:
        parts = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        out.append(_labels_key({k: parts[k] for k in keep if k in parts}))
    return out


def _labels_key(labels: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels) if k != "__name__")


def _number(text: Any, path: Path, where: str, field: str, fix: str) -> float:
    if isinstance(text, bool):
        raise TraceReadError(f"{path}: {where}, field '{field}': {text!r} is not a number; {fix}")
    try:
        return float(text)
    except (TypeError, ValueError):
        raise TraceReadError(
            f"{path}: {where}, field '{field}': {text!r} is not a number; {fix}"
        ) from None


def _time(ts: float, path: Path, where: str) -> float:
    """A sample's timestamp, which must be a finite time: the export's clock is matched with
    the trace's (`yaotu_trace.ingest.telemetry`)."""
    if not math.isfinite(ts):
        raise TraceReadError(f"{path}: {where}, field 'timestamp': {ts} is not a finite time; "
                             "give Unix seconds, e.g. 1732931200.5")
    return ts


def _read_json(path: Path) -> list[tuple[float, str, str, float]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceReadError(
            f"{path}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg}); "
            "save the body of /api/v1/query_range as is"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceReadError(f"{path}: cannot read ({exc}); check the file") from exc
    docs = doc if isinstance(doc, list) else [doc]
    rows: list[tuple[float, str, str, float]] = []
    for d, item in enumerate(docs):
        where = f"document {d + 1}" if isinstance(doc, list) else "document"
        if not isinstance(item, dict):
            raise TraceReadError(f"{path}: {where}: expected a JSON object with 'data.result'; "
                                 "save the body of /api/v1/query_range as is")
        status = item.get("status", "success")
        if status != "success":
            raise TraceReadError(
                f"{path}: {where}, field 'status': {status!r} "
                f"({item.get('error', 'no error text')})"
                "; the query failed, fix it and export again"
            )
        data = item.get("data")
        kind = data.get("resultType", "matrix") if isinstance(data, dict) else "matrix"
        if kind not in ("matrix", "vector"):
            raise TraceReadError(
                f"{path}: {where}, field 'data.resultType': {kind!r} holds no time series; "
                "export a Prometheus range query (resultType matrix)"
            )
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise TraceReadError(
                f"{path}: {where}, field 'data.result': missing or not a list; export a "
                "Prometheus range query (resultType matrix)"
            )
        for i, series in enumerate(result):
            at = f"{where}, result[{i}]"
            metric = series.get("metric") if isinstance(series, dict) else None
            if not isinstance(metric, dict) or not metric.get("__name__"):
                raise TraceReadError(
                    f"{path}: {at}, field 'metric.__name__': missing; query the metric by name "
                    "(not an expression such as rate(...)) so the export keeps it"
                )
            name = str(metric["__name__"])
            labels = _labels_key(metric)
            values = series.get("values")
            if values is None and "value" in series:
                values = [series["value"]]
            if not isinstance(values, list):
                raise TraceReadError(
                    f"{path}: {at}, field 'values': missing or not a list of [timestamp, "
                    "\"value\"] pairs; export a range query"
                )
            for j, pair in enumerate(values):
                pat = f"{at}.values[{j}]"
                if not isinstance(pair, list | tuple) or len(pair) != 2:
                    raise TraceReadError(
                        f"{path}: {pat}: expected a [timestamp, \"value\"] pair, got {pair!r}"
                    )
                ts = _time(_number(pair[0], path, pat, "timestamp", "give Unix seconds"), path,
                           pat)
                value = _number(pair[1], path, pat, "value",
                                "Prometheus writes numbers as strings such as \"0.5\"")
                rows.append((ts, name, labels, value))
    return rows


def _parse_labels(text: str, path: Path, line: int) -> str:
    text = text.strip()
    if not text or text == "{}":
        return ""
    body = text[1:-1] if text.startswith("{") and text.endswith("}") else text
    labels: dict[str, str] = {}
    for part in _split_labels(body):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise TraceReadError(
                f"{path}: line {line}, field 'labels': cannot read {part.strip()!r}; write "
                "labels as {{k=\"v\",...}} or k=v;k=v"
            )
        labels[key.strip()] = value.strip().strip('"')
    return _labels_key(labels)


def _split_labels(body: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch in ",;" and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _timestamp(text: str, path: Path, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = pd.Timestamp(text)
    except (ValueError, TypeError):
        raise TraceReadError(
            f"{path}: line {line}, field 'timestamp': {text!r} is neither Unix seconds nor an "
            "ISO 8601 time; give e.g. 1732931200.5 or 2026-11-30T01:00:00Z"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return stamp.timestamp()


def _read_csv(path: Path) -> list[tuple[float, str, str, float]]:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    rows: list[tuple[float, str, str, float]] = []
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh, delimiter=delimiter)
            header = [h.strip() for h in (reader.fieldnames or [])]
            check_unique_names(path, header)
            missing = [c for c in CSV_COLUMNS if c not in header and c != "labels"]
            if missing:
                raise TraceReadError(
                    f"{path}: line 1, header lacks column(s) {', '.join(map(repr, missing))} "
                    f"(have: {', '.join(header) or 'nothing'}); a metrics CSV has "
                    f"{', '.join(CSV_COLUMNS)}"
                )
            reader.fieldnames = header
            for number, record in enumerate(reader, start=2):
                metric = (record.get("metric") or "").strip()
                if not metric:
                    raise TraceReadError(
                        f"{path}: line {number}, field 'metric': empty; give the metric name, "
                        "e.g. vllm:num_requests_waiting"
                    )
                ts = _time(_timestamp((record.get("timestamp") or "").strip(), path, number),
                           path, f"line {number}")
                value = _number((record.get("value") or "").strip(), path, f"line {number}",
                                "value", "give a number (NaN rows may be dropped)")
                labels = _parse_labels(record.get("labels") or "", path, number)
                rows.append((ts, metric, labels, value))
    except UnicodeDecodeError as exc:
        raise TraceReadError(f"{path}: not UTF-8 text ({exc.reason}); save the CSV as UTF-8") \
            from exc
    except csv.Error as exc:
        raise TraceReadError(f"{path}: line {reader.line_num}: not CSV text ({exc}); export "
                             "the metrics as timestamp, metric, labels, value") from exc
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc}); check the file") \
            from exc
    return rows
