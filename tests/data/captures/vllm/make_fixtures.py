"""Write `vllm_requests.log`: vLLM's own request log of the workload (`../workload.py`).

Run with vLLM installed (0.33.0 here; torch CPU is enough, no model is loaded):

    python tests/data/captures/vllm/make_fixtures.py

What `vllm serve --enable-log-requests --enable-log-outputs --log-level DEBUG` writes: vLLM's
`RequestLogger` (`vllm/entrypoints/serve/utils/request_logger.py`) logs each request through
vLLM's own logging setup (`vllm.logger.configure_logging`, its text formatter and date format)
as the OpenAI server calls it: `log_inputs` when a request arrives, `log_outputs` when it ends
(non-streaming), or once per streamed delta and once at the end (streaming, odd requests). The
log records' clock is the workload's (a record factory sets `created`), so the lines carry the
workload's arrival and finish times; nothing else in the lines is written by this script.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402


def main() -> None:
    out = HERE / "vllm_requests.log"
    clock = {"now": workload.START_UNIX_S}
    base = logging.getLogRecordFactory()

    def at_workload_time(*args, **kwargs):  # type: ignore[no-untyped-def]
        record = base(*args, **kwargs)
        record.created = clock["now"]
        record.msecs = (clock["now"] % 1) * 1000
        return record

    logging.setLogRecordFactory(at_workload_time)
    with out.open("w", encoding="utf-8") as fh:
        sys.stdout = fh  # vLLM's handler writes to ext://sys.stdout
        from vllm.config.logging import LoggingConfig
        from vllm.entrypoints.serve.utils.request_logger import RequestLogger
        from vllm.logger import configure_logging
        from vllm.sampling_params import SamplingParams

        configure_logging(LoggingConfig(log_level="DEBUG"))
        logger = RequestLogger(max_log_len=None)
        events = []
        for n, r in enumerate(workload.requests()):
            rid = f"cmpl-{r.request_id}-0"
            t0 = workload.START_UNIX_S + r.arrival_s
            events.append((t0, 0, n, "in", rid, r))
            if n % 2:  # streamed in three deltas, then the end
                cut = [0, 1, len(r.output) // 2, len(r.output)]
                for k in range(3):
                    t = t0 + r.ttft_s + (r.e2e_s - r.ttft_s) * cut[k + 1] / len(r.output)
                    events.append((t, 1, n, "delta", rid, r.output[cut[k]:cut[k + 1]]))
                events.append((t0 + r.e2e_s, 2, n, "end", rid, None))
            else:
                events.append((t0 + r.e2e_s, 2, n, "out", rid, r.output))
        for t, _, _, kind, rid, data in sorted(events, key=lambda e: e[:3]):
            clock["now"] = t
            if kind == "in":
                params = SamplingParams(max_tokens=len(data.output) + 16, temperature=0.0)
                logger.log_inputs(rid, f"<{len(data.prompt)} tokens of text>", list(data.prompt),
                                  None, params, None)
            elif kind == "delta":
                logger.log_outputs(rid, "...", list(data), None, is_streaming=True, delta=True)
            elif kind == "end":
                logger.log_outputs(rid, "<full text>", None, "streaming_complete",
                                   is_streaming=True, delta=False)
            else:
                logger.log_outputs(rid, "<text>", list(data), "stop")
        sys.stdout.flush()
    sys.stdout = sys.__stdout__
    sys.stdout.write(f"{out} {workload.totals(workload.requests())}\n")


if __name__ == "__main__":
    main()
