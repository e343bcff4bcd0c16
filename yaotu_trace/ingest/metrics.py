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
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest import prom_text
from yaotu_trace.ingest.serverlog import EXPECTED, is_server_log, read_server_log

# vLLM exports its KV pool as labels of an info gauge (`vllm:cache_config_info{block_size="16",
# num_gpu_blocks="N",...} 1`); the reader turns it into this series, in tokens.
CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
POOL_FROM_CACHE_CONFIG: Final = "vllm:cache_config_info (KV pool tokens)"

# Canonical quantity → engine metric names, first match wins (vLLM V1, older vLLM, SGLang).
# Counters are listed with and without the `_total` that prometheus_client adds on export.
GAUGES: Final[Mapping[str, tuple[str, ...]]] = {
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "cache_hit_rate": ("sglang:cache_hit_rate", "log:prefix_cache_hit_rate"),
    "retracted_now": ("sglang:num_retracted_reqs",),
    "max_total_tokens": ("sglang:max_total_num_tokens", "log:gpu_kv_cache_size_tokens",
                         POOL_FROM_CACHE_CONFIG),
    "page_size": ("sglang:page_size",),
}
COUNTERS: Final[Mapping[str, tuple[str, ...]]] = {
    "preemptions": (
        "vllm:num_preemptions_total",
        "vllm:num_preemptions",
        "sglang:num_retracted_requests_total",
    ),
    "prefix_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries",
    ),
    "prefix_hits": (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_hits",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits",
    ),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens",
                      "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens",
                          "sglang:generation_tokens_total"),
    "cached_tokens": ("vllm:prompt_tokens_cached_total", "vllm:prompt_tokens_cached",
                      "sglang:cached_tokens_total"),
    "retracted_input_tokens": ("sglang:num_retracted_input_tokens_total",),
    "retracted_output_tokens": ("sglang:num_retracted_output_tokens_total",),
}
HISTOGRAMS: Final[Mapping[str, tuple[str, ...]]] = {
    "iteration_tokens": ("vllm:iteration_tokens_total",),
    "queue_time_s": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "ttft_s": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_s": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
    "prefill_time_s": ("vllm:request_prefill_time_seconds",),
    "decode_time_s": ("vllm:request_decode_time_seconds",),
    "e2e_s": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "prefill_kv_computed_tokens": ("vllm:request_prefill_kv_computed_tokens",),
}
CSV_COLUMNS: Final = ("timestamp", "metric", "labels", "value")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMetrics:
    """Prometheus samples in long form: `frame` has time_s, metric, labels, value (float)."""

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

    @property
    def names(self) -> frozenset[str]:
        """Every metric name present."""
        return frozenset(self.frame["metric"].unique().tolist())

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

    def gauge(self, key: str, how: str = "sum") -> pd.DataFrame | None:
        """A gauge over time, combined across label sets (engines) per timestamp.

        `how` is "sum" for counts (requests waiting in all engines) or "max" for ratios (the
        fullest engine's KV usage). Returns columns time_s, value sorted by time.
        """
        name = self.name_of(key)
        if name is None:
            return None
        rows = self._series(name)
        grouped = rows.groupby("time_s", sort=True)["value"]
        out = grouped.max() if how == "max" else grouped.sum()
        return out.reset_index()

    def counter_increase(self, key: str) -> float | None:
        """Total increase of a counter over the export, reset-aware, summed over label sets."""
        name = self.name_of(key)
        return None if name is None else _increase(self._series(name))

    def counter_steps(self, key: str) -> pd.DataFrame | None:
        """Times at which a counter went up and by how much (columns time_s, delta)."""
        name = self.name_of(key)
        if name is None:
            return None
        parts = []
        for _, rows in self._series(name).groupby("labels", sort=False):
            rows = rows.sort_values("time_s")
            values = rows["value"].to_numpy()
            delta = np.diff(values)
            delta = np.where(delta < 0, values[1:], delta)  # a reset starts again from zero
            parts.append(pd.DataFrame({"time_s": rows["time_s"].to_numpy()[1:], "delta": delta}))
        if not parts:
            return None
        out = pd.concat(parts, ignore_index=True)
        return out[out["delta"] > 0].sort_values("time_s").reset_index(drop=True)

    def histogram_mean(self, key: str) -> float | None:
        """Mean observation of a histogram over the export: Δ`_sum` / Δ`_count`."""
        name = self.name_of(key)
        if name is None or name + "_sum" not in self.names:
            return None
        count = _increase(self._series(name + "_count"))
        total = _increase(self._series(name + "_sum"))
        if not count:
            return None
        return total / count

    def histogram_count(self, key: str) -> float | None:
        """Observations added to a histogram over the export (Δ`_count`)."""
        name = self.name_of(key)
        return None if name is None else _increase(self._series(name + "_count"))


def _increase(rows: pd.DataFrame) -> float:
    total = 0.0
    for _, series in rows.groupby("labels", sort=False):
        values = series.sort_values("time_s")["value"].to_numpy()
        if values.size < 2:
            continue
        delta = np.diff(values)
        total += float(np.where(delta < 0, values[1:], delta).sum())
    return total


def read_metrics(path: str | Path, *, year: int | None = None,
                 zone: tzinfo | None = None) -> EngineMetrics:
    """Read a Prometheus range-query export (JSON or CSV), /metrics text (`prom_text`) or an
    engine server log (`serverlog`, found by its content; `year` dates its year-less times,
    `zone` is the zone of its zone-less ones, UTC when None: `serverlog.log_zone`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    notes: tuple[str, ...] = ()
    log_year = None
    if path.is_dir() and prom_text.is_scrape_folder(path):
        rows, notes = prom_text.read_prom_folder(path)
    elif path.is_file() and (suffix == ".log" or (
            suffix not in (".json", ".csv", ".tsv") and is_server_log(path))):
        rows, log_notes, log_year = read_server_log(path, year=year, zone=zone)
        notes = tuple(log_notes)
    elif path.is_file() and suffix in prom_text.SUFFIXES and prom_text.looks_like_text(path):
        rows, notes = prom_text.read_prom_text(path)
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
    elif suffix == ".json":
        rows = _read_json(path)
    elif suffix in (".csv", ".tsv"):
        rows = _read_csv(path)
    else:
        raise TraceReadError(
            f"{path}: metrics are read from .json (Prometheus API export), .csv "
            f"(timestamp, metric, labels, value), an engine server log ({EXPECTED}) or "
            f"/metrics text (.txt, .prom); got '{suffix or '(no extension)'}'"
        )
    frame = pd.DataFrame(rows, columns=["time_s", "metric", "labels", "value"])
    frame = frame.astype({"time_s": "float64", "value": "float64", "metric": object,
                          "labels": object})
    frame = frame[np.isfinite(frame["value"].to_numpy())].reset_index(drop=True)
    frame = _with_pool_from_cache_config(frame)
    if frame.empty:
        raise TraceReadError(
            f"{path}: the metrics export holds no samples; export a range query with data"
        )
    return EngineMetrics(frame=frame, path=str(path), notes=notes, log_year=log_year,
                         log_zone=zone)


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
