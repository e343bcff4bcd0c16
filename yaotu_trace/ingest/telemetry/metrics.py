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
`ingest.load.read_metrics` picks the reader of a file (this export's, `prom_text`'s or
`serverlog`'s) and `engine_metrics` turns what it read into `EngineMetrics`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.metric_names import (
    CACHE_CONFIG_INFO,
    COUNTERS,
    CPU_TIER_FROM_OFFLOAD_CONFIG,
    GAUGES,
    OFFLOAD_CONFIG_INFO,
    POOL_FROM_CACHE_CONFIG,
    prometheus_names,
    unused_names,
)
from yaotu_trace.data.values import check_unique_names
from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest.telemetry.serverlog import EXPECTED

if TYPE_CHECKING:
    import pandas as pd

CSV_COLUMNS: Final = ("timestamp", "metric", "labels", "value")


def engine_metrics(rows: list[tuple[float, str, str, float]], path: Path, *,
                   kind: str, notes: tuple[str, ...] = (), log_year: int | None = None,
                   zone: tzinfo | None = None) -> EngineMetrics:
    """The samples one reader found (`kind`: "export", "text" or "log") as `EngineMetrics`:
    NaN samples dropped, series under the engines' own names, notes on what a one-instant
    export or a series that starts late can and cannot show."""
    import pandas as pd

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
_CONFIG_GAUGES: Final = ("max_total_tokens", "page_size", "max_running", "cpu_tier_tokens")


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


def read_export(path: Path, suffix: str) -> list[tuple[float, str, str, float]]:
    if suffix == ".json":
        return _read_json(path)
    if suffix in (".csv", ".tsv"):
        return _read_csv(path)
    raise TraceReadError(
        f"{path}: metrics are read from .json (Prometheus API export), .csv "
        f"(timestamp, metric, labels, value), an engine server log ({EXPECTED}) or "
        f"/metrics text (.txt, .prom); got '{suffix or '(no extension)'}'"
    )


def _with_pool_from_cache_config(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` plus the KV pool in tokens that each `vllm:cache_config_info` sample names, and
    the CPU offload tier in tokens that each `vllm:kv_offload_config_info` sample names.

    Newer vLLM puts the engine's own count in a `kv_cache_size_tokens` label; older releases
    give `num_gpu_blocks` and `block_size`, whose usable pool is (num_gpu_blocks − 1) ×
    block_size, since block 0 is vLLM's null block (as a step log's kv_blocks_total counts it).
    """
    def pool(number: Callable[[str], pd.Series]) -> pd.Series:
        stated = number("kv_cache_size_tokens")
        return stated.where(stated > 0, (number("num_gpu_blocks") - 1) * number("block_size"))

    frame = _with_info_series(frame, CACHE_CONFIG_INFO, POOL_FROM_CACHE_CONFIG, pool)
    return _with_info_series(frame, OFFLOAD_CONFIG_INFO, CPU_TIER_FROM_OFFLOAD_CONFIG,
                             lambda number: number("cpu_kv_cache_size_tokens"))


def _with_info_series(frame: pd.DataFrame, info_name: str, out_name: str,
                      tokens_of: Callable[[Callable[[str], pd.Series]], pd.Series]
                      ) -> pd.DataFrame:
    """`frame` plus a series `out_name` of the tokens `tokens_of` reads from the labels of each
    `info_name` sample (an info gauge states its figures as labels)."""
    import pandas as pd

    info = frame[frame["metric"] == info_name]
    if info.empty:
        return frame
    labels = info["labels"].astype(str)

    def number(key: str) -> pd.Series:
        found = labels.str.extract(rf"(?:^|,){key}=(\d+)(?:,|$)")[0]
        return pd.to_numeric(found, errors="coerce")

    tokens = tokens_of(number)
    known = (tokens > 0).to_numpy()
    if not known.any():
        return frame
    series = pd.DataFrame({"time_s": info["time_s"].to_numpy()[known],
                           "metric": out_name,
                           "labels": _engine_labels(labels[known]),
                           "value": tokens.to_numpy(dtype=np.float64)[known]})
    return pd.concat([frame, series], ignore_index=True)


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
    the trace's (`yaotu_trace.data.telemetry_fit`)."""
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
    import pandas as pd

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
