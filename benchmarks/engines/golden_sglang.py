"""Golden per-request hits from SGLang's real `RadixCache` and CPU token allocators.

Run with a Python that has `sglang` (and torch) importable and yaotu_trace on the path, e.g.
from the repository root

    PYTHONPATH=. /path/to/venv-sglang/bin/python benchmarks/engines/golden_sglang.py

It installs nothing. It writes `tests/fixtures/engines/sglang_<trace>.json` and prints, per
configuration, the engine's Σ hits, the rejected requests, the tokens eviction was asked for
against the tokens it freed, and yaotu_trace's clean-model replay next to them. The tests replay
the same traces against these files without SGLang (`tests/prefix/test_exact_sglang.py`).

The protocol (one request at a time, in file order) is `PROTOCOL` below; it mirrors what the
scheduler does for one request: `schedule_batch.py`/`common.py` (`match_kv_cache` with
`_compute_max_prefix_len`), `allocation.py` (`alloc_token_slots`,
`alloc_paged_token_slots_extend`), `radix_cache.py` (`RadixCache.checkpoint` and
`release_kv_cache` for a finished request).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import types
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from traces import DATA, SHAPES, TraceShape, load_prompts, trace_path  # noqa: E402

PROTOCOL = (
    "SGLang RadixCache with its CPU token allocator of pool_tokens slots (TokenToKVPoolAllocator "
    "for page_size 1, PagedTokenToKVPoolAllocator otherwise; pool_tokens // page_size pages), "
    "eviction policy lru, tenant as RadixKey.cache_salt. Per request, in file order, one at a "
    "time: a prompt needing more pages than the pool (ceil(n / page_size) > pool pages) is "
    "rejected before any lookup (hit 0, nothing inserted), as the scheduler refuses a prompt "
    "longer than its token pool; otherwise match_prefix on the prompt with RadixKey limit n - 1 "
    "(page-aligned down by the tree) gives the hit; lock the matched node; allocate the "
    "remaining tokens with the scheduler's own helpers (alloc_token_slots for page 1, which "
    "evicts the shortfall of n - hit tokens; alloc_paged_token_slots_extend otherwise, which "
    "evicts for n - hit + page_size tokens, its one-extra-page over-estimate); insert the "
    "page-aligned prompt with its slot indices; free the slots the tree already held "
    "[hit, prefix_len) and the unaligned tail; match_prefix again on the inserted key and move "
    "the lock to its node (RadixCache.checkpoint); unlock. time.monotonic, which stamps "
    "last_access_time in radix_cache.py, is replaced by a counter that returns 1, 2, 3, ... so "
    "equal stamps cannot make the eviction order depend on the machine. Output tokens are not "
    "generated or inserted."
)


def _stub_torchvision() -> None:
    """A CPU torch has no matching torchvision wheel, and `sglang.srt.mem_cache` imports the
    model configs, one of which imports torchvision at module level (an image transform the
    cache never calls). Transformers decides torchvision is absent first; then any
    `torchvision` import yields empty modules."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # a CUDA build on a CPU torch raises RuntimeError, not ImportError
        sys.modules.pop("torchvision", None)
    import transformers.image_utils  # noqa: F401 - fixes its torchvision check to "absent"

    class _Empty(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            full = f"{self.__name__}.{name}"
            if full not in sys.modules:
                sys.modules[full] = _Empty(full)
            return sys.modules[full]

    class _Loader(importlib.abc.Loader):
        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            return _Empty(spec.name)

        def exec_module(self, module: types.ModuleType) -> None:
            module.__path__ = []

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None
                      ) -> importlib.machinery.ModuleSpec | None:
            if fullname == "torchvision" or fullname.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, _Finder())


class CounterClock:
    """Stands in for the `time` module inside radix_cache.py: `monotonic()` counts 1, 2, 3, ..."""

    def __init__(self) -> None:
        import time

        self._time = time
        self.now = 0

    def monotonic(self) -> float:
        self.now += 1
        return float(self.now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._time, name)


@dataclass
class Config:
    """One engine run: the page size and the token pool."""

    page_size: int
    pool_tokens: int
    hit_tokens: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    evict_asked_tokens: int = 0
    evicted_tokens: int = 0


