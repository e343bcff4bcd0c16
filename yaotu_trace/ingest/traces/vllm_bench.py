"""vLLM `bench serve --save-result --save-detailed` JSON: one run's per-request arrays.

The document holds run-level metrics plus, with `--save-detailed`, parallel per-request arrays:
`input_lens`, `output_lens`, `ttfts` (s), `itls` (a list of s per request, one gap per streamed
chunk), `errors` ("" on success), `generated_texts` and, in newer releases, `start_times` (the
client's `time.perf_counter()` when the request was sent). Mapping, for request *i*:

- `arrival_s` = `start_times[i]` minus the earliest start time;
- `first_token_s` = `arrival_s + ttfts[i]`;
- `token_times_s` = `first_token_s` followed by the running sum of `itls[i]`: one time per
  streamed chunk. Usually a chunk is one token; when a request streamed a chunk count other
  than `output_lens[i]` (a chunk carried several tokens), the list keeps the chunk times as
  they are, so its gaps are the inter-chunk gaps vLLM itself reports as ITL, and a note counts
  those requests. Spreading a chunk's tokens at one time would add zero gaps that were never
  measured (vLLM's `docs/benchmarking/cli.md`: ITL "does not add zero-duration gaps for tokens
  in the same output"), and spreading them across the gap would invent times;
- `finish_s` = `arrival_s + latencies[i]` (or `e2els[i]`) when saved, else
  `first_token_s + sum(itls[i])`, which is how the client measures latency for streamed output;
- `model` = the run's `model_id`; `request_id` = `r<i>`, the index in the arrays.

A result saved without `--save-detailed` (run-level keys only: `request_throughput`,
`mean_ttft_ms`, `p99_itl_ms`, ...) is a summary (`ingest.telemetry.bench_summary`): `trace
analyze` shows it, and the reader refuses it with the flag to add.

Without `start_times` the arrival pattern is unknown. Every request is then placed at
`arrival_s = 0` in file order: exact for the default `--request-rate inf` without
`--max-concurrency`, and latencies (TTFT, end-to-end) stay exact either way. A note says so.
A failed request (a non-empty `errors[i]`, or `successes[i]` false) stays a row with `status`
"error" and `error` = `errors[i]`, its lengths as saved and no timings (the client records 0 for
a failed request's TTFT and latency, which are not measurements); the others have status "ok".
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from yaotu_trace.data.compressed import read_text
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_WHERE
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.telemetry import bench_summary as bs
from yaotu_trace.ingest.telemetry.bench_summary import BenchSummary, finite_numbers

PER_REQUEST_KEYS: Final = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "start_times",
    "latencies",
    "e2els",
    "errors",
    "successes",
    "request_ids",
)
DETAIL_HINT: Final = "re-run vllm bench serve with --save-result --save-detailed"
# A result saved without --save-detailed keeps only run-level keys such as request_throughput.
DOCUMENT_KEYS: Final = ("ttfts", "itls", "input_lens", "request_throughput")


def read_vllm_bench(path: Path) -> RawTrace:
    """Turn the per-request arrays of one benchmark run into canonical requests."""
    doc = _load_document(path)
    if not isinstance(doc, dict):
        raise TraceReadError(
            f"{path}: expected one JSON object (a vllm bench serve result), got "
            f"{type(doc).__name__}; pass the file written by --save-result"
        )
    missing = [k for k in ("input_lens", "output_lens") if k not in doc]
    if missing:
        raise TraceSchemaError(
            f"{path}: a summary without per-request arrays ({', '.join(map(repr, missing))} "
            f"missing): `trace analyze` shows what it holds; this command needs the arrays, "
            f"{DETAIL_HINT}"
        )
    n = len(_array(doc, "input_lens", path, None))
    arrays = {k: _array(doc, k, path, n) for k in PER_REQUEST_KEYS if k in doc and k != "errors"}
    errors, failed_elsewhere = _errors(doc, path, n)

    failed = np.zeros(n, dtype=bool)
    if errors is not None:
        failed |= np.array([bool(e) for e in errors], dtype=bool)
    if "successes" in arrays:
        failed |= np.array([s is False for s in arrays["successes"]], dtype=bool)

    starts = _starts(arrays, n, path)
    rows = [
        _failed_request(arrays, i, float(starts[i]), errors) if failed[i]
        else _request(arrays, i, float(starts[i]), path)
        for i in range(n)
    ]
    out = pd.DataFrame.from_records(rows)
    if isinstance(doc.get("model_id"), str):
        out["model"] = doc["model_id"]
    return RawTrace(
        requests=out,
        format_name="vllm-bench",
        row_label="request",
        notes=tuple(_notes(doc, out, n, failed, errors, failed_elsewhere)),
    )


def _load_document(path: Path) -> Any:
    """Parse the whole file as one JSON document with line-numbered errors."""
    text = read_text(path, "pass a vllm bench result JSON saved as UTF-8")
    decoder = json.JSONDecoder()
    start = len(text) - len(text.lstrip())
    try:
        doc, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise TraceReadError(
            f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg}); "
            "check the file is complete"
        ) from exc
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:120]
        raise TraceReadError(f"{path}: invalid JSON ({reason}); check the file is "
                             "complete") from exc
    tail = text[end:]
    if tail.strip():
        next_doc = end + len(tail) - len(tail.lstrip())
        line = text.count("\n", 0, next_doc) + 1
        raise TraceReadError(
            f"{path}: line {line}: a second JSON document follows the first (results appended "
            "with --append-result); keep one run per file"
        )
    return doc


def _array(doc: dict[str, Any], key: str, path: Path, n: int | None) -> list[Any]:
    value = doc[key]
    if not isinstance(value, list):
        raise TraceSchemaError(
            f"{path}: key '{key}' is {type(value).__name__}, expected a list with one entry per "
            f"request; {DETAIL_HINT}"
        )
    if n is not None and len(value) != n:
        raise TraceSchemaError(
            f"{path}: key '{key}' has {len(value)} entries but 'input_lens' has {n}; the "
            "per-request arrays must be parallel (was the file edited?)"
        )
    return value


def _errors(doc: dict[str, Any], path: Path, n: int) -> tuple[list[Any] | None, int]:
    """Per-request errors, or (None, count) when a fork lists only the failures' errors."""
    if "errors" not in doc:
        return None, 0
    errors = doc["errors"]
    if not isinstance(errors, list):
        raise TraceSchemaError(f"{path}: key 'errors' is {type(errors).__name__}, expected a list")
    if len(errors) == n:
        return errors, 0
    # NOTE: some forks save arrays for successful requests only and `errors` for failures only.
    return None, sum(1 for e in errors if e)


