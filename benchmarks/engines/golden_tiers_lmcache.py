"""Golden per-request LMCache hits from LMCache's own engine, driven as vLLM's adapter drives it.

Builds LMCache 0.5.6's `LMCacheEngine` on CPU (`LMCacheEngineBuilder.get_or_create` with the
mock GPU connector, `CreateGPUConnector(config, metadata, EngineType.MOCK)`, then
`post_init()`): one `LocalCPUBackend` (LRU) of `cpu_chunks` chunks of `chunk_tokens` tokens,
partial chunks not saved, synchronous loading. Then, per request in file order, the calls
vLLM's LMCache adapter makes for one request running alone (lmcache 0.5.6,
`integration/vllm/vllm_v1_adapter.py`):

1. `lookup(tokens, lookup_id, pin=True)` over the whole prompt, as the scheduler's lookup
   client does (`get_num_new_matched_tokens`): H, the hit tokens from token 0;
2. `lookup_unpin(lookup_id)` (the worker unpins before it saves, `wait_for_save`);
3. `store(tokens[:full chunks], mask)` with the first H tokens masked off: the adapter's save
   starts at `num_saved_tokens`, which is the LMCache hit (`RequestTracker.from_new_request`),
   and covers whole chunks only (`discard_partial_chunks`); skipped when no whole chunk lies
   beyond H (`ReqMeta.from_request_tracker`).

The load between 1 and 3 (`retrieve` of the chunks beyond vLLM's own GPU hit) reads the CPU
backend without touching its LRU order (`LocalCPUBackend.get_blocking`), so H per request does
not depend on the GPU pool in front: the fixture holds H, and the tests put it behind any GPU
pool with the adapter's own arithmetic (load H − GPU hit, one token less when H is the whole
prompt). Each chunk of the tiny model takes one 4 KiB page of `max_local_cpu_size` (LMCache's
allocator rounds up to it), so `cpu_chunks · 4096 / 2^30` GiB holds `cpu_chunks` chunks.

Writes `tests/fixtures/tiers_lmcache/lmcache_<trace>.json` for the two engine traces and the
Mooncake slice of `tests/fixtures/tiers_vllm/`. Installs nothing: run it with
LMCache 0.5.6 and pyarrow importable (its own environment), from outside the repository:

    cd / && LMCACHE_LOG_LEVEL=ERROR /path/to/venv-lmcache/bin/python \\
        /work/…/benchmarks/engines/golden_tiers_lmcache.py

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_json import dump_configs

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
OUT = FIXTURES / "tiers_lmcache"
PAGE_BYTES = 4096  # the smallest allocation of LMCache's CPU allocator: one chunk here
PROTOCOL = ("LMCache 0.5.6 LMCacheEngine (mock GPU connector, one LocalCPUBackend, lru, "
            "save_unfull_chunk false, synchronous loading); per request in file order as "
            "vLLM's adapter calls it for a request running alone: lookup(prompt, pin=True) -> "
            "hit_tokens, lookup_unpin, store(whole chunks, first hit_tokens masked); no tenant "
            "salt (LMCache's keys are the token chunks' chained hashes)")
# Per trace, (chunk tokens, CPU sizes in chunks): from a few chunks, where a save is cut
# short, to more than the trace holds.
TRACES: dict[str, tuple[str, tuple[tuple[int, tuple[int, ...]], ...]]] = {
    "mixed": ("engines/trace_mixed.parquet",
              ((16, (3, 8, 32, 128, 512)), (32, (2, 8, 32, 128)), (64, (2, 4, 16, 64)))),
    "sessions": ("engines/trace_sessions.parquet",
                 ((16, (3, 8, 32, 128, 512)), (32, (2, 8, 32, 128)), (64, (2, 4, 16, 64)))),
    "mooncake": ("tiers_vllm/trace_mooncake.parquet",
                 ((16, (64, 256, 1024, 4096)), (64, (16, 64, 256, 1024)),
                  (256, (4, 16, 64, 256)))),
}


class Engine:
    """One LMCacheEngine on CPU and the adapter's calls for one request."""

    def __init__(self, name: str, chunk_tokens: int, cpu_chunks: int) -> None:
        import torch
        from lmcache.utils import EngineType
        from lmcache.v1.cache_engine import LMCacheEngineBuilder
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.gpu_connector import CreateGPUConnector
        from lmcache.v1.metadata import LMCacheMetadata

        self.torch = torch
        self.chunk = chunk_tokens
        config = LMCacheEngineConfig.from_defaults(
            chunk_size=chunk_tokens, local_cpu=True,
            max_local_cpu_size=cpu_chunks * PAGE_BYTES / 2**30, save_unfull_chunk=False,
            enable_async_loading=False, use_layerwise=False)
        metadata = LMCacheMetadata(model_name="golden", world_size=1, local_world_size=1,
                                   worker_id=0, local_worker_id=0, kv_dtype=torch.float32,
                                   kv_shape=(1, 2, chunk_tokens, 1, 1))
        connector = CreateGPUConnector(config, metadata, EngineType.MOCK)
        self.engine = LMCacheEngineBuilder.get_or_create(
            name, config, metadata, connector, lambda tensor, rank: None,
            lambda obj, rank: obj)
        self.engine.post_init()
        self.kv = [torch.zeros(2, 1, 1, 1)]

    def request(self, rid: str, prompt: list[int]) -> int:
        """The hit tokens LMCache's lookup finds, after which the request's save runs."""
        torch = self.torch
        tokens = torch.tensor(prompt, dtype=torch.long)
        hit = int(self.engine.lookup(tokens=tokens, lookup_id=rid, pin=True))
        self.engine.lookup_unpin(rid)
        whole = len(prompt) // self.chunk * self.chunk
        if whole > hit:
            mask = torch.ones(whole, dtype=torch.bool)
            mask[:hit] = False
            self.engine.store(tokens[:whole], mask=mask, kvcaches=self.kv,
                              slot_mapping=torch.arange(whole), offset=hit)
        return hit

    def close(self, name: str) -> None:
        from lmcache.v1.cache_engine import LMCacheEngineBuilder

        LMCacheEngineBuilder.destroy(name)


