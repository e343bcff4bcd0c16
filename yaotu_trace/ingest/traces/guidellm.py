"""guidellm's benchmark report (`benchmarks.json`, from `guidellm run --output kind=json`).

The report (vllm-project/guidellm `src/guidellm/benchmark/schemas/report.py`) holds a list of
`benchmarks`, one per load level of the run (a sweep has several), each with its `requests`
grouped as `successful`, `errored` and `incomplete`. Every request is guidellm's
`GenerativeRequestStats` (`src/guidellm/schemas/request_stats.py`), saved with its computed
fields; the reports of guidellm 0.3 (mid 2025) name a few of them differently, as noted:

- `arrival_s` = `request_start_time` (0.3: `start_time`, epoch s) less the earliest start in the
  file: every benchmark on guidellm's one clock, in the order they ran;
- `first_token_s` = `arrival_s + time_to_first_token_ms / 1000`;
- `finish_s` = `arrival_s + request_latency` for a successful request;
- `prompt_len` = `prompt_tokens`, `output_len` = `output_tokens`, `cached_tokens` when saved;
- `request_id`; `session_id` = `info.conversation_id`;
- `status` = "ok" (successful), "error" (errored, `error` = `info.error`), "aborted"
  (incomplete: still running when the benchmark ended).

guidellm keeps each request's first and last token times and its mean inter-token latency, not
every token's time, so `token_times_s` is not set (a note says so). A request that failed before
the server answered has no token counts; it is kept with lengths 0, counted in a note. Each
benchmark's strategy, request count and time window are listed in the notes, and so is a
benchmark whose request lists are a sample (`sample_size`) of what it ran.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

import pandas as pd

from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_WHERE
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.json_document import read_json_document

STATUS_OF: Final = {"successful": "ok", "errored": "error", "incomplete": "aborted"}
REPORT_HINT: Final = "pass the benchmarks.json that guidellm wrote (--output kind=json)"


def read_guidellm(path: Path) -> RawTrace:
    """Every request of every benchmark of the report, on one clock."""
    benchmarks = _benchmarks(_load(path), path)
    found = [(b, group, i, r) for b, bench in enumerate(benchmarks)
             for group, i, r in _requests(bench, b, path)]
    if not found:
        raise TraceSchemaError(
            f"{path}: the report's benchmarks hold no requests (saved with sample_size 0?); "
            "re-run guidellm without --sample-size 0 to keep the requests"
        )
    starts = [_start(r, f"benchmark {b}, {group} request {i}", path) for b, group, i, r in found]
    origin = min(starts)
    # In start order, as the requests were sent (guidellm groups them by status).
    order = sorted(range(len(found)), key=starts.__getitem__)
    rows = []
    for k in order:
        b, group, i, request = found[k]
        rows.append(_request(request, b, group, i, starts[k] - origin))
    out = pd.DataFrame.from_records(rows)
    return RawTrace(requests=out, format_name="guidellm", row_label="request",
                    notes=tuple(_notes(benchmarks, out)))


def _load(path: Path) -> Any:
    return read_json_document(path, REPORT_HINT)


def _benchmarks(doc: Any, path: Path) -> list[dict[str, Any]]:
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benchmarks, list) or not all(isinstance(b, dict) for b in benchmarks):
        raise TraceSchemaError(
            f"{path}: expected a guidellm report, an object whose 'benchmarks' is a list of "
            f"benchmarks; {REPORT_HINT}"
        )
    return benchmarks


def _requests(bench: dict[str, Any], b: int, path: Path) -> list[tuple[str, int, dict[str, Any]]]:
    """(group, index in group, request) of one benchmark, groups in guidellm's order."""
    groups = bench.get("requests")
    if not isinstance(groups, dict):
        raise TraceSchemaError(
            f"{path}: benchmark {b}, field 'requests': expected the successful, errored and "
            f"incomplete request lists; {REPORT_HINT}"
        )
    found: list[tuple[str, int, dict[str, Any]]] = []
    for group in STATUS_OF:
        items = groups.get(group) or []
        if not isinstance(items, list) or not all(isinstance(r, dict) for r in items):
            raise TraceSchemaError(
                f"{path}: benchmark {b}, field 'requests.{group}': expected a list of requests; "
                f"{REPORT_HINT}"
            )
        found += [(group, i, r) for i, r in enumerate(items)]
    return found


def _start(request: dict[str, Any], where: str, path: Path) -> float:
    info = _object(request.get("info"))
    timings = _object(info.get("timings"))
    for value in (request.get("request_start_time"), request.get("start_time"),
                  timings.get("request_start"), timings.get("resolve_start")):
        if (start := _number(value)) is not None:
            return start
    raise TraceSchemaError(
        f"{path}: {where}, field 'request_start_time': the request has no start time; "
        f"{REPORT_HINT}"
    )


