"""Golden per-request device, host and storage hits from SGLang's HiCache with its storage tier.

`golden_tiers_sglang.py`'s SGLang 0.5.23 `UnifiedRadixCache` (pure-Python tree core, CPU
pools, the real `HybridCacheController` and host pool) with an L3 backend attached as
`--hicache-storage-backend file` attaches it: SGLang's `HiCacheFile`
(`mem_cache/hicache_storage.py`) in a temporary directory, bounded by its own `LRUFileEvictor`
(`storage/file/lru_file_evictor.py`: `max_size` of `storage_pages` pages, `eviction_ratio` 1
so a write evicts only what it needs; reads and rewrites refresh a page). Of the backends that
need no hardware it is the one that evicts, and what it does depends only on the order of
its calls (`sim` keeps every key and sleeps per I/O; `shm` is a stub that stores nothing).

SGLang's own code decides what is written and what is fetched: the scheduler's
`_prefetch_kvcache` rule (prefetch when the deepest matched node is backed up on the host, or
is the root) calls `prefetch_from_storage`; SGLang's storage threads (`prefetch_thread_func`,
`prefetch_io_aux_func`, `prefetch_sync_thread_func`, `backup_thread_func`) run; the scheduler
thread's `check_hicache_events` drains their queues (host room for a hit,
`_handle_prefetch_result`, storage acks); every host-backup acknowledgement calls
`write_backup_storage`. Mocked, besides what the device-and-host driver mocks (the byte copies
between device and host, the CUDA registration of the host buffer): the parallel topology
(one rank, `get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1)`, as SGLang's
own unit kit does), the host pool's `pin_memory` (the page `HiCacheFile` reads into is
allocated pinned, which needs CUDA), and time: threads are waited for, never raced. Each
request's prefetch lands before `check_prefetch_progress` is asked (under the default
`timeout` policy SGLang waits for it unless it takes longer than 1 s + 0.25 s per 1k tokens,
which a local store never does), and each request's storage writes land before the next
request arrives. The same bytes come out on every run.

Per request, one at a time in file order (`PROTOCOL`), `gpu_hit_tokens`, `cpu_hit_tokens` and
`storage_hit_tokens` are SGLang's own split of the cached prefix
(`schedule_batch.split_cached_prefix_by_tier`, what `sglang:cached_tokens_total{cache_source=
"device"|"host"|"storage"}` counts). From the repository root, with SGLang's environment:

    PYTHONPATH=. /tmp/venv-sglang/bin/python benchmarks/engines/golden_tiers_sglang_storage.py

writes `tests/fixtures/tiers_sglang/sglang_storage_<trace>.json` and prints a table beside the
tiered replay of `yaotu_trace.prefix.tiers` (`--tier cpu --tier disk`) when it imports. The
traces are read through `--reader`, a Python with pandas (default the checkout's
`.venv/bin/python`). A configuration SGLang itself cannot run is printed and left out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "tests" / "fixtures" / "tiers_sglang"
sys.path.insert(0, str(HERE))
from golden_json import write_fixture  # noqa: E402
from golden_tiers_sglang import (  # noqa: E402
    Config,
    HiCache,
    _stub_engine,
    read_prompts,
)

PROTOCOL = (
    "golden_tiers_sglang.py's protocol with SGLang's HiCacheFile storage backend attached "
    "(--hicache-storage-backend file, LRUFileEvictor max_size = storage_pages pages, "
    "eviction_ratio 1, prefetch_threshold 256, prefetch policy timeout, cache host mode): per "
    "request, match_prefix (limit n-1); when the matched node is backed up on the host or is "
    "the root, prefetch_from_storage of the page-aligned tokens past device and host; "
    "check_hicache_events pumped until the prefetch has landed or been revoked (SGLang's "
    "storage threads running, waited for); check_prefetch_progress, pop_prefetch_loaded_span; "
    "match_prefix again, the host hit (now holding what storage sent) loaded back, the rest "
    "allocated, the prompt inserted; every host backup and its storage write "
    "(write_backup_storage on the backup ack) completes before the next request. "
    "gpu/cpu/storage_hit_tokens = split_cached_prefix_by_tier(prefix after load-back, host "
    "tokens loaded, storage span loaded).")


@dataclass(frozen=True)
class StorageConfig:
    """One engine run with storage: the device-and-host run and the store's size in pages."""

    base: Config
    storage_pages: int


def _page_bytes(cache: Any) -> int:
    """Bytes of one page as HiCacheFile stores it (`get_data_page(flat=True)`)."""
    page = cache.cache_controller.storage_host_pool.get_data_page(0, flat=True)
    return int(page.numel() * page.element_size())


