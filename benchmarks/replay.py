"""Benchmark of the prefix replay: Parquet floor, unlimited hits, one capacity, the whole curve.

Every stage runs in a fresh subprocess (numba caches warmed first, so compile time is not
counted); its peak RSS comes from `resource.getrusage(RUSAGE_CHILDREN)` in a wrapper process
that runs only that stage. Times are the stage's own work (interpreter start-up and imports
excluded) and are also shown as multiples of one `np.sum` over the int64 token array, the unit
of docs/reference/performance-notes.md. One run prints one table.

The trace is generated here with NumPy (seeded): a few hundred shared system prompts (Zipf
popularity), multi-turn conversations whose later turns extend the earlier prompt, and unique
suffixes, so there is real reuse at every capacity. It is written to Parquet (int32 tokens,
~1,000-row row groups) in a temporary folder.

    python benchmarks/replay.py                      # 5e7 tokens, B = 16 and B = 1
    python benchmarks/replay.py --tokens 1e8
    python benchmarks/replay.py --huge               # 1e9 tokens at B = 16 only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
MOONCAKE_CONVERSATION = (
    ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
)

# Targets for each stage. The replay issue's text is not in the repository, so these are the
# figures docs/reference/performance-notes.md measured for a well-built pipeline on these
# 2-core machines (compute as multiples of one np.sum over the int64 token array).
GOALS: dict[str, tuple[str, float, str]] = {
    # key: (description, value, kind) with kind "max" (at most) or "min" (at least)
    "unlimited_x": ("unlimited hits ≤ 0.5× np.sum", 0.5, "max"),
    "single_x": ("one capacity ≤ 1.6× np.sum", 1.6, "max"),
    "curve_x": ("whole curve ≤ 7.5× np.sum", 7.5, "max"),
    "chains_x": ("hash + dense ids + collision check ≤ 13× np.sum", 13.0, "max"),
    "curve_over_single": ("curve / one capacity ≤ 4.7×", 4.7, "max"),
    "end_to_end_tok_s": ("end to end ≥ 5.9e7 tok/s at B=16 (5.3e8 tok in 9 s)", 5.9e7, "min"),
    "peak_b_per_tok": ("curve peak above imports ≤ 5.7 B/token at B=16 (2.8 GiB / 5.3e8)", 5.7,
                       "max"),
    # The notes' numba figure is over NumPy-only code (10× end to end); here over pure Python.
    "naive_speedup": ("chains + one capacity ≥ 10× naive pure Python, B=16 (tok/s)", 10.0,
                      "min"),
    "mooncake_curve_s": ("Mooncake conversation whole curve ≤ 0.5 s (kvcache-simulator)", 0.5,
                         "max"),
}


# ---------------------------------------------------------------- trace generation


def generate(path: Path, tokens: float, seed: int) -> dict[str, int]:
    """Write a token-level trace of about `tokens` prompt tokens to Parquet (int32 ids)."""
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
    conversations: list[np.ndarray] = []  # live conversations: their latest prompt
    max_live = 2000
    schema = pa.schema([("arrival_s", pa.float64()), ("prompt_len", pa.int64()),
                        ("output_len", pa.int64()), ("prompt_tokens", pa.list_(pa.int32()))])
    writer = pq.ParquetWriter(path, schema)
    written = 0
    requests = 0
    clock = 0.0
    rows_per_group = 1000
    while written < tokens:
        prompts: list[np.ndarray] = []
        for _ in range(rows_per_group):
            suffix = rng.integers(0, vocab, int(rng.geometric(1 / 300)), dtype=np.int32)
            if conversations and rng.random() < 0.5:
                # Next turn: the previous prompt, a (simulated) answer and a new question.
                k = int(rng.integers(0, len(conversations)))
                answer = rng.integers(0, vocab, int(rng.geometric(1 / 200)), dtype=np.int32)
                prompt = np.concatenate([conversations[k], answer, suffix])
                if len(prompt) > 32_000 or rng.random() < 0.15:
                    conversations[k] = conversations[-1]
                    conversations.pop()
                else:
                    conversations[k] = prompt
            else:
                head = system[int(rng.choice(n_system, p=popularity))]
                prompt = np.concatenate([head, suffix])
                if len(conversations) < max_live:
                    conversations.append(prompt)
            prompts.append(prompt)
            written += len(prompt)
            if written >= tokens:
                break
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        offsets = np.zeros(len(prompts) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(prompts)
        arrival = clock + np.cumsum(rng.exponential(0.05, len(prompts)))
        clock = float(arrival[-1])
        table = pa.table({
            "arrival_s": arrival,
            "prompt_len": lengths,
            "output_len": rng.integers(1, 500, len(prompts)),
            "prompt_tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        }, schema=schema)
        writer.write_table(table, row_group_size=rows_per_group)
        requests += len(prompts)
    writer.close()
    return {"tokens": int(written), "requests": requests}


# ---------------------------------------------------------------- stage workers


def _read_tokens(path: Path) -> tuple[Any, Any]:
    """The token column as (offsets int64, values int64), read row group by row group.

    The values go straight into one int64 buffer sized from the Parquet metadata (an upper
    bound: the leaf column's value count), so no second full-size copy is ever made.
    """
    import numpy as np
    import pyarrow.parquet as pq  # imported by the caller before its clock starts

    pf = pq.ParquetFile(path)
    meta = pf.metadata
    leaf = next(j for j in range(meta.num_columns)
                if meta.schema.column(j).path.startswith("prompt_tokens"))
    bound = sum(meta.row_group(i).column(leaf).num_values for i in range(meta.num_row_groups))
    values = np.empty(bound, dtype=np.int64)
    offsets = np.zeros(meta.num_rows + 1, dtype=np.int64)
    row = 0
    filled = 0
    for i in range(pf.num_row_groups):
        col = pf.read_row_group(i, columns=["prompt_tokens"]).column(0).combine_chunks()
        off = np.asarray(col.offsets)
        n = int(off[-1] - off[0])
        values[filled:filled + n] = np.asarray(col.values)[off[0]:off[-1]]
        offsets[row + 1:row + 1 + len(col)] = filled + (off[1:] - off[0])
        filled += n
        row += len(col)
    return offsets, values[:filled]


def _sum_time(values: Any) -> float:
    """Seconds of one np.sum over the tokens as int64 (best of three)."""
    import numpy as np

    as64 = np.ascontiguousarray(values, dtype=np.int64)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        np.sum(as64)
        best = min(best, time.perf_counter() - t)
    return best


def run_stage(stage: str, path: str, block: int) -> dict[str, Any]:
    """One measured stage in this (fresh) process; returns its counts and times."""
    import numpy as np
    import pyarrow.parquet  # noqa: F401  (imports stay outside the timed region)

    from yaotu_trace.ingest import load_trace
    from yaotu_trace.replay.blocks import build_block_chains
    from yaotu_trace.replay.engine import replay
    from yaotu_trace.replay.rules import rules_for
    from yaotu_trace.replay.sweep import sweep
    from yaotu_trace.schema import list_arrays

    out: dict[str, Any] = {"stage": stage, "block": block}
    if stage == "mooncake_curve":
        t0 = time.perf_counter()
        trace = load_trace(path)
        t1 = time.perf_counter()
        rules = rules_for("mooncake")
        offsets, values = list_arrays(trace.requests["prompt_block_ids"])
        prompt_len = trace.requests["prompt_len"].to_numpy(dtype=np.int64)
        chains = build_block_chains(offsets, values, prompt_len, 512, None, rules)
        t2 = time.perf_counter()
        curve = sweep(chains, touch_order=rules.touch_order)
        t3 = time.perf_counter()
        out.update(tokens=int(prompt_len.sum()), blocks=len(chains.ids),
                   distinct=chains.num_distinct, read_s=t1 - t0, chains_s=t2 - t1,
                   compute_s=t3 - t2, total_s=t3 - t0, unlimited=curve.unlimited_hit_ratio)
        return out

    t0 = time.perf_counter()
    offsets, values = _read_tokens(Path(path))
    t1 = time.perf_counter()
    out.update(tokens=int(len(values)), read_s=t1 - t0)
    if stage == "floor":
        out.update(sum_s=_sum_time(values), total_s=t1 - t0)
        return out
    rules = rules_for("vllm", block_size_tokens=block)
    chains = build_block_chains(offsets, values, np.diff(offsets), None, None, rules)
    del values
    t2 = time.perf_counter()
    out.update(blocks=len(chains.ids), distinct=chains.num_distinct, chains_s=t2 - t1)
    if stage == "chains":
        out.update(compute_s=t2 - t1, total_s=t2 - t0)
        return out
    if stage == "unlimited":
        result = replay(chains, rules)
        hit = result.saved_prefill_tokens
    elif stage == "single":
        capacity = max(1, chains.num_distinct // 8)
        result = replay(chains, rules.with_(capacity_blocks=capacity))
        hit = result.saved_prefill_tokens
        out["capacity_blocks"] = capacity
    elif stage == "curve":
        curve = sweep(chains, touch_order=rules.touch_order)
        hit = curve.unlimited_hit_tokens
        out["hit_at_eighth"] = int(curve.hit_tokens_at(max(1, chains.num_distinct // 8)))
    else:
        raise SystemExit(f"unknown stage {stage}")
    t3 = time.perf_counter()
    out.update(compute_s=t3 - t2, total_s=t3 - t0, hit_tokens=int(hit))
    return out


def naive_single(path: str, block: int) -> dict[str, Any]:
    """Pure Python: chains interned in a dict, one OrderedDict LRU (tail-first, last-token rule)."""
    offsets, values = _read_tokens(Path(path))
    tokens = values.tolist()
    bounds = offsets.tolist()
    t0 = time.perf_counter()
    table: dict[tuple[int, tuple[int, ...]], int] = {}
    chains: list[list[int]] = []
    for r in range(len(bounds) - 1):
        start, end = bounds[r], bounds[r + 1]
        parent = -1
        ids = []
        for k in range(start, start + (end - start) // block * block, block):
            key = (parent, tuple(tokens[k:k + block]))
            parent = table.get(key, -2)
            if parent == -2:
                parent = len(table)
                table[key] = parent
            ids.append(parent)
        chains.append(ids)
    capacity = max(1, len(table) // 8)
    cache: OrderedDict[int, None] = OrderedDict()
    hit_tokens = 0
    for r, ids in enumerate(chains):
        n = bounds[r + 1] - bounds[r]
        cap = min(len(ids), max(n - 1, 0) // block)
        h = 0
        while h < cap and ids[h] in cache:
            h += 1
        hit_tokens += h * block
        for b in reversed(ids):
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    t1 = time.perf_counter()
    return {"stage": "naive", "block": block, "tokens": len(tokens),
            "blocks": sum(map(len, chains)), "distinct": len(table), "compute_s": t1 - t0,
            "total_s": t1 - t0, "hit_tokens": hit_tokens, "capacity_blocks": capacity}


# ---------------------------------------------------------------- measurement plumbing


def _python() -> list[str]:
    return [sys.executable, str(HERE)]


def measure(args: list[str]) -> dict[str, Any]:
    """Run a worker through a wrapper process that reports the worker's peak RSS."""
    proc = subprocess.run([*_python(), "--measure", *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"stage {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _wrapper(args: list[str]) -> None:
    """Run the worker as a child; print its result plus the child's peak RSS (bytes)."""
    t = time.perf_counter()
    proc = subprocess.run([*_python(), "--worker", *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result.update(peak_rss_bytes=peak_kib * 1024, wall_s=wall)
    print(json.dumps(result))


def _worker(args: list[str]) -> None:
    kind = args[0]
    if kind == "baseline":
        import numba  # noqa: F401  (the imports every stage pays for)
        import numpy  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        import yaotu_trace.replay.engine
        import yaotu_trace.replay.sweep  # noqa: F401

        print(json.dumps({"stage": "baseline"}))
    elif kind == "generate":
        print(json.dumps(generate(Path(args[1]), float(args[2]), int(args[3]))))
    elif kind == "naive":
        print(json.dumps(naive_single(args[1], int(args[2]))))
    elif kind == "warm":
        print(json.dumps(run_stage("curve", args[1], 16) | run_stage("single", args[1], 16)
                         | run_stage("unlimited", args[1], 16)))
    else:
        print(json.dumps(run_stage(kind, args[1], int(args[2]))))


# ---------------------------------------------------------------- report


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def _verdict(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    _, goal, kind = GOALS[key]
    ok = value <= goal if kind == "max" else value >= goal
    if ok:
        return "pass"
    short = value / goal if kind == "max" else goal / value
    return f"short by {short:.1f}×"


def main() -> None:
    """Parse options, run every stage in fresh processes, print one table."""
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        _wrapper(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=5e7, help="generated prompt tokens")
    parser.add_argument("--huge", action="store_true", help="1e9 tokens, B = 16 only")
    parser.add_argument("--naive-tokens", type=float, default=1e6,
                        help="tokens for the pure-Python reference (it runs at ~1e6 tok/s)")
    parser.add_argument("--block-sizes", default="16,1", help="comma-separated block sizes")
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--mooncake", type=Path, default=MOONCAKE_CONVERSATION)
    opts = parser.parse_args()
    tokens = 1e9 if opts.huge else opts.tokens
    blocks = [16] if opts.huge else [int(b) for b in opts.block_sizes.split(",")]

    with tempfile.TemporaryDirectory(dir=opts.workdir) as tmp:
        big = Path(tmp) / "trace.parquet"
        small = Path(tmp) / "naive.parquet"
        gen = measure(["generate", str(big), str(tokens), str(opts.seed)])
        measure(["generate", str(small), str(opts.naive_tokens), str(opts.seed)])
        measure(["warm", str(small)])  # compile or load every numba cache once
        baseline = measure(["baseline"])["peak_rss_bytes"]
        rows: list[dict[str, Any]] = []
        floor = measure(["floor", str(big), "16"])
        rows.append(floor)
        sum_s = floor["sum_s"]
        for block in blocks:
            for stage in ("chains", "unlimited", "single", "curve"):
                rows.append(measure([stage, str(big), str(block)]))
        naive = {b: measure(["naive", str(small), str(b)]) for b in blocks}
        compiled_small = {b: measure(["single", str(small), str(b)]) for b in blocks}
        mooncake = (measure(["mooncake_curve", str(opts.mooncake), "512"])
                    if opts.mooncake.exists() else None)

    _print_table(gen, rows, sum_s, naive, compiled_small, mooncake, tokens, baseline)


def _print_table(gen: dict[str, Any], rows: list[dict[str, Any]], sum_s: float,
                 naive: dict[int, dict[str, Any]], compiled_small: dict[int, dict[str, Any]],
                 mooncake: dict[str, Any] | None, tokens: float, baseline: int) -> None:
    names = {"floor": "Parquet token column (floor)",
             "chains": "hash + dense ids + collision check",
             "unlimited": "unlimited hits", "single": "one capacity (LRU)",
             "curve": "whole curve (all capacities)"}
    print(f"prefix replay benchmark: {gen['tokens']:,} generated tokens, {gen['requests']:,} "
          f"requests; np.sum(int64 tokens) = {sum_s * 1e3:.1f} ms; {os.cpu_count()} cores; "
          f"interpreter + imports alone peak at {_gib(baseline)} GiB")
    header = (f"{'stage':36} {'B':>3} {'tokens':>13} {'blocks':>13} {'distinct':>12} "
              f"{'compute s':>9} {'×sum':>6} {'total s':>8} {'Mtok/s':>7} {'peak GiB':>8}")
    print(header)
    print("-" * len(header))
    by: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        by[(r["stage"], r["block"])] = r
        compute = r.get("compute_s", r.get("read_s", 0.0))
        print(f"{names[r['stage']]:36} {r['block'] if r['stage'] != 'floor' else '-':>3} "
              f"{r['tokens']:>13,} {r.get('blocks', 0):>13,} {r.get('distinct', 0):>12,} "
              f"{compute:>9.3f} {compute / sum_s:>6.1f} {r['total_s']:>8.2f} "
              f"{r['tokens'] / r['total_s'] / 1e6:>7.1f} {_gib(r['peak_rss_bytes']):>8}")
    for block in sorted({b for _, b in by if b}):
        if ("curve", block) in by and ("single", block) in by:
            ratio = by[("curve", block)]["compute_s"] / by[("single", block)]["compute_s"]
            print(f"curve / one capacity at B={block}: {ratio:.2f}×")
    speedups = {}
    for block, slow in naive.items():
        same = compiled_small[block]
        slow_tps = slow["tokens"] / slow["compute_s"]
        same_tps = same["tokens"] / (same["chains_s"] + same["compute_s"])
        full = by.get(("single", block))
        full_tps = (full["tokens"] / (full["chains_s"] + full["compute_s"])) if full else same_tps
        speedups[block] = full_tps / slow_tps
        print(f"naive pure Python (dict-interned chains, OrderedDict LRU) at B={block}: "
              f"{slow['tokens']:,} tokens in {slow['compute_s']:.2f} s = {slow_tps / 1e6:.2f} "
              f"Mtok/s; compiled chains + one capacity: {same_tps / 1e6:.1f} Mtok/s on the same "
              f"data (same hits: {slow['hit_tokens'] == same['hit_tokens']}), "
              f"{full_tps / 1e6:.1f} Mtok/s at full size = {speedups[block]:.1f}× naive")
    if mooncake:
        print(f"Mooncake conversation trace ({mooncake['tokens']:,} tokens, "
              f"{mooncake['distinct']:,} distinct 512-token blocks): whole curve "
              f"{mooncake['compute_s']:.3f} s compute, {mooncake['total_s']:.2f} s with reading "
              f"and chaining, {mooncake['wall_s']:.2f} s process wall, peak "
              f"{_gib(mooncake['peak_rss_bytes'])} GiB")

    # Goals next to the measurements.
    measured: dict[str, float | None] = {}
    b16 = {s: by.get((s, 16)) for s in ("chains", "unlimited", "single", "curve")}
    if all(b16.values()):
        measured["unlimited_x"] = b16["unlimited"]["compute_s"] / sum_s  # type: ignore[index]
        measured["single_x"] = b16["single"]["compute_s"] / sum_s  # type: ignore[index]
        measured["curve_x"] = b16["curve"]["compute_s"] / sum_s  # type: ignore[index]
        measured["chains_x"] = b16["chains"]["chains_s"] / sum_s  # type: ignore[index]
        measured["curve_over_single"] = (b16["curve"]["compute_s"]  # type: ignore[index]
                                         / b16["single"]["compute_s"])  # type: ignore[index]
        curve = b16["curve"]
        measured["end_to_end_tok_s"] = curve["tokens"] / curve["total_s"]  # type: ignore[index]
        measured["peak_b_per_tok"] = ((curve["peak_rss_bytes"] - baseline)  # type: ignore[index]
                                      / curve["tokens"])  # type: ignore[index]
    measured["naive_speedup"] = speedups.get(16)
    measured["mooncake_curve_s"] = mooncake["total_s"] if mooncake else None
    print()
    print(f"{'goal (docs/reference/performance-notes.md)':72} {'measured':>12}  status")
    for key, (text, _, _) in GOALS.items():
        value = measured.get(key)
        shown = "–" if value is None else (f"{value:.3g}")
        print(f"{text:72} {shown:>12}  {_verdict(key, value)}")
    if tokens < 1e8:
        print("note: at small sizes fixed costs dominate the ×sum ratios; try --tokens 1e8")


if __name__ == "__main__":
    main()
