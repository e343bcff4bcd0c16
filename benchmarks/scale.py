"""Scale benchmark: throughput and peak memory of whole commands at 1e7, 1e8 and 1e9 tokens.

For each size a trace is generated (seeded, NumPy only) into a temporary folder: Parquet with
int32 prompt tokens in ~1,000-row row groups, tenants, serving instances and engine timing
(first token and finish times), with shared system prompts (Zipf popularity), multi-turn
conversations and unique suffixes, so prefix reuse is real at every size. Then each command
runs as a fresh `trace ... --stats` process, locally and on a local Dask cluster of two worker
processes (`--dask local`) where the command has partitioned passes (all but analyze):

- analyze: `trace analyze T` (profile, timing, prefix-reuse overview with its capacity sweep);
- replay: `trace replay T --scope instance --capacity 2Mtok --capacity-per-tenant
  --no-waterfall` (per-instance, per-tenant LRU caches: partitioned);
- waterfall: the same replay with the loss waterfall (six replays and the token-granular ideal);
- grid: `trace replay T --grid block-size=16,64 --grid tenant-isolation=on,off --grid
  capacity=1Mtok,unlimited` (8 rule sets sharing one read per block size);
- diagnose: `trace diagnose T --model Llama-3.1-8B` (the four axes and the ledger; its prefix
  replay has per-instance caches, since the trace names several instances).

Time is the process's wall clock (start-up, imports, Parquet reading and, for Dask, starting
the cluster included); memory is the peak RSS the command reports with `--stats` (its own, and
its largest worker process). The table ends with the growth of time and memory per 10× tokens.

    python benchmarks/scale.py                   # 1e7 and 1e8 tokens: a few minutes
    python benchmarks/scale.py --sizes 1e9       # the full size (about 10 minutes)
    python benchmarks/scale.py --sizes 1e10 --commands replay,diagnose --modes local,dask \
        --keep /tmp/scale                        # 6 min to generate 21 GiB, then ~15 min
    python benchmarks/scale.py --sizes 1e7 --commands replay,waterfall --modes local,jobs,dask

Modes: `local` (one process), `jobs` (`--jobs 2` worker processes), `dask` (`--dask local`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from common import GIB, run_trace

COMMANDS: dict[str, list[str]] = {
    "analyze": ["analyze"],
    "replay": ["replay", "--scope", "instance", "--capacity", "2Mtok", "--capacity-per-tenant",
               "--no-waterfall"],
    "waterfall": ["replay", "--scope", "instance", "--capacity", "2Mtok",
                  "--capacity-per-tenant"],
    "grid": ["replay", "--grid", "block-size=16,64", "--grid", "tenant-isolation=on,off",
             "--grid", "capacity=1Mtok,unlimited"],
    "diagnose": ["diagnose", "--model", "Llama-3.1-8B"],
}
# Commands whose passes partition (and so take --jobs/--dask). analyze's only replay is the
# overview's capacity sweep of one global cache: it runs in one process.
PARALLEL = ("replay", "waterfall", "grid", "diagnose")
MODES = {"local": [], "jobs": ["--jobs", "2"], "dask": ["--dask", "local"]}


def generate(path: Path, tokens: float, seed: int = 1) -> dict[str, int]:
    """Write a trace of about `tokens` prompt tokens (int32 ids) with tenants and timing."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    vocab = 128_000
    n_system = 200
    system = [rng.integers(0, vocab, int(rng.integers(200, 4000)), dtype=np.int32)
              for _ in range(n_system)]
    popularity = 1.0 / np.arange(1, n_system + 1) ** 1.1
    popularity /= popularity.sum()
    tenants = pa.array([f"tenant-{k}" for k in range(8)])
    instances = pa.array([f"gpu-{k}" for k in range(4)])
    live: list[tuple[np.ndarray, int]] = []  # conversations: (latest prompt, tenant)
    schema = pa.schema([
        ("request_id", pa.string()), ("arrival_s", pa.float64()),
        ("tenant", pa.dictionary(pa.int32(), pa.string())),
        ("instance", pa.dictionary(pa.int32(), pa.string())),
        ("prompt_len", pa.int64()), ("output_len", pa.int64()),
        ("prompt_tokens", pa.list_(pa.int32())),
        ("first_token_s", pa.float64()), ("finish_s", pa.float64()),
    ])
    written = requests = 0
    clock = 0.0
    rows = 1000
    with pq.ParquetWriter(path, schema) as writer:
        while written < tokens:
            prompts: list[np.ndarray] = []
            owner: list[int] = []
            for _ in range(rows):
                suffix = rng.integers(0, vocab, int(rng.geometric(1 / 300)), dtype=np.int32)
                if live and rng.random() < 0.5:
                    k = int(rng.integers(0, len(live)))
                    answer = rng.integers(0, vocab, int(rng.geometric(1 / 200)), dtype=np.int32)
                    prompt = np.concatenate([live[k][0], answer, suffix])
                    tenant = live[k][1]
                    if len(prompt) > 32_000 or rng.random() < 0.15:
                        live[k] = live[-1]
                        live.pop()
                    else:
                        live[k] = (prompt, tenant)
                else:
                    head = int(rng.choice(n_system, p=popularity))
                    prompt = np.concatenate([system[head], suffix])
                    tenant = head % 8
                    if len(live) < 2000:
                        live.append((prompt, tenant))
                prompts.append(prompt)
                owner.append(tenant)
                written += len(prompt)
                if written >= tokens:
                    break
            n = len(prompts)
            lengths = np.array([len(p) for p in prompts], dtype=np.int64)
            offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            arrival = clock + np.cumsum(rng.exponential(0.05, n))
            clock = float(arrival[-1])
            output = rng.integers(1, 500, n)
            first = arrival + rng.exponential(0.2, n) + lengths * 2e-5
            writer.write_table(pa.table({
                "request_id": pa.array([f"r{requests + i}" for i in range(n)]),
                "arrival_s": arrival,
                "tenant": pa.DictionaryArray.from_arrays(pa.array(owner, pa.int32()), tenants),
                "instance": pa.DictionaryArray.from_arrays(
                    pa.array(rng.integers(0, 4, n), pa.int32()), instances),
                "prompt_len": lengths,
                "output_len": output,
                "prompt_tokens": pa.ListArray.from_arrays(pa.array(offsets),
                                                          pa.array(np.concatenate(prompts))),
                "first_token_s": first,
                "finish_s": first + output * 0.02,
            }, schema=schema), row_group_size=rows)
            requests += n
    return {"tokens": int(written), "requests": requests}


