"""A plain-Python reference of the vLLM-preset scheduler on one instance, for cross-checks.

Written from engines.md §1.3–1.8 with Python lists and dicts, independent of the compiled
loop: free queue as a list (head = index 0), cache as a dict of identity → the physical blocks
caching it, oldest first (vLLM keeps every copy; a lookup takes the oldest), requests as
objects. Synchronous scheduling. Step time is linear: `a + b·prefill_tokens + c·Σcontext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from yaotu_trace.sim import block_identities


@dataclass
class Req:
    idx: int
    arrival: float
    prompt: int
    out: int
    idents: list[int]
    computed: int = 0
    ntok: int = 0
    gen: int = 0
    blocks: list[int] = field(default_factory=list)
    nreg: int = 0
    started: bool = False
    cached: int = 0
    preemptions: int = 0
    computed_at_preempt: int = 0
    recomputed: int = 0
    tokens: list[float] = field(default_factory=list)


def reference(requests, *, kv_blocks, block, max_seqs, budget, chunked, threshold, caching,
              a, b, c):
    out = np.maximum(requests.output_tokens.astype(int), 1)
    offsets, ident, _, _ = block_identities(requests, out, block, caching)
    reqs = [Req(i, float(requests.arrival_s[i]), max(int(requests.prompt_tokens[i]), 1),
                int(out[i]), [int(x) for x in ident[offsets[i]:offsets[i + 1]]])
            for i in range(len(out))]
    for r in reqs:
        r.ntok = r.prompt
    usable = kv_blocks - 1
    free = list(range(usable))
    ref = [0] * usable
    bhash = [-1] * usable
    cache: dict[int, list[int]] = {}
    running: list[Req] = []
    waiting: list[Req] = []
    if not chunked:
        budget = max(budget, max(r.prompt + r.out for r in reqs) + max_seqs)
    t, nxt = 0.0, 0

    def alloc(r, tokens):
        need = -(-tokens // block) - len(r.blocks)
        if need <= 0:
            return True
        if need > len(free):
            return False
        for _ in range(need):
            blk = free.pop(0)
            if bhash[blk] >= 0:
                copies = cache[bhash[blk]]
                copies.remove(blk)
                if not copies:
                    del cache[bhash[blk]]
                bhash[blk] = -1
            ref[blk] = 1
            r.blocks.append(blk)
        return True

    def register(r, tokens):
        full = min(tokens // block, len(r.blocks))
        for k in range(r.nreg, full):
            blk = r.blocks[k]
            if caching and bhash[blk] < 0:
                cache.setdefault(r.idents[k], []).append(blk)
                bhash[blk] = r.idents[k]
        r.nreg = max(r.nreg, full)

    def release(r):
        for blk in reversed(r.blocks):
            ref[blk] -= 1
            if ref[blk] == 0:
                if bhash[blk] >= 0:
                    free.append(blk)
                else:
                    free.insert(0, blk)
        r.blocks, r.nreg = [], 0

    while nxt < len(reqs) or running or waiting:
        if not running and not waiting:
            t = max(t, reqs[nxt].arrival)
        while nxt < len(reqs) and reqs[nxt].arrival <= t:
            waiting.append(reqs[nxt])
            nxt += 1
        left = budget
        in_system = len(running) + len(waiting)
        scheduled, preempted, prefill, ctx = [], False, 0, 0
        i = 0
        while i < len(running) and left > 0:
            r = running[i]
            n = r.ntok - r.computed
            if threshold and in_system > 1:
                n = min(n, threshold)
            n = min(n, left)
            stop = False
            while not alloc(r, r.computed + n):
                v = running.pop()
                release(v)
                v.computed_at_preempt, v.computed = v.computed, 0
                v.preemptions += 1
                waiting.insert(0, v)
                preempted = True
                if v is r:
                    stop = True
                    break
            if stop:
                break
            register(r, r.computed + n)
            if not (r.gen >= 1 and r.computed == r.ntok - 1 and n == 1):
                prefill += n
            ctx += r.computed + n
            r.computed += n
            left -= n
            scheduled.append(r)
            i += 1
        while not preempted and waiting and left > 0 and len(running) < max_seqs:
            r = waiting[0]
            hit = 0
            if caching:
                cap = min((r.ntok - 1) // block, len(r.idents))
                while hit < cap and r.idents[hit] in cache:
                    hit += 1
            hit_tok = hit * block
            n = r.ntok - hit_tok
            if threshold and in_system > 1:
                n = min(n, threshold)
            if not chunked and n > left:
                break
            n = min(n, left)
            evictable = sum(1 for k in range(hit) if ref[cache[r.idents[k]][0]] == 0)
            if -(-r.ntok // block) - hit + evictable > len(free):
                break
            for k in range(hit):
                blk = cache[r.idents[k]][0]
                if ref[blk] == 0:
                    free.remove(blk)
                ref[blk] += 1
                r.blocks.append(blk)
            r.nreg = hit
            alloc(r, hit_tok + n)
            register(r, hit_tok + n)
            waiting.pop(0)
            running.append(r)
            if not r.started:
                r.started, r.cached = True, hit_tok
            else:
                r.recomputed += max(0, r.computed_at_preempt - hit_tok)
            prefill += n
            ctx += hit_tok + n
            r.computed = hit_tok + n
            left -= n
            scheduled.append(r)
        if not scheduled:
            continue
        t += a + b * prefill + c * ctx
        for r in scheduled:
            if r.computed >= r.ntok:
                r.gen += 1
                r.tokens.append(t)
                if r.gen >= r.out:
                    release(r)
                    running.remove(r)
                else:
                    r.ntok += 1
    return reqs
