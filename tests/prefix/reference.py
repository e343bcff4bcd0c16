"""A brute-force pure-Python prefix replay: the oracle the compiled engine is checked against.

Chains are interned in a dict ((parent id, block tokens) → id), caches are OrderedDicts.
Token traces only; slow and obviously correct.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def reference_chains(
    prompts: Sequence[Sequence[int]],
    namespaces: Sequence[int],
    block: int,
    *,
    partial: bool = False,
) -> list[list[tuple[int, int]]]:
    """Per request, its cacheable blocks as (chain id, tokens)."""
    table: dict[tuple, int] = {}
    out = []
    for prompt, ns in zip(prompts, namespaces, strict=True):
        parent: object = ("ns", ns)
        blocks = []
        full = len(prompt) // block
        for k in range(full):
            key = (parent, tuple(prompt[k * block:(k + 1) * block]))
            parent = table.setdefault(key, len(table))
            blocks.append((parent, block))
        if partial and len(prompt) % block:
            key = (parent, tuple(prompt[full * block:]), "partial")
            blocks.append((table.setdefault(key, len(table)), len(prompt) - full * block))
        out.append(blocks)
    return out


def reference_replay(
    prompts: Sequence[Sequence[int]],
    *,
    block: int,
    namespaces: Sequence[int] | None = None,
    last_token_rule: bool = False,
    partial: bool = False,
    capacity: int | None = None,
    eviction: str = "lru",
    touch_order: str = "tail-first",
    instances: Sequence[int] | None = None,
    route: str | None = None,
    num_instances: int = 1,
    affinity_threshold: float = 0.3,
    lfu_cap: int | None = None,
) -> list[int]:
    """Hit tokens per request (LFU counts saturate at `lfu_cap` when given)."""
    ns = namespaces if namespaces is not None else [0] * len(prompts)
    chains = reference_chains(prompts, ns, block, partial=partial)
    caches: dict[int, OrderedDict[int, list[int]]] = {}
    load = [0] * num_instances
    clock = 0
    hits = []
    for i, blocks in enumerate(chains):
        n = len(prompts[i])
        if route == "least-loaded":
            inst = min(range(num_instances), key=lambda x: (load[x], x))
        elif route == "prefix-affinity":
            inst = min(range(num_instances), key=lambda x: (load[x], x))
            best, best_run, best_tokens = -1, 0, 0
            for x in range(num_instances):
                cache = caches.get(x, OrderedDict())
                run = 0
                while run < len(blocks) and blocks[run][0] in cache:
                    run += 1
                if run > best_run or (run == best_run and run > 0 and load[x] < load[best]):
                    best, best_run = x, run
                    best_tokens = sum(t for _, t in blocks[:run])
            if best >= 0 and n > 0 and best_tokens > affinity_threshold * n:
                inst = best
        elif instances is not None:
            inst = instances[i]
        else:
            inst = 0
        load[inst % num_instances] += n
        cache = caches.setdefault(inst, OrderedDict())
        cap = len(blocks)
        if last_token_rule:
            cap = min(cap, max(n - 1, 0) // block)
        h = 0
        while h < cap and blocks[h][0] in cache:
            h += 1
        hits.append(sum(t for _, t in blocks[:h]))
        order = list(reversed(blocks)) if touch_order == "tail-first" else list(blocks)
        for b, _ in order:
            clock += 1
            if b in cache:
                if eviction == "lru":
                    cache.move_to_end(b)
                elif eviction == "lfu":
                    cache[b][0] = min(cache[b][0] + 1, lfu_cap or cache[b][0] + 1)
                    cache[b][1] = clock
                continue
            if capacity is not None and len(cache) >= capacity:
                if eviction == "lfu":
                    victim = min(cache, key=lambda k: (cache[k][0], cache[k][1]))
                    del cache[victim]
                else:
                    cache.popitem(last=False)
            cache[b] = [1, clock]
    return hits