class HiCacheStorage(HiCache):
    """SGLang's HiCache with `HiCacheFile` under the host, for one configuration."""

    def __init__(self, config: StorageConfig, directory: Path) -> None:
        from sglang.srt.environ import envs
        from sglang.srt.runtime_context import get_parallel

        self._scopes = [get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1),
                        envs.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR.override(str(directory))]
        for scope in self._scopes:
            scope.__enter__()
        self.storage_pages = config.storage_pages
        self.directory = directory
        super().__init__(config.base)
        cache = self.cache
        controller = cache.cache_controller
        assert cache.enable_storage and controller.storage_backend is not None
        assert type(controller.storage_backend).__name__ == "HiCacheFile"
        # The page HiCacheFile reads into is allocated pinned, which needs CUDA.
        controller.storage_host_pool.pin_memory = False
        evictor = controller.storage_backend._evictor
        assert evictor.enabled and evictor.max_size_bytes == self.storage_pages * _page_bytes(cache)
        assert cache.prefetch_threshold == 256 and cache.prefetch_stop_policy == "timeout"

    def _server_args(self, config: Config) -> dict[str, Any]:
        # One page of the CPU pools is 2 (K, V) x 1 layer x 1 head x 8 dims x 2 bytes a token.
        extra = {"max_size": self.storage_pages * 32 * config.page_size, "eviction_ratio": 1.0}
        return {"hicache_storage_backend": "file",
                "hicache_storage_backend_extra_config": json.dumps(extra)}

    def close(self) -> None:
        """Stop SGLang's storage threads and leave the process as it was."""
        self.cache.cache_controller._stop_storage_threads()
        for scope in reversed(self._scopes):
            scope.__exit__(None, None, None)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _pump(self, done: Any, what: str) -> None:
        """`check_hicache_events`, as the scheduler's loop calls it, until `done()`: the storage
        threads finish what was handed to them, however long the machine takes."""
        deadline = time.monotonic() + 120.0
        while True:
            self.cache.check_hicache_events()
            if done():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"SGLang's storage threads did not finish {what}")
            time.sleep(0.001)

    def _storage_idle(self) -> bool:
        cache = self.cache
        return not cache.ongoing_backup and not cache.ongoing_write_through

    def arrive(self, row: int, tenant: str, tokens: Any, n: int) -> Any:
        """The scheduler's `_prefetch_kvcache` for a request alone: match, then prefetch what
        lies past device and host when the matched node is backed up (or is the root)."""
        from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle, MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        cache = self.cache
        handle = CacheRequestHandle(str(row), 0)
        match = cache.match_prefix(MatchPrefixParams(
            key=RadixKey(tokens, cache_salt=tenant, limit=n - 1)))
        matched = int(match.device_prefix_len) + int(match.host_hit_length)
        anchor = match.last_host_node
        if cache.is_backuped(anchor) or cache.is_root(anchor):
            cache.prefetch_from_storage(
                handle, anchor, tokens[matched:n - 1], cache.get_last_hash_value(anchor), None,
                matched_prefix_tokens=tokens[:matched], extra_key=None, cache_salt=tenant)
        self._pump(lambda: handle not in cache.ongoing_prefetch, f"request {row}'s prefetch")
        assert cache.check_prefetch_progress(handle)
        return handle

    HITS = ("device", "host", "storage")

    def serve(self, row: int, tenant: str, tokens: Any, n: int) -> tuple[int, ...]:
        """One request alone (`HITS`): it arrives (its prefetch from storage done), then its
        match, load-back and admission as without storage; SGLang splits the cached prefix
        by tier."""
        from sglang.srt.managers.schedule_batch import split_cached_prefix_by_tier
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        cache = self.cache
        handle = self.arrive(row, tenant, tokens, n)
        fetched, fetched_start = cache.pop_prefetch_loaded_span(handle)
        match = cache.match_prefix(MatchPrefixParams(
            key=RadixKey(tokens, cache_salt=tenant, limit=n - 1)))
        device = int(match.device_prefix_len)
        loaded, node = self.load_back(row, match)
        hit = device + loaded
        split = split_cached_prefix_by_tier(
            prefix_len=hit, host_hit_len=min(int(match.host_hit_length), loaded),
            storage_hit_len=int(fetched), storage_hit_start=fetched_start)
        self.admit(row, tenant, tokens, hit, node)
        return int(split[0]), int(split[1]), int(split[2])

    def writes_landed(self, row: int) -> None:
        """The request's storage writes, issued at each backup's acknowledgement, landed."""
        self._pump(self._storage_idle, f"request {row}'s storage writes")