def run_engine(tenants: list[str], prompts: list[list[int]], page_size: int,
               pool_tokens: int) -> Config:
    """Drive the real RadixCache and allocator over one trace (see PROTOCOL)."""
    import sglang.srt.mem_cache.radix_cache as radix_module
    import torch
    from sglang.srt.mem_cache.allocation import (
        alloc_paged_token_slots_extend,
        alloc_token_slots,
    )
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    radix_module.time = CounterClock()
    if page_size == 1:
        allocator: Any = TokenToKVPoolAllocator(pool_tokens, dtype=torch.float16, device="cpu",
                                                kvcache=None, need_sort=False)
    else:
        allocator = PagedTokenToKVPoolAllocator(pool_tokens, page_size, dtype=torch.float16,
                                                device="cpu", kvcache=None, need_sort=False)
    tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=None,
                                      token_to_kv_pool_allocator=allocator,
                                      page_size=page_size, eviction_policy="lru"))
    config = Config(page_size=page_size, pool_tokens=pool_tokens)
    real_evict = tree.evict

    def counted_evict(params: Any) -> Any:
        result = real_evict(params)
        config.evict_asked_tokens += int(params.num_tokens)
        config.evicted_tokens += int(result.num_tokens_evicted)
        return result

    tree.evict = counted_evict
    pool_pages = pool_tokens // page_size
    for i, (tenant, prompt) in enumerate(zip(tenants, prompts, strict=True)):
        n = len(prompt)
        if -(-n // page_size) > pool_pages:
            config.hit_tokens.append(0)
            config.rejected.append(i)
            continue
        tokens = array("q", prompt)
        match = tree.match_prefix(MatchPrefixParams(
            key=RadixKey(tokens, cache_salt=tenant, limit=n - 1)))
        hit = int(match.device_prefix_len)
        lock = tree.lock(match.last_device_node)
        prefix = tree.path_device_indices(match.last_device_node)[:hit]
        if page_size == 1:
            new = alloc_token_slots(tree, n - hit)
        else:
            last = prefix[-1:] if hit else torch.full((1,), -1, dtype=torch.int64)
            prefix_lens = torch.tensor([hit], dtype=torch.int64)
            seq_lens = torch.tensor([n], dtype=torch.int64)
            new = alloc_paged_token_slots_extend(tree, prefix_lens, prefix_lens, seq_lens,
                                                 seq_lens, last.to(torch.int64), n - hit)
        row = torch.cat([prefix.to(torch.int64), new.to(torch.int64)])
        key = RadixKey(tokens, cache_salt=tenant).page_aligned(page_size)
        key_len = len(key)
        inserted = tree.insert(InsertParams(key=key, value=row[:key_len].clone(),
                                            inserted_len=0, priority=0))
        allocator.free_segment(row[hit:inserted.prefix_len], start_pos=hit)
        again = tree.match_prefix(MatchPrefixParams(key=key))
        assert again.device_prefix_len == key_len, (i, again.device_prefix_len, key_len)
        relock = tree.lock(again.last_device_node)
        tree.unlock(lock)
        allocator.free_segment(row[key_len:n], start_pos=key_len)
        tree.unlock(relock)
        held = tree.total_size()
        assert allocator.available_size() + held == pool_pages * page_size, (
            i, allocator.available_size(), held)
        config.hit_tokens.append(hit)
    return config


def pools_for(prompts: list[list[int]], page_size: int) -> list[int]:
    """Tight (one page above and one below the longest prompt), middle, and ample pools."""
    longest = max(len(p) for p in prompts)
    pages = -(-longest // page_size)
    total = sum(len(p) for p in prompts)
    if page_size == 1:
        tight = [longest - 1, longest + 1]
    else:
        tight = [(pages - 1) * page_size, pages * page_size]
    middle = [1024, 2048, 4096, 8192, 16384]
    ample = -(-(total + page_size) // page_size) * page_size
    return tight + middle + [ample]


def clean_replay(shape: TraceShape, page_size: int, pool_tokens: int) -> list[int]:
    """yaotu_trace's clean model (`--accounting clean`) at the same page size and pool."""
    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.kernels.engine import replay
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.rules import rules_for

    rules = rules_for("sglang", block_size_tokens=page_size,
                      capacity_blocks=pool_tokens // page_size, accounting="clean")
    chains = prepare(read_trace(trace_path(shape))).chains(rules)
    return [int(x) for x in replay(chains, rules).hit_tokens]


def exact_replay(shape: TraceShape, page_size: int, pool_tokens: int) -> list[int] | None:
    """yaotu_trace's SGLang-exact replay, when this checkout has it."""
    try:
        from yaotu_trace.prefix.kernels.exact_sglang import replay_sglang
    except ImportError:
        return None
    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.rules import rules_for

    rules = rules_for("sglang", block_size_tokens=page_size, accounting="clean")
    chains = prepare(read_trace(trace_path(shape))).chains(rules)
    return [int(x) for x in replay_sglang(chains, pool_tokens // page_size).hit_tokens]


def main() -> None:
    _stub_torchvision()
    import sglang
    import torch

    runs = [(shape, 1) for shape in SHAPES] + [(SHAPES[0], 16)]
    by_trace: dict[str, dict[str, Any]] = {}
    header = (f"{'trace':<9} {'P':>3} {'pool':>7} {'engine Σhit':>12} {'rej':>4} "
              f"{'evict asked':>12} {'freed':>9} {'exact Σhit':>11} {'≠':>3} "
              f"{'clean Σhit':>11} {'≠':>4}")
    print(header)
    for shape, page_size in runs:
        tenants, prompts = load_prompts(trace_path(shape))
        doc = by_trace.setdefault(shape.name, {
            "engine": "sglang", "engine_version": sglang.__version__,
            "torch_version": torch.__version__, "trace": trace_path(shape).name,
            "protocol": PROTOCOL, "configs": []})
        for pool in pools_for(prompts, page_size):
            config = run_engine(tenants, prompts, page_size, pool)
            doc["configs"].append({"page_size": page_size, "pool_tokens": pool,
                                   "hit_tokens": config.hit_tokens,
                                   "rejected": config.rejected,
                                   "evict_asked_tokens": config.evict_asked_tokens,
                                   "evicted_tokens": config.evicted_tokens})
            clean = clean_replay(shape, page_size, pool)
            exact = exact_replay(shape, page_size, pool)
            engine = config.hit_tokens
            exact_cells = ("-", "-") if exact is None else (
                f"{sum(exact):,}", str(sum(a != b for a, b in zip(exact, engine, strict=True))))
            print(f"{shape.name:<9} {page_size:>3} {pool:>7} {sum(engine):>12,} "
                  f"{len(config.rejected):>4} {config.evict_asked_tokens:>12,} "
                  f"{config.evicted_tokens:>9,} {exact_cells[0]:>11} {exact_cells[1]:>3} "
                  f"{sum(clean):>11,} "
                  f"{sum(a != b for a, b in zip(clean, engine, strict=True)):>4}")
    for name, doc in by_trace.items():
        path = DATA / f"sglang_{name}.json"
        path.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
        print(path.relative_to(HERE.parents[1]))


if __name__ == "__main__":
    main()
