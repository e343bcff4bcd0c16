"""Timed-trace benchmark: time and peak memory when the per-token emission times are large.

A generated canonical Parquet trace with `token_times_s` (every output token's emission time,
4 instances, no prompt content) is analysed by `analyze`, `diagnose` and `report -f json`, each
in a fresh process with `--stats`, two ways:

- streamed: as shipped, the token times stay on disk and are read in record batches, in passes
  (the gap summary, the stalls, the plot window); only per-request values and the stalls are
  held;
- whole (the baseline): the same command with the token-time lists read into memory up front
  and every gap held, as a trace in JSONL or CSV would be.

The two must print the same JSON (checked); the table gives both and their ratio.

    python benchmarks/timed.py                       # 1e7 and 1e8 output tokens
    python benchmarks/timed.py --sizes 3e8 --modes streamed
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import GIB, cell, ratio, run_trace, whole_read

TOKENS_PER_REQUEST = 400
COMMANDS = {"analyze": ["analyze"], "diagnose": ["diagnose", "--model", "Llama-3.1-8B"],
            "report": ["report"]}
# The baseline: the same CLI with the lazy reading of list columns switched off.
WHOLE = whole_read("from yaotu_trace.data import canonical; "
                   "canonical.lazy_content = lambda path: None")


def generate(path: Path, output_tokens: float, seed: int = 2) -> int:
    """Write requests of 400 token times each (30 ms apart, with rare prefill stalls)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n = max(1, int(output_tokens // TOKENS_PER_REQUEST))
    rows = 2_000
    with pq.ParquetWriter(path, pa.schema([
        ("request_id", pa.string()), ("arrival_s", pa.float64()), ("instance", pa.string()),
        ("prompt_len", pa.int64()), ("output_len", pa.int64()),
        ("scheduled_s", pa.float64()), ("first_token_s", pa.float64()),
        ("finish_s", pa.float64()), ("token_times_s", pa.list_(pa.float64())),
    ])) as writer:
        clock = 0.0
        for start in range(0, n, rows):
            m = min(rows, n - start)
            arrival = clock + np.cumsum(rng.exponential(0.02, m))
            clock = float(arrival[-1])
            first = arrival + rng.exponential(0.15, m)
            gaps = rng.normal(0.03, 0.002, (m, TOKENS_PER_REQUEST - 1)).clip(0.01)
            stall = rng.random((m, TOKENS_PER_REQUEST - 1)) < 0.01
            gaps[stall] += rng.exponential(0.2, int(stall.sum()))
            times = np.concatenate([first[:, None], first[:, None] + np.cumsum(gaps, axis=1)],
                                   axis=1)
            offsets = np.arange(0, (m + 1) * TOKENS_PER_REQUEST, TOKENS_PER_REQUEST,
                                dtype=np.int32)
            writer.write_table(pa.table({
                "request_id": [f"r{start + i}" for i in range(m)],
                "arrival_s": arrival,
                "instance": [f"gpu-{k}" for k in rng.integers(0, 4, m)],
                "prompt_len": rng.integers(100, 4000, m),
                "output_len": np.full(m, TOKENS_PER_REQUEST),
                "scheduled_s": arrival + rng.exponential(0.05, m).clip(max=first - arrival),
                "first_token_s": first,
                "finish_s": times[:, -1],
                "token_times_s": pa.ListArray.from_arrays(pa.array(offsets),
                                                          pa.array(times.ravel())),
            }), row_group_size=rows)
    return n * TOKENS_PER_REQUEST


def run(mode: str, args: list[str]) -> dict[str, Any]:
    """One fresh process, streamed or with the token times read whole."""
    return run_trace([*args, "--format", "json"], None if mode == "streamed" else WHOLE)


def main() -> None:
    """Generate each size, run each command both ways, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e7,1e8", help="output tokens, comma-separated")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--modes", default="streamed,whole")
    parser.add_argument("--keep", type=Path, help="keep the generated traces in this folder")
    opts = parser.parse_args()
    modes = opts.modes.split(",")
    folder = opts.keep or Path(tempfile.mkdtemp(prefix="yaotu-timed-"))
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["| output tokens | command | streamed s | streamed GiB | whole s | whole GiB | "
             "memory whole/streamed | same JSON |", "|---:|---|---:|---:|---:|---:|---:|---|"]
    try:
        for size in (float(s) for s in opts.sizes.split(",")):
            path = folder / f"timed-{size:.0e}.parquet"
            if not path.exists():
                tokens = generate(path, size)
                print(f"generated {tokens:,} token times ({path.stat().st_size / GIB:.2f} GiB)",
                      file=sys.stderr)
            tokens = int(size // TOKENS_PER_REQUEST) * TOKENS_PER_REQUEST
            for command in opts.commands.split(","):
                args = [COMMANDS[command][0], str(path), *COMMANDS[command][1:]]
                got = {mode: run(mode, args) for mode in modes}
                for mode, r in got.items():
                    print(f"{tokens:.1e} {command:<8} {mode:<8} {r['wall_s']:6.1f} s "
                          f"peak {r['peak_gib']} GiB {'ok' if r['ok'] else r['error']}",
                          file=sys.stderr)
                s, w = got.get("streamed"), got.get("whole")
                same = ("yes" if s and w and s["ok"] and s["out"] == w["out"]
                        else "–" if not (s and w) else "NO")
                lines.append(
                    f"| {tokens:,} | {command} | {cell(s, 'wall_s', 1)} | "
                    f"{cell(s, 'peak_gib', 2)} | {cell(w, 'wall_s', 1)} | "
                    f"{cell(w, 'peak_gib', 2)} | {ratio(w, s, 'peak_gib')} | {same} |")
    finally:
        if opts.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
