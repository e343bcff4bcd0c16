"""Golden per-request LMCache hits from LMCache's own engine, driven as vLLM's adapter drives it.

Builds LMCache 0.5.6's `LMCacheEngine` on CPU (`LMCacheEngineBuilder.get_or_create` with the
mock GPU connector, `CreateGPUConnector(config, metadata, EngineType.MOCK)`, then
`post_init()`): a `LocalCPUBackend` (LRU) of `cpu_chunks` chunks of `chunk_tokens` tokens and,
in some configurations, a `LocalDiskBackend` of `disk_chunks` chunks below it (one I/O thread,
so its writes land in order) or a `RemoteBackend` of `remote_chunks` chunks (LMCache's mock
remote store, `mock://1/`: an LRU of 1 GiB, so a chunk is made 1 GiB / `remote_chunks` bytes
large through the model's shape; no latency); partial chunks not saved, synchronous loading.
Then, per request
in file order, the calls vLLM's LMCache adapter makes for one request running alone
(lmcache 0.5.6, `integration/vllm/vllm_v1_adapter.py`), behind a GPU pool that hits nothing:

1. `lookup(tokens, lookup_id, pin=True)` over the whole prompt, as the scheduler's lookup
   client does (`get_num_new_matched_tokens`): H, the hit tokens from token 0, and (from the
   engine's pins) how many of its chunks the disk backend holds;
2. `retrieve` of those H tokens when there is anything to load (`start_load_kv`): a chunk read
   from disk is refreshed there and written into the CPU backend;
3. `lookup_unpin(lookup_id)` (the worker unpins before it saves, `wait_for_save`);
4. `store(tokens[:full chunks], mask)` with the first H tokens masked off: the adapter's save
   starts at `num_saved_tokens`, which is the LMCache hit (`RequestTracker.from_new_request`),
   and covers whole chunks only (`discard_partial_chunks`); skipped when no whole chunk lies
   beyond H (`ReqMeta.from_request_tracker`). Every disk and remote write lands before the
   next request.

With the CPU backend alone, the load reads without touching its LRU order
(`LocalCPUBackend.get_blocking`), so H does not depend on the GPU pool in front and the tests
put it behind any GPU pool with the adapter's own arithmetic (load H − GPU hit, one token less
when H is the whole prompt). With a disk or a remote store, what the load reads depends on the
GPU hit, so those configurations hold the no-GPU-hit case. Each chunk of the tiny model takes
one 4 KiB page
(LMCache's CPU allocator rounds up to it, and the disk counts a chunk's page), so
`N · 4096 / 2^30` GiB holds N chunks.

Writes `tests/fixtures/tiers_lmcache/lmcache_<trace>.json` for the two engine traces, the two
traces of 4- and 8-token blocks (`traces.TIER_SHAPES`) and the Mooncake slice of
`tests/fixtures/tiers_vllm/` (`--only NAME ...` for some of them). Installs nothing: run it with
LMCache 0.5.6 and pyarrow importable (its own environment), from outside the repository:

    cd / && LMCACHE_LOG_LEVEL=ERROR PYTHONHASHSEED=0 /path/to/venv-lmcache/bin/python \
        /work/…/benchmarks/engines/golden_tiers_lmcache.py [--only blocks4 blocks8]

The same bytes on every run on a quiet machine. The disk's writes run on LMCache's I/O thread
and land while the rest of their save is still being submitted, so where a save both writes
new chunks and refreshes ones the disk holds, the disk's order can depend on that thread's
timing (docs/tiers.md, "LMCache: what the `lmcache` policy assumes").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_json import dump_configs

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
OUT = FIXTURES / "tiers_lmcache"
PAGE_BYTES = 4096  # the smallest allocation of LMCache's CPU allocator: one chunk here
PROTOCOL = ("LMCache 0.5.6 LMCacheEngine (mock GPU connector, a LocalCPUBackend and, where "
            "disk_chunks is set, a LocalDiskBackend with one I/O thread; lru; save_unfull_chunk "
            "false; synchronous loading); per request in file order as vLLM's adapter calls it "
            "for a request running alone behind a GPU pool that hits nothing: lookup(prompt, "
            "pin=True) -> hit_tokens (disk_hit_chunks: those of the disk backend), retrieve of "
            "the hit when there is one to load, lookup_unpin, store(whole chunks, first "
            "hit_tokens masked), every disk write landed; where remote_chunks is set, a "
            "RemoteBackend on LMCache's mock store (mock://1/, no latency; a chunk 1 GiB / "
            "remote_chunks bytes) instead of the disk, every remote write landed "
            "(remote_hit_chunks: the hit's chunks the remote store held); no tenant salt "
            "(LMCache's keys are the token chunks' chained hashes)")
# Per trace, (chunk tokens, CPU sizes in chunks) from a few chunks, where a save is cut short,
# to more than the trace holds; then (chunk tokens, CPU chunks, disk sizes in chunks) with a
# local disk below a CPU backend that holds the longest prompt (a smaller one can leave a load
# waiting for room forever: the lookup pins the chunks it found); then the same with a remote
# store below the CPU instead, its sizes powers of two (a chunk is 1 GiB / remote_chunks bytes).
Sizes = tuple[tuple[int, int, tuple[int, ...]], ...]
TRACES: dict[str, tuple[str, tuple[tuple[int, tuple[int, ...]], ...], Sizes, Sizes]] = {
    "mixed": ("engines/trace_mixed.parquet",
              ((16, (3, 8, 32, 128, 512)), (32, (2, 8, 32, 128)), (64, (2, 4, 16, 64))),
              ((16, 48, (96, 192, 768)), (64, 12, (24, 48, 192))),
              ((16, 48, (64, 128, 256, 1024)), (64, 12, (16, 32, 128)))),
    "sessions": ("engines/trace_sessions.parquet",
                 ((16, (3, 8, 32, 128, 512)), (32, (2, 8, 32, 128)), (64, (2, 4, 16, 64))),
                 ((16, 64, (128, 256, 1024)), (64, 16, (32, 64, 256))),
                 ((16, 64, (128, 256, 1024)), (64, 16, (32, 64, 256)))),
    "mooncake": ("tiers_vllm/trace_mooncake.parquet",
                 ((16, (64, 256, 1024, 4096)), (64, (16, 64, 256, 1024)),
                  (256, (4, 16, 64, 256))),
                 ((64, 64, (128, 512, 2048)), (256, 16, (32, 128, 512))),
                 ((64, 64, (128, 512, 2048)), (256, 16, (32, 128, 512)))),
    # The tier shapes' traces (`traces.TIER_SHAPES`): short prompts sharing prefixes often.
    "blocks4": ("engines/trace_blocks4.parquet",
                ((16, (2, 5, 20, 80)), (32, (2, 6, 30))),
                ((16, 12, (16, 40, 200)),),
                ((16, 12, (16, 64, 256)),)),
    "blocks8": ("engines/trace_blocks8.parquet",
                ((16, (3, 30, 120)), (64, (2, 8, 40))),
                ((16, 30, (40, 100, 400)),),
                ((16, 30, (64, 128, 512)),)),
}
# The mock remote store's size, in whole GiB (`connector/mock_adapter.py` takes an integer).
REMOTE_GIB = 1


class Engine:
    """One LMCacheEngine on CPU (and a local disk) and the adapter's calls for one request."""

    def __init__(self, name: str, chunk_tokens: int, cpu_chunks: int,
                 disk_chunks: int | None, folder: Path, remote_chunks: int | None = None
                 ) -> None:
        import torch
        from lmcache.utils import EngineType
        from lmcache.v1.cache_engine import LMCacheEngineBuilder
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.gpu_connector import CreateGPUConnector
        from lmcache.v1.metadata import LMCacheMetadata

        self.torch = torch
        self.chunk = chunk_tokens
        disk = {} if disk_chunks is None else {
            "local_disk": f"file://{folder}/", "max_local_disk_size": disk_chunks * PAGE_BYTES
            / 2**30, "extra_config": {"disk_io_threads": 1}}  # writes land in order
        chunk_bytes, width = PAGE_BYTES, 1
        if remote_chunks is not None:  # the store holds REMOTE_GIB: size the chunk to it
            chunk_bytes = REMOTE_GIB * 2**30 // remote_chunks
            width = chunk_bytes // (2 * chunk_tokens * 4)  # K and V, float32
            assert 2 * chunk_tokens * width * 4 == chunk_bytes, (chunk_tokens, remote_chunks)
            disk = {"remote_url": f"mock://{REMOTE_GIB}/?peeking_latency=0&read_throughput="
                    "1000000&write_throughput=1000000", "remote_serde": "naive"}
        config = LMCacheEngineConfig.from_defaults(
            chunk_size=chunk_tokens, local_cpu=True,
            max_local_cpu_size=cpu_chunks * chunk_bytes / 2**30, save_unfull_chunk=False,
            enable_async_loading=False, use_layerwise=False, **disk)
        metadata = LMCacheMetadata(model_name="golden", world_size=1, local_world_size=1,
                                   worker_id=0, local_worker_id=0, kv_dtype=torch.float32,
                                   kv_shape=(1, 2, chunk_tokens, width, 1))
        connector = CreateGPUConnector(config, metadata, EngineType.MOCK)
        self.engine = LMCacheEngineBuilder.get_or_create(
            name, config, metadata, connector, lambda tensor, rank: None,
            lambda obj, rank: obj)
        self.engine.post_init()
        backends = self.engine.storage_manager.storage_backends
        self.disk = backends.get("LocalDiskBackend")
        self.remote = backends.get("RemoteBackend")
        self.kv = [torch.zeros(2, 1, 1, 1)]

    def request(self, rid: str, prompt: list[int], gpu_hit_tokens: int = 0) -> tuple[int, int]:
        """(hit tokens LMCache's lookup finds, of them the chunks found on disk or in the
        remote store); the load of the hit and the request's save follow, every disk and
        remote write landed before the next. `gpu_hit_tokens` is vLLM's own prefix hit in
        front (0: a GPU pool that hits nothing): the adapter loads only past it, masking the
        whole chunks it covers (`vllm_v1_adapter.py`, `start_load_kv`)."""
        torch = self.torch
        tokens = torch.tensor(prompt, dtype=torch.long)
        hit = int(self.engine.lookup(tokens=tokens, lookup_id=rid, pin=True))
        pins = self.engine.lookup_pins.get(rid, {})
        below = len(pins.get("LocalDiskBackend", ())) + len(pins.get("RemoteBackend", ()))
        if hit - (hit == len(prompt)) > gpu_hit_tokens:  # need to load past the GPU hit
            mask = torch.ones(hit, dtype=torch.bool)
            mask[:gpu_hit_tokens // self.chunk * self.chunk] = False
            self.engine.retrieve(tokens[:hit], mask, kvcaches=self.kv,
                                 slot_mapping=torch.arange(hit), req_id=rid)
        self.engine.lookup_unpin(rid)
        whole = len(prompt) // self.chunk * self.chunk
        if whole > hit:
            mask = torch.ones(whole, dtype=torch.bool)
            mask[:hit] = False
            self.engine.store(tokens[:whole], mask=mask, kvcaches=self.kv,
                              slot_mapping=torch.arange(whole), offset=hit)
        while ((self.disk is not None and self.disk.disk_worker.put_tasks)
               or (self.remote is not None and self.remote.put_tasks)):
            time.sleep(0.0005)
        return hit, below

    def close(self, name: str) -> None:
        from lmcache.v1.cache_engine import LMCacheEngineBuilder

        LMCacheEngineBuilder.destroy(name)


def golden(trace: str) -> dict:
    """Every configuration's hit tokens per request on one trace."""
    import lmcache
    import pyarrow.parquet as pq

    path, sizes_by_chunk, with_disk, with_remote = TRACES[trace]
    table = pq.read_table(FIXTURES / path, columns=["request_id", "prompt_tokens"])
    ids = [str(r) for r in table.column("request_id").to_pylist()]
    prompts = [list(map(int, p)) for p in table.column("prompt_tokens").to_pylist()]
    runs = [(chunk, cpu, None, None) for chunk, sizes in sizes_by_chunk for cpu in sizes]
    runs += [(chunk, cpu, disk, None) for chunk, cpu, disks in with_disk for disk in disks]
    runs += [(chunk, cpu, None, remote) for chunk, cpu, remotes in with_remote
             for remote in remotes]
    configs = []
    for chunk, cpu_chunks, disk_chunks, remote_chunks in runs:
        name = f"{trace}-{chunk}-{cpu_chunks}-{disk_chunks}-{remote_chunks}"
        with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as folder:
            engine = Engine(name, chunk, cpu_chunks, disk_chunks, Path(folder), remote_chunks)
            found = [engine.request(rid, prompt) for rid, prompt in zip(ids, prompts,
                                                                        strict=True)]
            if remote_chunks is None:  # LMCache's remote loop does not stop on destroy
                engine.close(name)
        hits = [h for h, _ in found]
        config = {"chunk_tokens": chunk, "cpu_chunks": cpu_chunks, "disk_chunks": disk_chunks,
                  "total_hit_tokens": sum(hits), "hit_tokens": hits}
        if disk_chunks is not None:
            config["disk_hit_chunks"] = [d for _, d in found]
        if remote_chunks is not None:
            config["remote_chunks"] = remote_chunks
            config["remote_hit_chunks"] = [d for _, d in found]
        configs.append(config)
        print(f"{trace:<9} chunk {chunk:>3} cpu {cpu_chunks:>5} disk {disk_chunks or 0:>5} "
              f"remote {remote_chunks or 0:>5} chunks: {sum(hits):>8,} hit tokens",
              file=sys.stderr)
    return {"producer": f"lmcache {lmcache.__version__}", "protocol": PROTOCOL,
            "trace": f"tests/fixtures/{path}", "configs": configs}


def main(argv: list[str] | None = None) -> int:
    """Drive LMCache on every trace (or those named by `--only`) and write the fixtures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")  # no usage reports from a fixture run
    OUT.mkdir(parents=True, exist_ok=True)
    for trace in TRACES:
        if args.only and trace not in args.only:
            continue
        dump_configs(golden(trace), OUT / f"lmcache_{trace}.json")
    sys.stdout.flush()
    os._exit(0)  # the remote backends' event loops keep the interpreter from exiting


if __name__ == "__main__":
    raise SystemExit(main())