def _starts(arrays: dict[str, list[Any]], n: int, path: Path) -> np.ndarray:
    """Arrival times in s since the earliest start; zeros when the run saved none."""
    if "start_times" not in arrays or n == 0:
        return np.zeros(n)
    values = np.array([_seconds(arrays, "start_times", i, path) for i in range(n)])
    return values - values.min()


def _failed_request(
    arrays: dict[str, list[Any]], i: int, arrival_s: float, errors: list[Any] | None
) -> dict[str, Any]:
    """A failed request's row: its lengths and outcome; the client timed nothing for it."""
    row: dict[str, Any] = {
        "request_id": str(arrays["request_ids"][i]) if "request_ids" in arrays else f"r{i}",
        "arrival_s": arrival_s,
        "prompt_len": arrays["input_lens"][i],
        "output_len": arrays["output_lens"][i],
        "status": "error",
        SOURCE_WHERE: f"request {i}",
    }
    if errors is not None and errors[i]:
        row["error"] = str(errors[i])
    return row


def _request(
    arrays: dict[str, list[Any]], i: int, arrival_s: float, path: Path
) -> dict[str, Any]:
    """One canonical row; lengths are left raw so validation names a bad value."""
    output_len = arrays["output_lens"][i]
    row: dict[str, Any] = {
        "request_id": str(arrays["request_ids"][i]) if "request_ids" in arrays else f"r{i}",
        "arrival_s": arrival_s,
        "prompt_len": arrays["input_lens"][i],
        "output_len": output_len,
        "status": "ok",
        SOURCE_WHERE: f"request {i}",
    }
    gaps_s = _gaps(arrays, i, path)
    ttft_s = _seconds(arrays, "ttfts", i, path) if "ttfts" in arrays else math.nan
    # A TTFT of 0 is what the client records when the endpoint did not stream.
    if ttft_s > 0:
        first_s = arrival_s + ttft_s
        row["first_token_s"] = first_s
        times_s = first_s + np.concatenate(([0.0], np.cumsum(gaps_s)))
        row["token_times_s"] = times_s.tolist()
        row["finish_s"] = float(times_s[-1])
    for key in ("latencies", "e2els"):
        if key in arrays and arrays[key][i] is not None:
            row["finish_s"] = arrival_s + _seconds(arrays, key, i, path)
            break
    return row