def golden(trace: str) -> dict:
    """Every configuration's hit tokens per request on one trace."""
    import lmcache
    import pyarrow.parquet as pq

    path, sizes_by_chunk = TRACES[trace]
    table = pq.read_table(FIXTURES / path, columns=["request_id", "prompt_tokens"])
    ids = [str(r) for r in table.column("request_id").to_pylist()]
    prompts = [list(map(int, p)) for p in table.column("prompt_tokens").to_pylist()]
    configs = []
    for chunk, sizes in sizes_by_chunk:
        for cpu_chunks in sizes:
            name = f"{trace}-{chunk}-{cpu_chunks}"
            engine = Engine(name, chunk, cpu_chunks)
            hits = [engine.request(rid, prompt) for rid, prompt in zip(ids, prompts,
                                                                       strict=True)]
            engine.close(name)
            configs.append({"chunk_tokens": chunk, "cpu_chunks": cpu_chunks,
                            "total_hit_tokens": sum(hits), "hit_tokens": hits})
            print(f"{trace:<9} chunk {chunk:>3} cpu {cpu_chunks:>5} chunks: "
                  f"{sum(hits):>8,} hit tokens", file=sys.stderr)
    return {"producer": f"lmcache {lmcache.__version__}", "protocol": PROTOCOL,
            "trace": f"tests/fixtures/{path}", "configs": configs}


def main() -> int:
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")  # no usage reports from a fixture run
    OUT.mkdir(parents=True, exist_ok=True)
    for trace in TRACES:
        dump_configs(golden(trace), OUT / f"lmcache_{trace}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
