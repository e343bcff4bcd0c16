"""Step-log benchmark: `diagnose` and `report` with a large engine step log, streamed or whole.

A step log of 8 instances with 30 ms steps (Parquet in start order, 1M-row row groups, with
prefill and decode tokens, queues, KV blocks and rare preemptions) is generated with a small
request trace over the same span (20,000 requests with engine timing). Each command runs in
a fresh process with `--stats`, two ways:

- streamed: as shipped, the log stays on disk and every pass reads it in record batches;
- whole (the baseline): the same command with the log read into memory up front, as a JSONL
  or CSV log, or a Parquet log out of start order, is read.

Both must print the same JSON (checked); the table gives both and the memory ratio.

    python benchmarks/steplog.py                      # 2e6 and 2e7 steps
    python benchmarks/steplog.py --sizes 1e8 --modes streamed
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import GIB, cell, ratio, run_trace, whole_read

INSTANCES = 8
COMMANDS = {"diagnose": ["diagnose"], "report": ["report"]}
# The baseline: the same CLI with the step log never left on disk.
WHOLE = whole_read("import yaotu_trace.ingest.load as i; i.open_parquet = lambda path: None")


def generate(folder: Path, steps: float, seed: int = 0) -> tuple[Path, Path]:
    """Write steps.parquet (sorted by start_s) and req.parquet covering the same span."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = int(steps)
    rng = np.random.default_rng(seed)
    span_s = rows / INSTANCES * 0.03
    n = 20_000
    arrival = np.sort(rng.uniform(0, span_s, n))
    scheduled = arrival + rng.exponential(0.05, n)
    first = scheduled + rng.exponential(0.1, n)
    requests, log = folder / "req.parquet", folder / "steps.parquet"
    pq.write_table(pa.table({
        "arrival_s": arrival, "scheduled_s": scheduled, "first_token_s": first,
        "finish_s": first + rng.exponential(2.0, n),
        "prompt_len": rng.integers(100, 4000, n), "output_len": rng.integers(10, 500, n),
        "instance": [f"i{k}" for k in rng.integers(0, INSTANCES, n)],
    }), requests)
    chunk = 1 << 20
    clock = 0.0
    writer = None
    for lo in range(0, rows, chunk):
        m = min(chunk, rows - lo)
        start = clock + np.cumsum(rng.exponential(0.03 / INSTANCES, m))
        clock = float(start[-1])
        table = pa.table({
            "instance": [f"i{k}" for k in np.arange(lo, lo + m) % INSTANCES],
            "start_s": start, "end_s": start + rng.uniform(0.01, 0.05, m),
            "prefill_tokens": np.where(rng.random(m) < 0.2, rng.integers(1, 2048, m), 0),
            "decode_tokens": rng.integers(0, 64, m),
            "num_running": rng.integers(1, 64, m), "num_waiting": rng.integers(0, 3, m),
            "kv_blocks_used": rng.integers(100, 2000, m), "kv_blocks_total": np.full(m, 2048),
            "num_preempted": (rng.random(m) < 0.001).astype(np.int64),
        })
        writer = writer or pq.ParquetWriter(log, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()
    return requests, log


def main() -> None:
    """Generate each size, run each command both ways, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2e6,2e7", help="steps, comma-separated")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--modes", default="streamed,whole")
    opts = parser.parse_args()
    modes = opts.modes.split(",")
    lines = ["| steps | Parquet GiB | command | streamed s | streamed GiB | whole s | whole GiB | "
             "memory whole/streamed | same JSON |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for size in (float(s) for s in opts.sizes.split(",")):
        folder = Path(tempfile.mkdtemp(prefix="yaotu-steps-"))
        try:
            requests, log = generate(folder, size)
            for command in opts.commands.split(","):
                args = [*COMMANDS[command][:1], str(requests), "--steps", str(log),
                        "--format", "json"]
                got: dict[str, dict[str, Any]] = {
                    mode: run_trace(args, None if mode == "streamed" else WHOLE)
                    for mode in modes}
                for mode, r in got.items():
                    print(f"{size:.0e} {command:<8} {mode:<8} {r['wall_s']:6.1f} s peak "
                          f"{r['peak_gib']} GiB {'ok' if r['ok'] else r['error']}",
                          file=sys.stderr)
                s, w = got.get("streamed"), got.get("whole")
                same = ("–" if not (s and w) else
                        "yes" if s["ok"] and s["out"] == w["out"] else "NO")
                lines.append(f"| {int(size):,} | {log.stat().st_size / GIB:.2f} | {command} | "
                             f"{cell(s, 'wall_s', 1)} | {cell(s, 'peak_gib', 2)} | "
                             f"{cell(w, 'wall_s', 1)} | {cell(w, 'peak_gib', 2)} | "
                             f"{ratio(w, s, 'peak_gib')} | {same} |")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