def _seconds(arrays: dict[str, list[Any]], key: str, i: int, path: Path) -> float:
    value = arrays[key][i]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceSchemaError(
            f"{path}: request {i}, key '{key}': {str(value)[:40]!r} is not a number of seconds; "
            "the result file looks damaged"
        )
    return float(value)


def _gaps(arrays: dict[str, list[Any]], i: int, path: Path) -> np.ndarray:
    if "itls" not in arrays:
        return np.zeros(0)
    gaps = arrays["itls"][i]
    if gaps is None:
        return np.zeros(0)
    seconds = finite_numbers(gaps)
    if seconds is None:
        raise TraceSchemaError(
            f"{path}: request {i}, key 'itls': expected a list of seconds between streamed "
            f"chunks, got {str(gaps)[:40]!r}; the result file looks damaged"
        )
    return seconds


def _notes(
    doc: dict[str, Any],
    out: pd.DataFrame,
    n: int,
    failed: np.ndarray,
    errors: list[Any] | None,
    failed_elsewhere: int,
) -> list[str]:
    notes: list[str] = []
    n_failed = int(failed.sum())
    if n_failed:
        first = _short(errors[int(np.flatnonzero(failed)[0])]) if errors else "unsuccessful"
        notes.append(
            f"{n_failed} of {n} requests failed; they are kept as rows with status 'error' and "
            f"no timings (first error: {first})"
        )
    if failed_elsewhere:
        notes.append(
            f"{failed_elsewhere} failed request(s) are listed in 'errors' only and are not in "
            "the per-request arrays"
        )
    if "start_times" in doc:
        notes.append(
            "arrival_s is seconds since the first request was sent (client perf_counter clock)"
        )
    else:
        rate = doc.get("request_rate")
        concurrency = doc.get("max_concurrency")
        notes.append(
            "the result has no start_times, so arrivals are unknown: every request is placed at "
            f"arrival_s 0 in file order (the run used request_rate {rate}, max_concurrency "
            f"{concurrency}); latencies are exact, arrival patterns are not"
        )
    ok = out[out["status"] == "ok"]
    timed = ok["first_token_s"].notna().sum() if "first_token_s" in ok.columns else 0
    untimed = len(ok) - int(timed)
    if untimed:
        notes.append(
            f"{untimed} request(s) have no TTFT (0 in 'ttfts': the endpoint did not stream)"
        )
    chunked = _chunked_requests(out)
    if chunked:
        notes.append(
            f"{chunked} of {len(ok)} successful request(s) streamed a chunk count other than "
            "output_len (several tokens per chunk): their token_times_s hold one time per "
            "chunk, so their inter-token gaps are inter-chunk gaps, as vllm bench reports ITL"
        )
    return notes


