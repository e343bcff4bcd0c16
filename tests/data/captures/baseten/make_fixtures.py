"""Write `baseten_trace.parquet`: the workload (`../workload.py`) as a Baseten request trace,
in the schema AIPerf's `baseten_trace` loader validates (Baseten's exporter does not run here).

Run with AIPerf installed (0.13.0 here, with pyarrow):

    python tests/data/captures/baseten/make_fixtures.py

Each row is validated by AIPerf's own `BasetenTrace` model
(`aiperf/dataset/loader/baseten_trace.py`) and the file must pass
`BasetenTraceDatasetLoader.can_load`. Columns: timestamp_start_unix_ms, prompt (a stand-in
text), input_tokens, output_tokens, total_hashes (chained 64-bit hashes of 16-token blocks,
the final partial block included), block_size, provided_session_id, poor_man_session_id,
duration_e2e_ms, duration_ttft_ms, cached_tokens_reference (the workload engine's hits),
request_canceled (one request), org_id (the tenant), model_name.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402

BLOCK = 16


def hashes(tokens: tuple[int, ...]) -> list[int]:
    out, parent = [], b""
    for i in range(0, len(tokens), BLOCK):
        digest = hashlib.blake2b(parent + repr(tokens[i:i + BLOCK]).encode(),
                                 digest_size=8).digest()
        out.append(int.from_bytes(digest, "little") >> 1)  # BasetenTrace wants them >= 0
        parent = digest
    return out


def main() -> None:
    from aiperf.dataset.loader.baseten_trace import BasetenTrace, BasetenTraceDatasetLoader

    engine = workload.Engine(block_tokens=BLOCK)
    reqs = workload.requests()
    rows = []
    for n, r in enumerate(reqs):
        canceled = n == 7
        rows.append({
            "timestamp_start_unix_ms": int((workload.START_UNIX_S + r.arrival_s) * 1000),
            "prompt": f"<{len(r.prompt)} tokens of text>",
            "input_tokens": len(r.prompt),
            "output_tokens": 0 if canceled else len(r.output),
            "total_hashes": hashes(r.prompt),
            "block_size": BLOCK,
            "provided_session_id": r.session,
            "poor_man_session_id": int(r.session.removeprefix("conv")),
            "duration_e2e_ms": int(r.ttft_s * 1000) if canceled else int(r.e2e_s * 1000),
            "duration_ttft_ms": int(r.ttft_s * 1000),
            "cached_tokens_reference": engine.serve(r),
            "request_canceled": int(canceled),
            "org_id": r.tenant,
            "model_name": "Qwen/Qwen3-8B",
        })
        BasetenTrace(**rows[-1])
    path = HERE / "baseten_trace.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=20)
    assert BasetenTraceDatasetLoader.can_load(filename=str(path))
    written = sum(row["output_tokens"] for row in rows)
    sys.stdout.write(f"{workload.totals(reqs)} output tokens written: {written}\n")


if __name__ == "__main__":
    main()
