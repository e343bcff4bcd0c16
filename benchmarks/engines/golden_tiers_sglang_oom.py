"""Where SGLang's HiCache gives up: the request at which its allocation raises out of memory.

Under `write_back`, with a host smaller than the device pool and a storage tier below it,
SGLang 0.5.23 can find too few free pages for a prefill after evicting every GPU leaf it may
(a leaf the host cannot back up goes only with its host-only subtree, and a node waiting for
its storage write is held), and raises "Prefill out of memory" ("Out of memory" at one token a
page): the scheduler stops there. `fuzz_tiers_sglang.py --storage` found such configurations;
this script keeps three of them, each trace cut after the request SGLang stops at (what comes
later cannot change where it stops), runs SGLang on the cut trace as
`golden_tiers_sglang_storage.py` does, and writes the request it raised at and its message to
`tests/fixtures/tiers_sglang/sglang_out_of_memory.json`, the cut traces beside it
(`trace_oom_<seed>.parquet`). `tests/prefix/test_sglang_tree.py` holds the replay to stop at
the same request. From the repository root, with SGLang's environment:

    PYTHONPATH=. /tmp/venv-sglang/bin/python benchmarks/engines/golden_tiers_sglang_oom.py

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import sys
import tempfile
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "tests" / "fixtures" / "tiers_sglang"
sys.path.insert(0, str(HERE))
from fuzz_tiers_sglang import _storage_trace  # noqa: E402
from golden_json import write_fixture  # noqa: E402
from golden_tiers_sglang import Config, _stub_engine  # noqa: E402
from golden_tiers_sglang_storage import PROTOCOL, HiCacheStorage, StorageConfig  # noqa: E402

# (fuzz seed, page tokens, device pool tokens, host ratio, storage pages): configurations
# `fuzz_tiers_sglang.py --storage` drew, where SGLang gave up.
CASES = ((5012, 32, 512, 0.5, 851), (5008, 1, 778, 0.5, 411), (5023, 16, 928, 0.5, 3127))


def stop_row(config: StorageConfig, tenants: list[str], prompts: list[list[int]]
             ) -> tuple[int, str, int]:
    """(the request SGLang raised at, the first line of what it raised, its host tokens)."""
    engine = HiCacheStorage(config, Path(tempfile.mkdtemp(prefix="hicache-file-")))
    page, pool = config.base.page_size, config.base.pool_tokens
    try:
        for row, (tenant, prompt) in enumerate(zip(tenants, prompts, strict=True)):
            if -(-len(prompt) // page) > pool // page:
                continue  # refused, as `HiCache.run` refuses it
            try:
                engine.serve(row, tenant, array("q", prompt), len(prompt))
            except RuntimeError as error:
                return row, str(error).splitlines()[0], engine.host_tokens
    finally:
        engine.close()
    raise SystemExit(f"SGLang ran every request of {config}: not a case for this file")


def main() -> int:
    """Find each case's stop, cut its trace there, check SGLang stops there again, write."""
    _stub_engine()
    import logging

    import pandas as pd
    import sglang
    import torch

    logging.disable(logging.WARNING)
    configs = []
    for seed, page, pool, ratio, pages in CASES:
        config = StorageConfig(Config(page, pool, ratio, "write_back"), pages)
        with tempfile.TemporaryDirectory() as folder:
            _, tenants, prompts = _storage_trace(seed, Path(folder) / "trace.parquet")
            table = pd.read_parquet(Path(folder) / "trace.parquet")
        row, message, host = stop_row(config, tenants, prompts)
        cut = table.iloc[:row + 1]
        path = OUT / f"trace_oom_{seed}.parquet"
        cut.to_parquet(path, index=False, compression="zstd")
        again = stop_row(config, cut["tenant"].tolist(),
                         [list(map(int, p)) for p in cut["prompt_tokens"]])
        assert again[0] == row, (seed, again, row)
        print(f"seed {seed}: page {page}, pool {pool}, host {host}, store {pages} pages: "
              f"SGLang stops at request {row} ({message})", flush=True)
        configs.append({"trace": str(path.relative_to(ROOT / "tests" / "fixtures")),
                        "page_size": page, "pool_tokens": pool, "hicache_ratio": ratio,
                        "host_tokens": host, "storage_pages": pages,
                        "write_policy": "write_back", "stopped_at": row, "raised": message})
    write_fixture(OUT / "sglang_out_of_memory.json", engine="sglang",
                  engine_version=sglang.__version__, torch_version=torch.__version__,
                  trace="per config", protocol=PROTOCOL + " Each request is served until SGLang "
                  "raises; stopped_at is that request (in file order), raised its message.",
                  configs=configs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
