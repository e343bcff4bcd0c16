"""Write Dynamo request-trace segments of the workload (`../workload.py`), in the schema
Dynamo's writer serializes (`dynamo.request.trace.v1`, ai-dynamo/dynamo; Dynamo does not run
here).

    python tests/data/captures/dynamo/make_fixtures.py     # needs the xxhash package

What a frontend started with `DYN_REQUEST_TRACE=1 DYN_REQUEST_TRACE_JSONL_GZ_ROLL_LINES=20`
writes: gzipped JSON Lines segments `dynamo-request-trace.NNNNNN.jsonl.gz`, one
`request_end` record per request with the fields of Dynamo's request metrics struct in its
order (request_id, x_request_id, model, input_tokens, output_tokens, cached_tokens,
request_received_ms, prefill_wait_time_ms, prefill_time_ms, ttft_ms, total_time_ms,
avg_itl_ms, kv_hit_rate, kv_transfer_estimated_latency_ms, queue_depth, worker, replay),
`agent_context` from the session headers, and two harness `tool_end` events.
`input_sequence_hashes` are Dynamo's rolling sequence hashes of the full 16-token blocks:
XXH3-64 with seed 1337 over each block's tokens as little-endian u32, chained as XXH3-64 of
(parent, block) (`lib/kv-router/src/protocols.rs`). `cached_tokens` come from the workload's
engine (16-token blocks, unlimited pool); disaggregated: prefill workers 1-2, decode 7-8.
"""

from __future__ import annotations

import gzip
import json
import struct
import sys
from pathlib import Path

import xxhash

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402

BLOCK = 16
SEED = 1337
ROLL_LINES = 20


def sequence_hashes(tokens: tuple[int, ...]) -> list[int]:
    out: list[int] = []
    for i in range(len(tokens) // BLOCK):
        block = xxhash.xxh3_64_intdigest(struct.pack(f"<{BLOCK}I", *tokens[i * BLOCK:(i + 1) *
                                                                         BLOCK]), seed=SEED)
        out.append(block if not out else
                   xxhash.xxh3_64_intdigest(struct.pack("<QQ", out[-1], block), seed=SEED))
    return out


def record(n: int, r: workload.Request, cached: int) -> dict:
    received_ms = int((workload.START_UNIX_S + r.arrival_s) * 1000)
    blocks = -(-len(r.prompt) // BLOCK)
    return {
        "schema": "dynamo.request.trace.v1",
        "event_type": "request_end",
        "event_time_unix_ms": received_ms + int(r.e2e_s * 1000),
        "event_source": "dynamo",
        "agent_context": {"session_id": r.session},
        "request": {
            "request_id": f"dyn-{r.request_id}",
            "x_request_id": r.request_id,
            "model": "Qwen/Qwen3-8B",
            "input_tokens": len(r.prompt),
            "output_tokens": len(r.output),
            "cached_tokens": cached,
            "request_received_ms": received_ms,
            "prefill_wait_time_ms": 4.0,
            "prefill_time_ms": round(r.ttft_s * 1000 - 4.0, 3),
            "ttft_ms": round(r.ttft_s * 1000, 3),
            "total_time_ms": round(r.e2e_s * 1000, 3),
            "avg_itl_ms": 20.0,
            "kv_hit_rate": round(cached / BLOCK / blocks, 4),
            "kv_transfer_estimated_latency_ms": round(0.5 + len(r.prompt) * 0.002, 3),
            "queue_depth": n % 3,
            "worker": {"prefill_worker_id": 1 + n % 2, "prefill_dp_rank": 0,
                       "decode_worker_id": 7 + n % 2, "decode_dp_rank": 0},
            "replay": {"trace_block_size": BLOCK, "input_length": len(r.prompt),
                       "input_sequence_hashes": sequence_hashes(r.prompt)},
        },
    }


def tool_event(r: workload.Request) -> dict:
    end_ms = int((workload.START_UNIX_S + r.arrival_s + r.e2e_s) * 1000) + 400
    return {"schema": "dynamo.request.trace.v1", "event_type": "tool_end",
            "event_time_unix_ms": end_ms, "event_source": "harness",
            "agent_context": {"session_id": r.session},
            "tool": {"tool_call_id": f"call-{r.request_id}", "tool_class": "web_search",
                     "status": "succeeded", "started_at_unix_ms": end_ms - 380,
                     "ended_at_unix_ms": end_ms, "duration_ms": 380.0}}


def main() -> None:
    for old in HERE.glob("dynamo-request-trace.*.jsonl.gz"):
        old.unlink()
    engine = workload.Engine(block_tokens=BLOCK)
    reqs = workload.requests()
    lines = []
    for n, r in enumerate(reqs):
        lines.append((workload.START_UNIX_S + r.arrival_s + r.e2e_s,
                      json.dumps(record(n, r, engine.serve(r)), separators=(",", ":"))))
        if n in (3, 11):
            lines.append((workload.START_UNIX_S + r.arrival_s + r.e2e_s + 0.4,
                          json.dumps(tool_event(r), separators=(",", ":"))))
    lines.sort(key=lambda x: x[0])  # written when each request ends
    for k in range(0, len(lines), ROLL_LINES):
        path = HERE / f"dynamo-request-trace.{k // ROLL_LINES:06d}.jsonl.gz"
        with gzip.GzipFile(path, "wb", mtime=0) as fh:
            fh.write("".join(line + "\n" for _, line in lines[k:k + ROLL_LINES]).encode())
    sys.stdout.write(f"{workload.totals(reqs)}\n")


if __name__ == "__main__":
    main()