def _request(request: dict[str, Any], b: int, group: str, i: int,
             arrival_s: float) -> dict[str, Any]:
    """One canonical row; lengths are left raw so validation names a bad value."""
    info = _object(request.get("info"))
    status = STATUS_OF[group]
    row: dict[str, Any] = {
        "request_id": str(request.get("request_id") or f"b{b}-{group}-{i}"),
        "arrival_s": arrival_s,
        "prompt_len": request.get("prompt_tokens"),
        "output_len": request.get("output_tokens"),
        "status": status,
        SOURCE_WHERE: f"benchmark {b}, {group} request {i}",
    }
    if status != "ok" and row["prompt_len"] is None and row["output_len"] is None:
        row["prompt_len"] = row["output_len"] = 0  # counted in a note
    elif status != "ok" and row["output_len"] is None:
        row["output_len"] = 0
    if info.get("conversation_id"):
        row["session_id"] = str(info["conversation_id"])
    if request.get("cached_tokens") is not None:
        row["cached_tokens"] = request["cached_tokens"]
    error = info.get("error") or request.get("error")
    if error:
        row["error"] = str(error)
    ttft_ms = _number(request.get("time_to_first_token_ms"))
    if ttft_ms is not None:
        row["first_token_s"] = arrival_s + ttft_ms / 1000
    latency_s = _number(request.get("request_latency"))
    if status == "ok" and latency_s is not None:
        row["finish_s"] = arrival_s + latency_s
    return row


def _notes(benchmarks: list[dict[str, Any]], out: pd.DataFrame) -> list[str]:
    bench_of = out[SOURCE_WHERE].str.extract(r"^benchmark (\d+),")[0].astype(int)
    notes = [
        f"the report holds {len(benchmarks)} benchmark(s), read as one trace on guidellm's clock "
        "(arrival_s is seconds since the first request started): "
        + "; ".join(_window(b, bench, out[bench_of == b]) for b, bench in enumerate(benchmarks))
    ]
    for b, bench in enumerate(benchmarks):
        total = _total(bench)
        kept = int((bench_of == b).sum())
        if total is not None and total > kept:
            notes.append(
                f"benchmark {b} keeps {kept} of its {total} requests (guidellm's sample_size): "
                "rates and counts are those of the sample"
            )
    failed = out["status"] != "ok"
    if failed.any():
        first = " ".join(str(out.loc[failed, "error"].dropna().iloc[0]).split())[:80] \
            if "error" in out.columns and out.loc[failed, "error"].notna().any() else "none given"
        notes.append(
            f"{int(failed.sum())} of {len(out)} requests did not succeed (errored: "
            f"{int((out['status'] == 'error').sum())}, incomplete: "
            f"{int((out['status'] == 'aborted').sum())}); they are kept as rows with their "
            f"status, without a finish time (first error: {first})"
        )
        no_counts = int((failed & (out["prompt_len"] == 0) & (out["output_len"] == 0)).sum())
        if no_counts:
            notes.append(
                f"{no_counts} failed request(s) carry no token counts (guidellm saves none when "
                "the server did not answer): their prompt_len and output_len are 0"
            )
    notes.append(
        "guidellm saves each request's first and last token times, not every token's: "
        "token_times_s is not set, so inter-token gaps are not available per token"
    )
    return notes


def _window(b: int, bench: dict[str, Any], rows: pd.DataFrame) -> str:
    span = (f"{rows['arrival_s'].min():.3f}-{rows['arrival_s'].max():.3f} s"
            if len(rows) else "no requests")
    return f"benchmark {b} {_strategy(bench)}: {len(rows)} requests, started {span}"


def _strategy(bench: dict[str, Any]) -> str:
    """guidellm's label of a benchmark's strategy: `concurrent@2`, `constant@5.0`."""
    config = _object(bench.get("config"))
    args = _object(bench.get("args"))  # guidellm 0.3
    strategy = config.get("strategy") or args.get("strategy")
    if not isinstance(strategy, dict):
        return "(strategy not saved)"
    kind = str(strategy.get("type_", "?"))
    level = next((strategy[k] for k in ("streams", "rate") if strategy.get(k) is not None), None)
    return kind if level is None else f"{kind}@{level}"


def _total(bench: dict[str, Any]) -> int | None:
    metrics = _object(bench.get("metrics"))
    totals = metrics.get("request_totals") or bench.get("request_totals")  # 0.3: top level
    total = _number(_object(totals).get("total"))
    return None if total is None else int(total)


def _object(value: object) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else (the fields are then missing)."""
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    """A finite number (a JSON true is not one), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _is_guidellm_document(head: str) -> bool:
    return '"guidellm_version"' in head or (
        '"benchmarks"' in head and '"generative_benchmark"' in head
    )


FORMAT = TraceFormatSpec(
    name=TraceFormat.GUIDELLM,
    description="guidellm `benchmarks.json` report: every benchmark's requests, by status",
    reader=read_guidellm,
    row_label="request",
    json_document=_is_guidellm_document,
)
