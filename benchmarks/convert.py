"""Convert benchmark: a large canonical JSONL trace to Parquet, in parts against whole.

A canonical JSONL trace with token-id prompts (shared system prompts, unique suffixes) is
generated, then `trace convert T --out T.parquet --stats` runs in fresh processes two ways:

- parts: as shipped, about 32 MB of text parsed, validated and written at a time;
- whole (the baseline): the same command with one part, so the whole file is parsed into
  memory first, as every other reader does.

Both outputs must hold the same table (checked); the table gives time, peak memory and the
ratio, and the JSONL's size for scale.

    python benchmarks/convert.py                    # 1e7 and 5e7 prompt tokens
    python benchmarks/convert.py --sizes 1e8
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import GIB, ratio, run_trace, whole_read

# The baseline: the same CLI with parts large enough to hold any file.
WHOLE = whole_read("import yaotu_trace.ingest.convert as c; c.PART_BYTES = 1 << 50")


def generate(path: Path, tokens: float, seed: int = 3) -> int:
    """Write canonical JSONL: 200 system prompts (Zipf) plus a unique suffix per request."""
    import numpy as np

    rng = np.random.default_rng(seed)
    system = [rng.integers(0, 128_000, int(rng.integers(200, 3000))) for _ in range(200)]
    weights = 1.0 / np.arange(1, 201) ** 1.1
    weights /= weights.sum()
    written = i = 0
    clock = 0.0
    with path.open("w") as fh:
        while written < tokens:
            head = system[int(rng.choice(200, p=weights))]
            prompt = np.concatenate([head, rng.integers(0, 128_000, int(rng.geometric(1 / 400)))])
            clock += float(rng.exponential(0.05))
            fh.write(f'{{"request_id":"r{i}","arrival_s":{clock:.6f},"tenant":"t{i % 8}",'
                     f'"prompt_len":{prompt.size},"output_len":{int(rng.integers(1, 500))},'
                     f'"prompt_tokens":[{",".join(map(str, prompt.tolist()))}]}}\n')
            written += prompt.size
            i += 1
    return written


def run(mode: str, source: Path, out: Path) -> dict[str, Any]:
    """One fresh `trace convert` process, in parts or whole."""
    return run_trace(["convert", str(source), "--out", str(out)],
                     None if mode == "parts" else WHOLE)


def main() -> None:
    """Generate each size, convert it both ways, check the outputs agree, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e7,5e7", help="prompt tokens, comma-separated")
    parser.add_argument("--keep", type=Path, help="keep the generated files in this folder")
    opts = parser.parse_args()
    import pyarrow.parquet as pq

    folder = opts.keep or Path(tempfile.mkdtemp(prefix="yaotu-convert-"))
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["| prompt tokens | JSONL GiB | parts s | parts GiB | whole s | whole GiB | "
             "memory whole/parts | same table |", "|---:|---:|---:|---:|---:|---:|---:|---|"]
    try:
        for size in (float(s) for s in opts.sizes.split(",")):
            source = folder / f"convert-{size:.0e}.jsonl"
            tokens = generate(source, size)
            got = {mode: run(mode, source, folder / f"{mode}.parquet")
                   for mode in ("parts", "whole")}
            for mode, r in got.items():
                print(f"{tokens:.1e} {mode:<5} {r['wall_s']:6.1f} s peak {r['peak_gib']} GiB "
                      f"{'ok' if r['ok'] else r['error']}", file=sys.stderr)
            p, w = got["parts"], got["whole"]
            same = (p["ok"] and w["ok"] and pq.read_table(folder / "parts.parquet").equals(
                pq.read_table(folder / "whole.parquet")))
            lines.append(f"| {tokens:,} | {source.stat().st_size / GIB:.2f} | "
                         f"{p['wall_s']:.1f} | {p['peak_gib']} | {w['wall_s']:.1f} | "
                         f"{w['peak_gib']} | {ratio(w, p, 'peak_gib')} | "
                         f"{'yes' if same else 'NO'} |")
            source.unlink()
    finally:
        if opts.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