def ours(path: Path, config: StorageConfig, host_tokens: int):  # type: ignore[no-untyped-def]
    """(gpu, cpu, disk hits) per request from yaotu_trace's tiered replay with a disk tier of
    `storage_pages`, or None where it does not import (SGLang's environment has no numba)."""
    try:
        import numba  # noqa: F401

        from yaotu_trace.ingest import read_trace
        from yaotu_trace.prefix.prepare import prepare
        from yaotu_trace.prefix.rules import rules_for
        from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, replay_tiers
    except ImportError:
        return None
    base = config.base
    page = base.page_size
    rules = rules_for("sglang", block_size_tokens=page, capacity_blocks=base.pool_tokens // page)
    chains = prepare(read_trace(path)).chains(rules)
    tiers = (TierSpec(name=TierName.CPU, capacity_chunks=host_tokens // page, chunk_tokens=page),
             TierSpec(name=TierName.DISK, capacity_chunks=config.storage_pages,
                      chunk_tokens=page))
    result = replay_tiers(chains, rules, tiers, TierPolicy(base.write_policy))
    return result.gpu_hit_tokens, result.tier_hit_tokens[0], result.tier_hit_tokens[1]


def configs_for(prompts: list[list[int]], page: int, ratios: tuple[float, ...],
                stores: tuple[int, ...]) -> list[StorageConfig]:
    """Device pools of one page above the longest prompt and twice it, hosts of `ratios` times
    the pool (small, so pages fall out of the host into storage), stores of `stores` pages
    (from a few prefetches' worth, where the store evicts, to more than the trace writes),
    under the three write policies."""
    longest = -(-max(len(p) for p in prompts) // page) * page
    return [StorageConfig(Config(page, pool, ratio, policy), pages)
            for policy in ("write_through", "write_through_selective", "write_back")
            for pool in (longest + page, 2 * longest) for ratio in ratios for pages in stores]


TRACES = {  # name -> (file, [(page size, host ratios, store sizes in pages), ...])
    "mixed": (ROOT / "tests/fixtures/engines/trace_mixed.parquet",
              [(16, (1.0, 2.0), (64, 256, 8192)),
               # SGLang's default page of one token (a store of 600 holds two prompts or so)
               (1, (2.0,), (600, 20000))]),
    "sessions": (ROOT / "tests/fixtures/engines/trace_sessions.parquet",
                 [(16, (1.0, 2.0), (64, 256, 8192))]),
    # Mooncake's conversations as token ids: long shared prefixes, hosts of half and once the
    # pool, where most of what returns has left the host.
    "mooncake": (ROOT / "tests/fixtures/tiers_vllm/trace_mooncake.parquet",
                 [(16, (0.5, 1.0), (256, 1024, 65536))]),
}


def main(argv: list[str] | None = None) -> int:
    """Drive HiCache with its file store on every trace and configuration, write the
    fixtures, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--reader", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args(argv)
    _stub_engine()
    import logging

    import sglang
    import torch

    logging.disable(logging.WARNING)
    header = (f"{'trace':<9} {'policy':<24} {'P':>3} {'pool':>6} {'host':>6} {'store':>6} "
              f"{'gpu':>7} {'cpu':>7} {'storage':>7} {'ours':>7} {'differ':>6}")
    print(header)
    print("-" * len(header))
    for name, (path, runs) in TRACES.items():
        if args.only and name not in args.only:
            continue
        tenants, prompts = read_prompts(path, args.reader)
        configs = []
        for page, ratios, stores in runs:
            for config in configs_for(prompts, page, ratios, stores):
                engine = HiCacheStorage(config, Path(tempfile.mkdtemp(prefix="hicache-file-")))
                try:
                    gpu, cpu, stored, refused = engine.run(tenants, prompts)
                except RuntimeError as error:  # SGLang's own allocation gave up
                    base = config.base
                    print(f"{name:<9} {base.write_policy:<24} {page:>3} {base.pool_tokens:>6} "
                          f"{engine.host_tokens:>6} {config.storage_pages:>6} SGLang raised: "
                          f"{str(error).splitlines()[0]}", flush=True)
                    continue
                finally:
                    engine.close()
                mine = ours(path, config, engine.host_tokens)
                theirs = "-"
                differ = "-"
                if mine is not None:
                    theirs = str(int(mine[2].sum()))
                    differ = str(sum(1 for i in range(len(gpu)) if (gpu[i], cpu[i], stored[i])
                                     != (mine[0][i], mine[1][i], mine[2][i])))
                base = config.base
                print(f"{name:<9} {base.write_policy:<24} {page:>3} {base.pool_tokens:>6} "
                      f"{engine.host_tokens:>6} {config.storage_pages:>6} {sum(gpu):>7} "
                      f"{sum(cpu):>7} {sum(stored):>7} {theirs:>7} {differ:>6}", flush=True)
                configs.append({"page_size": page, "pool_tokens": base.pool_tokens,
                                "hicache_ratio": base.hicache_ratio,
                                "host_tokens": engine.host_tokens,
                                "storage_pages": config.storage_pages,
                                "write_policy": base.write_policy,
                                "gpu_hit_tokens": gpu, "cpu_hit_tokens": cpu,
                                "storage_hit_tokens": stored, "refused": refused})
        write_fixture(args.out_dir / f"sglang_storage_{name}.json", engine="sglang",
                      engine_version=sglang.__version__, torch_version=torch.__version__,
                      trace=str(path.relative_to(ROOT / "tests" / "fixtures")),
                      protocol=PROTOCOL, configs=configs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
