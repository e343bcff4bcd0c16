"""LMCache's per-request lookup line, written by LMCache's own logger.

LMCache's vLLM adapter logs one line per lookup (lmcache 0.5.6,
`lmcache/integration/vllm/vllm_v1_adapter.py`, `LMCacheConnectorV1Impl.
get_num_new_matched_tokens`):

    Reqid: R, Total tokens N, Inference Engine computed tokens: C, LMCache hit tokens: H,
    need to load: L

with C the engine's own prefix-cache hit, H LMCache's hit from token 0 and L = max(H − C, 0).
The adapter itself needs LMCache's compiled GPU ops; this script writes the line through
LMCache's logger (`lmcache.logging.init_logger`, its `CustomFormatter`: colour codes, the
`[YYYY-MM-DD HH:MM:SS,mmm] LMCache INFO:` head and the `(file:line:logger)` tail) with the
adapter's format string, from a per-request file `--requests` (request_id, prompt_tokens,
gpu_hit_tokens and the tiers' hit columns), by default
`tests/fixtures/tier_metrics/lmcache_mixed.requests.csv`, written by yaotu-trace's tiered replay
under LMCache's rules:

    trace replay tests/fixtures/engines/trace_mixed.parquet --preset vllm --capacity 66 \\
        --tier cpu=4096tokens --tier-policy lmcache --no-waterfall --out split.csv

C = gpu_hit_tokens, L = the tiers' hits, H = C + L. The log's clock is pinned to the trace's
arrivals (2025-12-01 plus arrival_s). This checks how the lines are read, not the replay.
Run with LMCache 0.5.6 on the path (its wheel unpacked is enough):

    cd / && PYTHONPATH=/path/to/lmcache-0.5.6 python \\
        /work/…/benchmarks/engines/tier_metrics_lmcache.py [--requests split.csv]
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tier_metrics"
REQUESTS = OUT / "lmcache_mixed.requests.csv"
TRACE = ROOT / "tests" / "fixtures" / "engines" / "trace_mixed.parquet"
EPOCH_S = 1_764_547_200.0  # 2025-12-01 00:00:00 UTC
ADAPTER_LINE = ("Reqid: %s, Total tokens %d, Inference Engine computed tokens: %d, "
                "LMCache hit tokens: %d, need to load: %d")  # vllm_v1_adapter.py, 0.5.6


def main(argv: list[str] | None = None) -> int:
    import pyarrow.parquet as pq
    from lmcache.logging import init_logger

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=Path, default=REQUESTS)
    args = parser.parse_args(argv)
    with args.requests.open() as fh:
        rows = list(csv.DictReader(fh))
    tiers = [c for c in rows[0] if c.endswith("_hit_tokens") and c not in
             ("gpu_hit_tokens",)]
    keep = ["request_id", "prompt_tokens", "gpu_hit_tokens", *tiers]
    if args.requests != REQUESTS:
        with REQUESTS.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keep, lineterminator="\n",
                                    extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    arrival = dict(zip(*pq.read_table(TRACE, columns=["request_id", "arrival_s"])
                       .to_pydict().values(), strict=True))
    logger = init_logger("lmcache.integration.vllm.vllm_v1_adapter")
    stream = io.StringIO()
    handler = logger.handlers[0] if logger.handlers else logging.StreamHandler()
    formatter = handler.formatter
    assert formatter is not None
    formatter.converter = time.gmtime  # type: ignore[attr-defined]
    sink = logging.StreamHandler(stream)
    sink.setFormatter(formatter)
    logger.handlers = [sink]
    logger.propagate = False
    for row in rows:
        computed = int(row["gpu_hit_tokens"])
        load = sum(int(row[c]) for c in tiers if row.get(c))
        stamp = EPOCH_S + float(arrival[row["request_id"]])
        record = logger.makeRecord(logger.name, logging.INFO, "vllm_v1_adapter.py", 1478,
                                   ADAPTER_LINE, (row["request_id"], int(row["prompt_tokens"]),
                                                  computed, computed + load, load), None,
                                   func="get_num_new_matched_tokens")
        record.created, record.msecs = stamp, (stamp % 1) * 1000
        logger.handle(record)
    (OUT / "lmcache_mixed.log").write_text(stream.getvalue())
    print(stream.getvalue().splitlines()[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