def _chunked_requests(out: pd.DataFrame) -> int:
    """Requests whose token_times_s is not one entry per output token (chunks of several)."""
    if "token_times_s" not in out.columns:
        return 0
    times = out["token_times_s"]
    lengths = out["output_len"]
    return sum(
        1 for t, n in zip(times, lengths, strict=True)
        if isinstance(t, list) and isinstance(n, int) and len(t) != n
    )


def _short(value: object) -> str:
    text = " ".join(str(value).split())
    return text[:80] + ("..." if len(text) > 80 else "")


# Run-level keys of vllm/benchmarks/serve.py's result, key -> (label, unit).
RUN_KEYS: Final = {
    "model_id": ("model", ""),
    "backend": ("backend", ""),
    "endpoint_type": ("endpoint type", ""),
    "label": ("label", ""),
    "date": ("date", ""),
    "num_prompts": ("prompts", "requests"),
    "request_rate": ("request rate", "req/s"),
    "burstiness": ("burstiness", ""),
    "max_concurrency": ("max concurrency", "requests"),
}
TOTAL_KEYS: Final = {
    "completed": ("completed", "requests"),
    "failed": ("failed", "requests"),
    "duration": ("duration", "s"),
    "total_input_tokens": ("input tokens", "tokens"),
    "total_output_tokens": ("output tokens", "tokens"),
    "request_throughput": ("request throughput", "req/s"),
    "request_goodput": ("request goodput", "req/s"),
    "output_throughput": ("output token throughput", "tokens/s"),
    "total_token_throughput": ("total token throughput", "tokens/s"),
    "max_output_tokens_per_s": ("peak output token throughput", "tokens/s"),
    "max_concurrent_requests": ("peak concurrent requests", "requests"),
}
_LATENCY_NAMES: Final = {
    "ttft": ("TTFT", "time to first token"),
    "tpot": ("TPOT", "time per output token, first excluded"),
    "itl": ("ITL", "inter-token latency, between streamed chunks"),
    "e2el": ("E2EL", "end-to-end latency"),
}
LATENCY_KEY: Final = re.compile(
    r"(?P<stat>mean|median|std|p\d+(?:\.\d+)?)_(?P<metric>[a-z0-9]+)_ms"
)


def read_vllm_bench_summary(path: Path) -> BenchSummary | None:
    """The run-level numbers of a result saved without --save-detailed, else None."""
    if '"input_lens"' in bs.document_head(path):
        return None  # per-request arrays: a trace, left unparsed here
    doc = _load_document(path)
    if not isinstance(doc, dict) or "input_lens" in doc or "output_lens" in doc:
        return None
    latencies = bs.latencies(doc, LATENCY_KEY, _LATENCY_NAMES, "ms")
    taken = {*RUN_KEYS, *TOTAL_KEYS,
             *(k for k in doc if (m := LATENCY_KEY.fullmatch(k)) and m["metric"] in _LATENCY_NAMES)}
    return bs.BenchSummary(
        tool="vllm bench serve",
        format_name=TraceFormat.VLLM_BENCH.value,
        run=bs.values(doc, RUN_KEYS, numbers_only=False),
        totals=bs.values(doc, TOTAL_KEYS) + bs.other_numbers(doc, taken),
        latencies=latencies,
        fix=DETAIL_HINT,
    )


def _is_vllm_bench_document(head: str) -> bool:
    return any(f'"{key}"' in head for key in DOCUMENT_KEYS)


FORMAT = TraceFormatSpec(
    name=TraceFormat.VLLM_BENCH,
    description="`vllm bench serve --save-result --save-detailed` JSON: one run's requests",
    reader=read_vllm_bench,
    row_label="request",
    json_document=_is_vllm_bench_document,
    summary=read_vllm_bench_summary,
)