def run(args: list[str]) -> dict[str, Any]:
    """One fresh `trace ... --stats --format json` process."""
    return run_trace([*args, "--format", "json"])


def main() -> None:
    """Generate each size, run each command and mode, print the table and the growth."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e7,1e8", help="token counts, comma-separated")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--modes", default="local,dask")
    parser.add_argument("--keep", type=Path, help="keep the generated traces in this folder")
    opts = parser.parse_args()
    sizes = [float(s) for s in opts.sizes.split(",")]
    commands = opts.commands.split(",")
    modes = opts.modes.split(",")
    folder = opts.keep or Path(tempfile.mkdtemp(prefix="yaotu-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            path = folder / f"scale-{size:.0e}.parquet"
            if not path.exists():
                t0 = time.perf_counter()
                info = generate(path, size)
                print(f"generated {info['tokens']:,} tokens, {info['requests']:,} requests in "
                      f"{time.perf_counter() - t0:.0f} s ({path.stat().st_size / GIB:.2f} GiB)",
                      file=sys.stderr)
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            tokens = sum(meta.row_group(i).column(6).num_values
                         for i in range(meta.num_row_groups))
            for command in commands:
                for mode in modes:
                    if mode != "local" and command not in PARALLEL:
                        continue
                    result = run([*COMMANDS[command][:1], str(path), *COMMANDS[command][1:],
                                  *MODES[mode]])
                    row = {"tokens": tokens, "requests": meta.num_rows, "command": command,
                           "mode": mode, **result}
                    rows.append(row)
                    print(_line(row), file=sys.stderr)
    finally:
        if opts.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    print(table(rows))


def _line(row: dict[str, Any]) -> str:
    status = "ok" if row["returncode"] == 0 else f"failed: {row.get('error')}"
    return (f"{row['tokens']:.1e} {row['command']:<9} {row['mode']:<5} {row['wall_s']:7.1f} s "
            f"peak {row['peak_gib']} GiB worker {row['worker_gib']} GiB {status}")


def _gib(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per run, then the growth per 10× tokens of each command and mode."""
    out = ["| tokens | requests | command | mode | wall s | Mtok/s | peak GiB | worker GiB |",
           "|---:|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        ok = r["returncode"] == 0
        out.append(
            f"| {r['tokens']:,} | {r['requests']:,} | {r['command']} | {r['mode']} | "
            f"{r['wall_s']:.1f}{'' if ok else ' (failed)'} | "
            f"{r['tokens'] / r['wall_s'] / 1e6:.1f} | "
            f"{_gib(r['peak_gib'])} | {_gib(r['worker_gib'])} |")
    growth = ["", "| command | mode | from → to tokens | time × | peak memory × |",
              "|---|---|---|---:|---:|"]
    keys = sorted({(r["command"], r["mode"]) for r in rows},
                  key=lambda k: (list(COMMANDS).index(k[0]), k[1]))
    for command, mode in keys:
        series = [r for r in rows if (r["command"], r["mode"]) == (command, mode)
                  and r["returncode"] == 0]
        for a, b in pairwise(series):
            mem = (f"{b['peak_gib'] / a['peak_gib']:.2f}" if a["peak_gib"] and b["peak_gib"]
                   else "–")
            growth.append(f"| {command} | {mode} | {a['tokens']:.0e} → {b['tokens']:.0e} | "
                          f"{b['wall_s'] / a['wall_s']:.2f} | {mem} |")
    return "\n".join(out + (growth if len(growth) > 3 else []))


if __name__ == "__main__":
    main()
