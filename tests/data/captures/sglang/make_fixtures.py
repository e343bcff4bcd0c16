"""Write SGLang's request logs and per-request metrics export of the workload (`../workload.py`).

Run with SGLang installed (0.5.23 here; no model and no GPU are needed):

    python tests/data/captures/sglang/make_fixtures.py

- `requests_level3.log` (the first 16 requests): what `--log-requests --log-requests-level 3`
  prints, SGLang's own
  `RequestLogger` (`sglang/srt/utils/request_logger.py`) called as its `TokenizerManager` calls
  it: `log_received_request` when a request arrives, `log_finished_request` with the output
  dict when it ends;
- `requests_level2.jsonl.log`: the same at level 2 with `--log-requests-format json`;
- `metrics_agree/` and `metrics_flush/`: what `--export-metrics-to-file
  --export-metrics-to-file-dir DIR` writes, SGLang's `FileRequestMetricsExporter`
  (`sglang/srt/observability/request_metrics_exporter.py`), one JSON per request in hourly
  files `sglang-request-metrics-YYYYMMDD_HH.log`.

The requests are `GenerateReqInput` objects (input ids, sampling params, `cache_salt` = the
tenant); the output dict has the keys `TokenizerManager` fills (`meta_info`: id, finish_reason,
prompt_tokens, completion_tokens, cached_tokens, e2e_latency and, as with `--enable-metrics`,
request_received_ts, first_token_latency, queue_time, request_finished_ts). Its numbers come
from the workload and its engine (`workload.Engine` with SGLang's page size 1): in
`metrics_flush/` the engine's cache is flushed (`/flush_cache`) 300 s into the run, so its
`cached_tokens` fall short of a replay for a stretch; in the others they agree. The clock of
the log records and of the exporter's file names is the workload's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402

FLUSH_AT_S = 300.0
LOGGED = 16  # the request logs hold the first requests only, to stay small
CLOCK = {"now": workload.START_UNIX_S}


class _WorkloadDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):  # type: ignore[no-untyped-def]
        return dt.datetime.fromtimestamp(CLOCK["now"], tz or dt.UTC).replace(
            tzinfo=None if tz is None else tz)


def _use_workload_clock() -> None:
    base = logging.getLogRecordFactory()

    def factory(*args, **kwargs):  # type: ignore[no-untyped-def]
        record = base(*args, **kwargs)
        record.created = CLOCK["now"]
        record.msecs = (CLOCK["now"] % 1) * 1000
        return record

    logging.setLogRecordFactory(factory)
    import time
    time.tzset()


def _out(r: workload.Request, cached: int) -> dict:
    t0 = workload.START_UNIX_S + r.arrival_s
    return {
        "text": "<text>",
        "output_ids": list(r.output),
        "meta_info": {
            "id": r.request_id,
            "finish_reason": {"type": "length", "length": len(r.output)},
            "prompt_tokens": len(r.prompt),
            "weight_version": "default",
            "num_retractions": 0,
            "forward_entry_time": t0 + 0.004,
            "prefill_finished_time": t0 + r.ttft_s - 0.002,
            "queue_time": 0.004,
            "reasoning_tokens": 0,
            "completion_tokens": len(r.output),
            "cached_tokens": cached,
            "e2e_latency": r.e2e_s,
            "request_received_ts": t0,
            "first_token_latency": r.ttft_s,
            "response_sent_to_client_ts": t0 + r.e2e_s,
            "request_finished_ts": t0 + r.e2e_s,
            "decode_throughput": len(r.output) / max(r.e2e_s - r.ttft_s, 1e-3),
        },
    }


def _obj(r: workload.Request):  # type: ignore[no-untyped-def]
    from sglang.srt.managers.io_struct import GenerateReqInput

    return GenerateReqInput(rid=r.request_id, input_ids=list(r.prompt),
                            sampling_params={"max_new_tokens": len(r.output), "temperature": 0},
                            cache_salt=r.tenant, stream=False)


def _events(reqs: list[workload.Request]) -> list[tuple[float, int, workload.Request]]:
    events = [(workload.START_UNIX_S + r.arrival_s, 0, r) for r in reqs]
    events += [(workload.START_UNIX_S + r.arrival_s + r.e2e_s, 1, r) for r in reqs]
    return sorted(events, key=lambda e: (e[0], e[1], e[2].request_id))


def write_log(path: Path, level: int, fmt: str, cached: dict[str, int]) -> None:
    from sglang.srt.utils import log_utils
    from sglang.srt.utils.request_logger import RequestLogger

    log_utils.datetime = _WorkloadDatetime
    with path.open("w", encoding="utf-8") as fh:
        sys.stdout = fh  # the request logger's handler writes to sys.stdout
        logger = RequestLogger(log_requests=True, log_requests_level=level,
                               log_requests_format=fmt, log_requests_target=None)
        for name in ("sglang.srt.utils.request_logger.stdout",):
            for handler in logging.getLogger(name).handlers:
                handler.stream = fh
        for t, kind, r in _events(workload.requests()[:LOGGED]):
            CLOCK["now"] = t
            if kind == 0:
                logger.log_received_request(_obj(r))
            else:
                logger.log_finished_request(_obj(r), _out(r, cached[r.request_id]))
        fh.flush()
    sys.stdout = sys.__stdout__


def write_export(folder: Path, cached: dict[str, int]) -> None:
    from sglang.srt.observability import request_metrics_exporter as rme

    rme.datetime = _WorkloadDatetime
    if folder.exists():
        shutil.rmtree(folder)
    exporter = rme.FileRequestMetricsExporter(
        SimpleNamespace(export_metrics_to_file_dir=str(folder)), None, None)

    async def run() -> None:
        for t, kind, r in _events(workload.requests()):
            if kind == 1:
                CLOCK["now"] = t
                await exporter.write_record(_obj(r), _out(r, cached[r.request_id]))

    asyncio.run(run())
    exporter.close()


def cached_tokens(flush_at_s: float | None) -> dict[str, int]:
    engine = workload.Engine(block_tokens=1, flush_at_s=flush_at_s)
    return {r.request_id: engine.serve(r) for r in workload.requests()}


def main() -> None:
    _use_workload_clock()
    agree = cached_tokens(None)
    write_log(HERE / "requests_level3.log", 3, "text", agree)
    write_log(HERE / "requests_level2.jsonl.log", 2, "json", agree)
    write_export(HERE / "metrics_agree", agree)
    write_export(HERE / "metrics_flush", cached_tokens(FLUSH_AT_S))
    flushed = sum(cached_tokens(FLUSH_AT_S).values())
    sys.stdout.write(f"{workload.totals(workload.requests())} cached (agree): "
                     f"{sum(agree.values())}, cached (flush): {flushed}\n")


if __name__ == "__main__":
    main()
