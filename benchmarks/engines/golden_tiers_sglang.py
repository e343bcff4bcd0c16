"""Golden per-request device and host hits from SGLang's HiCache (`UnifiedRadixCache`).

Builds SGLang 0.5.23's `UnifiedRadixCache` with its pure-Python tree core
(`SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python`), one full-attention component, a CPU token
pool and allocator of `pool_tokens` slots, and HiCache on (`init_hicache`: the real
`HybridCacheController` and host pool, `hicache_ratio`, `hicache_write_policy`), on CPU with no
model, the way SGLang's own unit kit (`sglang/test/kits/unified_radix_cache/`) builds it. What
is mocked, and why: the host pool's byte copies (`backup_from_device_all_layer_physical`,
`load_to_device_per_layer_physical`: CUDA kernels; the hits depend on which slots and nodes
hold KV, never on its bytes) and the CUDA host registration of the host buffer. Every index
allocation, eviction, backup, load-back and ack is SGLang's own; each transfer completes in
the step it was issued.

Per request, one at a time in file order (`PROTOCOL`), it records the device prefix
(`MatchResult.device_prefix_len`, what `sglang:cached_tokens_total{cache_source="device"}`
counts) and the host tokens loaded back (`init_load_back`, `cache_source="host"`).

Writes `tests/fixtures/tiers_sglang/sglang_hicache_<trace>.json` and prints a table beside
the tiered replay of `yaotu_trace.prefix.tiers` when it imports. Installs nothing: run it
with SGLang's environment (benchmarks/engines/README.md), from the repository root:

    PYTHONPATH=. /tmp/venv-sglang/bin/python benchmarks/engines/golden_tiers_sglang.py

The traces are read through `--reader` (a Python with pandas, default the project's
`.venv/bin/python`), since SGLang's environment has none. Deterministic: the tree core's
clock is a counter, so the same bytes come out on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "tests" / "fixtures" / "tiers_sglang"
sys.path.insert(0, str(HERE))
from golden_json import write_fixture  # noqa: E402

PROTOCOL = (
    "SGLang UnifiedRadixCache (python tree core, FULL component, lru) over a CPU token pool "
    "of pool_tokens slots, HiCache on with hicache_ratio and hicache_write_policy (host pool "
    "byte copies mocked, indices real); per request in file order, one at a time: a prompt "
    "of more pages than the pool is refused (all miss); match_prefix on RadixKey(prompt, "
    "cache_salt=tenant, limit=n-1) gives device_prefix_len and host_hit_length; a host hit "
    "goes through init_load_back (load_back_threshold 10) and its load completes "
    "(ready_to_load_host_cache, loading_check); the rest is allocated with the scheduler's "
    "allocation helpers (evicting; write_back backs a victim up first); the page-aligned "
    "prompt is inserted with prev_prefix_len = the hit (write-through backups fire there) "
    "and every backup completes (flush_pending_backups, writing_check); output tokens are "
    "not generated or inserted. gpu_hit_tokens = device_prefix_len, cpu_hit_tokens = the "
    "host tokens loaded back.")


@dataclass(frozen=True)
class Config:
    """One engine run: page size, device pool, host ratio and write policy."""

    page_size: int
    pool_tokens: int
    hicache_ratio: float
    write_policy: str


def _stub_engine() -> None:
    """What SGLang's HiCache needs a GPU for, replaced for a CPU run: the host buffer's CUDA
    registration and the byte copies between the pools (no hit depends on the bytes)."""
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = "python"
    from golden_sglang import _stub_torchvision

    _stub_torchvision()
    import sglang.srt.mem_cache.pool_host.base as host_base
    import sglang.srt.mem_cache.pool_host.common as host_common

    def _nothing(*_args: Any, **_kwargs: Any) -> None:
        return None

    for name in ("_cuda_host_register", "_cuda_host_unregister",
                 "_cuda_host_unregister_ranges"):
        setattr(host_common, name, _nothing)
    host_base.HostKVCache.backup_from_device_all_layer_physical = _nothing
    host_base.HostKVCache.load_to_device_per_layer_physical = _nothing


class HiCache:
    """SGLang's HiCache tree, device pool and host pool for one configuration."""

    def __init__(self, config: Config) -> None:
        import torch
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        page, pool = config.page_size, config.pool_tokens
        args = ServerArgs(model_path="dummy", page_size=page, hicache_io_backend="direct",
                          hicache_mem_layout="layer_first",
                          hicache_write_policy=config.write_policy,
                          hicache_ratio=config.hicache_ratio, **self._server_args(config))
        set_global_server_args_for_scheduler(args)
        requests = ReqToTokenPool(size=4, max_context_len=1 << 14, device="cpu",
                                  enable_memory_saver=False)
        kv = MHATokenToKVPool(size=pool, page_size=page, dtype=torch.bfloat16, head_num=1,
                              head_dim=8, layer_num=1, device="cpu",
                              enable_memory_saver=False)
        if page == 1:
            self.allocator: Any = TokenToKVPoolAllocator(
                pool, dtype=torch.bfloat16, device="cpu", kvcache=kv, need_sort=False)
        else:
            self.allocator = PagedTokenToKVPoolAllocator(
                pool, page, dtype=torch.bfloat16, device="cpu", kvcache=kv, need_sort=False)
        params = CacheInitParams(req_to_token_pool=requests,
                                 token_to_kv_pool_allocator=self.allocator, page_size=page,
                                 disable=False, tree_components=(ComponentType.FULL,),
                                 eviction_policy="lru")
        self.cache = UnifiedRadixCache(params=params)
        self.cache.init_hicache(args, params)
        assert type(self.cache.tree_core).__name__ == "UnifiedTreeCore"
        self.host_tokens = int(self.cache.cache_controller.mem_pool_host.available_size())
        self.config = config

    def _server_args(self, config: Config) -> dict[str, Any]:
        """More of SGLang's server arguments (a storage backend), for a subclass."""
        return {}

    # What `serve` gives per request, in order: one column each in `run`.
    HITS: tuple[str, ...] = ("device", "host")

    def run(self, tenants: list[str], prompts: list[list[int]]) -> tuple[list[int], ...]:
        """Per request, in order, one list per name of `HITS` (device hit tokens, host tokens
        loaded; 0 for a prompt larger than the pool, which is refused), then the refused
        rows."""
        from array import array

        page, pool = self.config.page_size, self.config.pool_tokens
        columns: list[list[int]] = [[] for _ in self.HITS]
        refused: list[int] = []
        for row, (tenant, prompt) in enumerate(zip(tenants, prompts, strict=True)):
            n = len(prompt)
            if -(-n // page) > pool // page:
                refused.append(row)
                hits: tuple[int, ...] = (0,) * len(self.HITS)
            else:
                hits = self.serve(row, tenant, array("q", prompt), n)
            for column, hit in zip(columns, hits, strict=True):
                column.append(int(hit))
        return (*columns, refused)

    def serve(self, row: int, tenant: str, tokens: Any, n: int) -> tuple[int, ...]:
        """One request alone (`HITS`): its match, its host continuation loaded back, the rest
        of its prompt admitted."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        match = self.cache.match_prefix(MatchPrefixParams(
            key=RadixKey(tokens, cache_salt=tenant, limit=n - 1)))
        device = int(match.device_prefix_len)
        loaded, node = self.load_back(row, match)
        self.admit(row, tenant, tokens, device + loaded, node)
        return device, loaded

    def load_back(self, row: int, match: Any) -> tuple[int, Any]:
        """`init_load_back` of the host continuation `match` found, its load completed:
        (host tokens loaded, the node the request's prefix ends at)."""
        from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

        cache = self.cache
        node = match.last_device_node
        if int(match.host_hit_length) <= 0:
            return 0, node
        request = types.SimpleNamespace(
            rid=str(row), last_node=node, swa_host_hit_length=0,
            mamba_host_hit_length=0, kv=types.SimpleNamespace(mamba_pool_idx=None))
        got = cache.init_load_back(InitLoadBackParams(
            best_match_node=match.best_match_node,
            host_hit_length=int(match.host_hit_length), req=request))
        assert got is not None
        loaded, node = got
        cache.ready_to_load_host_cache()
        for ack in list(cache.cache_controller.ack_load_queue):
            ack.finish_event.synchronize()
        cache.loading_check()
        return int(loaded), node

    def admit(self, row: int, tenant: str, tokens: Any, hit: int, node: Any) -> None:
        """The rest of the prompt allocated (evicting), the page-aligned prompt inserted with
        `hit` as its prefix and every backup completed (`writes_landed` after)."""
        import torch
        from sglang.srt.mem_cache.allocation import (
            alloc_paged_token_slots_extend,
            alloc_token_slots,
        )
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        cache, allocator = self.cache, self.allocator
        page, pool = self.config.page_size, self.config.pool_tokens
        n = len(tokens)
        lock = cache.lock(node)
        prefix = cache.path_device_indices(node)[:hit]
        if page == 1:
            new = alloc_token_slots(cache, n - hit)
        else:
            last = prefix[-1:] if hit else torch.full((1,), -1, dtype=torch.int64)
            prefix_lens = torch.tensor([hit], dtype=torch.int64)
            seq_lens = torch.tensor([n], dtype=torch.int64)
            new = alloc_paged_token_slots_extend(cache, prefix_lens, prefix_lens,
                                                 seq_lens, seq_lens,
                                                 last.to(torch.int64), n - hit)
        assert new is not None, (row, hit, n)
        slots = torch.cat([prefix.to(torch.int64), new.to(torch.int64)])
        key = RadixKey(tokens, cache_salt=tenant).page_aligned(page)
        aligned = len(key)
        cache.insert(InsertParams(key=key, value=slots[:aligned].clone(),
                                  prev_prefix_len=hit, inserted_len=0, priority=0))
        cache.unlock(lock)
        allocator.free_segment(slots[aligned:n], start_pos=aligned)
        cache.flush_pending_backups()
        cache.writing_check(write_back=True)
        self.writes_landed(row)
        held = cache.total_size()[0]
        assert allocator.available_size() + held == pool, (row, held)

    def writes_landed(self, row: int) -> None:
        """Wait for writes below the host to land (a storage backend, in a subclass)."""


def ours(path: Path, config: Config, host_tokens: int):  # type: ignore[no-untyped-def]
    """(gpu hits, cpu hits) per request from yaotu_trace's tiered replay, or None where it
    does not import (SGLang's environment has no numba)."""
    try:
        import numba  # noqa: F401

        from yaotu_trace.ingest import read_trace
        from yaotu_trace.prefix.prepare import prepare
        from yaotu_trace.prefix.rules import rules_for
        from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, replay_tiers
    except ImportError:
        return None
    page = config.page_size
    rules = rules_for("sglang", block_size_tokens=page, capacity_blocks=config.pool_tokens // page)
    chains = prepare(read_trace(path)).chains(rules)
    tier = TierSpec(name=TierName.CPU, capacity_chunks=host_tokens // page, chunk_tokens=page)
    result = replay_tiers(chains, rules, (tier,), TierPolicy(config.write_policy))
    return result.gpu_hit_tokens, result.tier_hit_tokens[0]


def read_prompts(path: Path, reader: str) -> tuple[list[str], list[list[int]]]:
    """Tenants and prompts of a Parquet trace, read by a Python that has pandas."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[2]); from traces import "
            "load_prompts; from pathlib import Path; "
            "print(json.dumps(load_prompts(Path(sys.argv[1]))))")
    text = subprocess.run([reader, "-c", code, str(path), str(HERE)], check=True,
                          capture_output=True, text=True).stdout
    tenants, prompts = json.loads(text)
    return tenants, prompts


def configs_for(prompts: list[list[int]], page: int,
                ratios: tuple[float, ...] = (1.0, 2.0, 4.0)) -> list[Config]:
    """Device pools from one page above the longest prompt to a few times it; host pools of
    `ratios` times the device pool (2 is SGLang's default; below 1 SGLang warns and runs);
    the three write policies."""
    longest = -(-max(len(p) for p in prompts) // page) * page
    pools = [longest + page, 2 * longest, 4 * longest]
    return [Config(page, pool, ratio, policy)
            for policy in ("write_through", "write_through_selective", "write_back")
            for pool in pools for ratio in ratios]


TRACES = {  # name -> (file, page sizes, host ratios)
    "mixed": (ROOT / "tests/fixtures/engines/trace_mixed.parquet", (1, 16), (1.0, 2.0, 4.0)),
    "sessions": (ROOT / "tests/fixtures/engines/trace_sessions.parquet", (16,),
                 (1.0, 2.0, 4.0)),
    # A slice of Mooncake's conversation trace as token ids: long shared prefixes, and hosts
    # smaller than the GPU pool, where backups fail and write_back drops subtrees.
    "mooncake": (ROOT / "tests/fixtures/tiers_vllm/trace_mooncake.parquet", (16, 64),
                 (0.5, 1.0, 2.0)),
    # Pages of 4 and 8 tokens (`traces.TIER_SHAPES`), hosts from half the device pool up.
    "blocks4": (ROOT / "tests/fixtures/engines/trace_blocks4.parquet", (4, 8), (0.5, 1.0, 3.0)),
    "blocks8": (ROOT / "tests/fixtures/engines/trace_blocks8.parquet", (8,), (1.0, 2.0)),
}


def main(argv: list[str] | None = None) -> int:
    """Drive HiCache on every trace and configuration, write the fixtures, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--reader", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args(argv)
    _stub_engine()
    import sglang
    import torch

    header = (f"{'trace':<9} {'policy':<24} {'P':>3} {'pool':>6} {'host':>6} {'gpu hits':>9} "
              f"{'cpu hits':>9} {'refused':>7} {'ours gpu':>9} {'ours cpu':>9} {'differ':>6}")
    print(header)
    print("-" * len(header))
    for name, (path, pages, ratios) in TRACES.items():
        if args.only and name not in args.only:
            continue
        tenants, prompts = read_prompts(path, args.reader)
        configs = []
        for page in pages:
            for config in configs_for(prompts, page, ratios):
                engine = HiCache(config)
                gpu, cpu, refused = engine.run(tenants, prompts)
                mine = ours(path, config, engine.host_tokens)
                mg = mc = differ = "-"
                if mine is not None:
                    mg, mc = str(int(mine[0].sum())), str(int(mine[1].sum()))
                    differ = str(sum(1 for i in range(len(gpu))
                                     if (gpu[i], cpu[i]) != (mine[0][i], mine[1][i])))
                print(f"{name:<9} {config.write_policy:<24} {page:>3} {config.pool_tokens:>6} "
                      f"{engine.host_tokens:>6} {sum(gpu):>9} {sum(cpu):>9} "
                      f"{len(refused):>7} {mg:>9} {mc:>9} {differ:>6}", flush=True)
                configs.append({"page_size": page, "pool_tokens": config.pool_tokens,
                                "hicache_ratio": config.hicache_ratio,
                                "host_tokens": engine.host_tokens,
                                "write_policy": config.write_policy,
                                "gpu_hit_tokens": gpu, "cpu_hit_tokens": cpu,
                                "refused": refused})
        write_fixture(args.out_dir / f"sglang_hicache_{name}.json", engine="sglang",
                      engine_version=sglang.__version__, torch_version=torch.__version__,
                      trace=str(path.relative_to(ROOT / "tests" / "fixtures")),
                      protocol=PROTOCOL, configs=configs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
