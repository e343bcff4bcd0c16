"""The compiled step loop: instances, KV pools, prefix caches, routing and P/D handoffs.

One call simulates a whole cluster in global time order. Three kinds of events interleave:
an arrival (routed at once to an instance's waiting queue), a KV handoff arriving at a decode
instance (P/D), and an instance's step boundary (the step that ends is completed, then the next
one is scheduled). A step is scheduled at its start and completed at its end, so routing
decisions taken meanwhile see the engine as a real router would (tokens of a step in flight
are not out yet).

KV pool (engines.md §1.4–1.5): per instance `usable` blocks with reference counts. Free blocks
sit in one doubly linked free queue; allocation pops the head and evicts the block's cache
entry only then; a request's blocks are freed tail first, hashed blocks appended to the tail
(LRU), hashless blocks prepended to the head. A block's identity (`ident`) is a dense id: the
chain id for cacheable prompt blocks, a private id (one per request block slot) otherwise, so a
preempted request can hit its own surviving blocks on resume. Identities map to the physical
block caching them (`ident_map`, one row per instance); the first copy wins.

The configuration arrives typed: `EngineParams` and `StepCostParams` (`sim.engine_params`),
NamedTuples of scalars read by field name; the requests arrive as `Inputs`.

The code is written for numba (`cache=True`): flat arrays, int64 scalars, no Python objects.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from yaotu_trace._lists import append, heap_pop, heap_push, prepend, unlink

_INF = np.inf
# Route codes (`ROUTE_CODES` in sim.config).
_ROUND_ROBIN, _LEAST_LOADED, _PREFIX_AFFINITY, _KV_AWARE = range(4)


class Inputs(NamedTuple):
    """The requests, read-only: lengths, arrivals, block identities, token-time offsets."""

    prompt: np.ndarray
    out_len: np.ndarray
    arrival: np.ndarray
    blk_off: np.ndarray
    ident: np.ndarray
    tt_off: np.ndarray
    num_identities: int
    shared_limit: int  # identities below it are shared prompt blocks
    assigned: np.ndarray  # instance fixed in advance (`--route trace|weighted`), −1: the policy


@nb.njit(cache=True)
def step_time(cost, prefill_tokens, decode_tokens, attn_pairs, ctx_dec, prefix_sum, ctx_all):
    """(seconds, HBM bytes) of one step; see `StepCost`."""
    tok = prefill_tokens + decode_tokens
    if tok == 0:
        return 0.0, 0.0
    kvb = cost.kv_bytes_per_token
    if cost.calibrated:
        t = (cost.a_s + cost.b_s_per_prefill_token * prefill_tokens
             + cost.c_s_per_context_token * ctx_all)
        if t < 1e-9:
            t = 1e-9
        return t, kvb * (ctx_dec + prefix_sum + tok)
    flops = 2.0 * cost.linear_params * tok + cost.attention_flops_per_token_pair * (
        attn_pairs + ctx_dec)
    weights = cost.dense_weight_bytes
    if cost.expert_weight_bytes > 0.0:
        e = cost.experts
        touched = 1.0 - (1.0 - cost.experts_per_token / e) ** tok
        weights += cost.expert_weight_bytes * touched
    nbytes = weights + kvb * (ctx_dec + prefix_sum + tok)
    t = max(flops / cost.flops_per_s, nbytes / cost.bytes_per_s) + cost.overhead_s
    return t, nbytes


@nb.njit(cache=True)
def _alloc(r, inst, tokens, bsz, blk_off, req_phys, nalloc, nfree, ref, bhash, ident_map,
           prev, nxt, head, tail):
    """Give request r blocks for `tokens` tokens; False (nothing taken) when too few are free."""
    need = (tokens + bsz - 1) // bsz - nalloc[r]
    if need <= 0:
        return True
    if need > nfree[inst]:
        return False
    base = blk_off[r]
    for _ in range(need):
        b = head[inst]
        unlink(b, inst, prev, nxt, head, tail)
        h = bhash[b]
        if h >= 0:
            ident_map[inst, h] = -1
            bhash[b] = -1
        ref[b] = 1
        req_phys[base + nalloc[r]] = b
        nalloc[r] += 1
    nfree[inst] -= need
    return True


@nb.njit(cache=True)
def _free_request(r, inst, blk_off, req_phys, nalloc, nreg, nfree, ref, bhash, prev, nxt, head,
                  tail):
    """Release r's blocks tail first: cached ones to the LRU tail, hashless ones to the head."""
    base = blk_off[r]
    for k in range(nalloc[r] - 1, -1, -1):
        b = req_phys[base + k]
        ref[b] -= 1
        if ref[b] == 0:
            if bhash[b] >= 0:
                append(b, inst, prev, nxt, head, tail)
            else:
                prepend(b, inst, prev, nxt, head, tail)
            nfree[inst] += 1
    nalloc[r] = 0
    nreg[r] = 0


@nb.njit(cache=True)
def _preempt(r, inst, blk_off, req_phys, nalloc, nreg, nfree, ref, bhash, prev, nxt, head, tail,
             computed, c_pre, npre, pend_pf, wq, whead, wlen):
    """Free running r and queue it first again: it recomputes what it had (less any hits)."""
    _free_request(r, inst, blk_off, req_phys, nalloc, nreg, nfree, ref, bhash, prev, nxt, head,
                  tail)
    pend_pf[inst] += computed[r]
    c_pre[r] = computed[r]
    computed[r] = 0
    npre[r] += 1
    cap_q = wq.shape[1]
    whead[inst] = (whead[inst] - 1 + cap_q) % cap_q
    wq[inst, whead[inst]] = r
    wlen[inst] += 1


@nb.njit(cache=True)
def _register(r, inst, tokens, bsz, blk_off, ident, req_phys, nreg, nalloc, bhash, ident_map):
    """Publish r's full blocks up to `tokens` as cache entries (the first copy of an id wins)."""
    full = tokens // bsz
    if full > nalloc[r]:
        full = nalloc[r]
    base = blk_off[r]
    for k in range(nreg[r], full):
        idn = ident[base + k]
        b = req_phys[base + k]
        if ident_map[inst, idn] < 0 and bhash[b] < 0:
            ident_map[inst, idn] = b
            bhash[b] = idn
    if full > nreg[r]:
        nreg[r] = full


@nb.njit(cache=True)
def _lookup(r, inst, num_tokens, bsz, blk_off, ident, ident_map, ref):
    """(hit blocks, hit blocks now free) of r's longest cached prefix, last-token rule applied."""
    cap = (num_tokens - 1) // bsz
    avail = blk_off[r + 1] - blk_off[r]
    if cap > avail:
        cap = avail
    base = blk_off[r]
    h = 0
    evictable = 0
    while h < cap:
        b = ident_map[inst, ident[base + h]]
        if b < 0:
            break
        if ref[b] == 0:
            evictable += 1
        h += 1
    return h, evictable


@nb.njit(cache=True)
def _touch(r, inst, hit, blk_off, ident, ident_map, req_phys, nalloc, nreg, nfree, ref, prev, nxt,
           head, tail):
    base = blk_off[r]
    for k in range(hit):
        b = ident_map[inst, ident[base + k]]
        if ref[b] == 0:
            unlink(b, inst, prev, nxt, head, tail)
            nfree[inst] -= 1
        ref[b] += 1
        req_phys[base + k] = b
    nalloc[r] = hit
    nreg[r] = hit


# ---- routing: a request reaches a router (arrival, or its KV reaching the decode pool)


@nb.njit(cache=True, inline="always")
def _route_prefix_affinity(r, lo, hi, p, load, rtree, blk_off, ident, prompt, shared_limit):
    """sgl-router cache_aware: imbalance → least load, else the best match over the router's
    own tree if its match rate exceeds the threshold; the tree then learns r's blocks."""
    mn = load[lo]
    mx = load[lo]
    least = lo
    for i in range(lo + 1, hi):
        if load[i] < mn:
            mn = load[i]
            least = i
        if load[i] > mx:
            mx = load[i]
    target = least
    if not (mx - mn > p.balance_abs_threshold and mx > p.balance_rel_threshold * mn):
        base = blk_off[r]
        nb_ = blk_off[r + 1] - base
        best_m = -1
        best_i = least
        for i in range(lo, hi):
            m = 0
            while m < nb_ and ident[base + m] < shared_limit and rtree[i, ident[base + m]]:
                m += 1
            if m > best_m:
                best_m = m
                best_i = i
        if prompt[r] > 0 and best_m * p.block_size_tokens / prompt[r] > p.affinity_threshold:
            target = best_i
    base = blk_off[r]
    for m in range(blk_off[r + 1] - base):
        idn = ident[base + m]
        if idn < shared_limit:
            rtree[target, idn] = True
    return target


@nb.njit(cache=True, inline="always")
def _route_kv_aware(r, lo, hi, is_remote, p, ident_map, pend_pf, nfree, blk_off, ident, prompt):
    """Dynamo: the least prefill blocks after overlap credit + active decode blocks."""
    bsz = p.block_size_tokens
    target = lo
    best_l = _INF
    base = blk_off[r]
    cap = (prompt[r] - 1) // bsz
    for i in range(lo, hi):
        ov = 0
        if p.prefix_caching and not is_remote:
            while ov < cap and ident_map[i, ident[base + ov]] >= 0:
                ov += 1
        pf_blocks = (pend_pf[i] + prompt[r]) / bsz - ov
        if pf_blocks < 0.0:
            pf_blocks = 0.0
        logit = pf_blocks + (p.usable_blocks - nfree[i])
        if logit < best_l:
            best_l = logit
            target = i
    return target


@nb.njit(cache=True, inline="always")
def _route(r, lo, hi, stage, is_remote, p, rr, load, rtree, ident_map, pend_pf, nfree, blk_off,
           ident, prompt, shared_limit):
    """The instance in [lo, hi) that request r goes to under the route policy."""
    span = hi - lo
    if span <= 1:
        return lo
    if p.route == _ROUND_ROBIN:
        target = lo + rr[stage] % span
        rr[stage] += 1
        return target
    if p.route == _LEAST_LOADED:
        target = lo
        best = load[lo]
        for i in range(lo + 1, hi):
            if load[i] < best:
                best = load[i]
                target = i
        return target
    if p.route == _PREFIX_AFFINITY:
        return _route_prefix_affinity(r, lo, hi, p, load, rtree, blk_off, ident, prompt,
                                      shared_limit)
    return _route_kv_aware(r, lo, hi, is_remote, p, ident_map, pend_pf, nfree, blk_off, ident,
                           prompt)


@nb.njit(cache=True)
def _grow_f(a):
    out = np.empty(a.shape[0] * 2, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


# Phase helpers take at most 30 arguments: beyond that CPython passes them as one *args tuple,
# which numba cannot inline and which costs a reference count per array on every call.
@nb.njit(cache=True)
def _schedule_running_vllm(i, in_system, p, run, nrun, ntok, computed, gen, comp_total, pend_pf,
                           fl_req, remote, blk_off, ident, req_phys, nalloc, nreg, nfree, ref,
                           bhash, ident_map, prev, nxt, head, tail, c_pre, npre, wq, whead, wlen):
    """vLLM v1 schedules instance i's running requests first, in order, under the token budget;
    one that finds no free block preempts the last running one (itself included). Returns
    (scheduled, preempted, prefill tokens, decode tokens, attention pairs, decode context,
    prefix sum, context sum, budget left)."""
    bsz = p.block_size_tokens
    lpt = p.long_prefill_tokens
    caching = p.prefix_caching
    budget = p.token_budget
    n_sched = 0
    preempted_n = 0
    pf_tok = 0
    dec_tok = 0
    attn_pairs = 0.0
    ctx_dec = 0.0
    prefix_sum = 0.0
    ctx_all = 0.0
    idx = 0
    stop = False
    while idx < nrun[i] and budget > 0 and not stop:
        r = run[i, idx]
        nn = ntok[r] - computed[r]
        if lpt > 0 and in_system > 1 and nn > lpt:
            nn = lpt
        if nn > budget:
            nn = budget
        while not _alloc(r, i, computed[r] + nn, bsz, blk_off, req_phys, nalloc, nfree,
                         ref, bhash, ident_map, prev, nxt, head, tail):
            v = run[i, nrun[i] - 1]
            nrun[i] -= 1
            _preempt(v, i, blk_off, req_phys, nalloc, nreg, nfree, ref, bhash, prev, nxt,
                     head, tail, computed, c_pre, npre, pend_pf, wq, whead, wlen)
            remote[v] = False
            preempted_n += 1
            if v == r:
                stop = True
                break
        if stop:
            break
        if caching:
            _register(r, i, computed[r] + nn, bsz, blk_off, ident, req_phys, nreg, nalloc,
                      bhash, ident_map)
        cb = computed[r]
        if gen[r] >= 1 and cb == ntok[r] - 1 and nn == 1:
            dec_tok += 1
            ctx_dec += cb + 1
        else:
            pf_tok += nn
            attn_pairs += nn * (cb + nn / 2.0)
            prefix_sum += cb
            pend_pf[i] -= nn
        ctx_all += cb + nn
        computed[r] = cb + nn
        comp_total[r] += nn
        budget -= nn
        fl_req[i, n_sched] = r
        n_sched += 1
        idx += 1
    return (n_sched, preempted_n, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all,
            budget)


@nb.njit(cache=True)
def _schedule_running_sglang(i, p, run, nrun, ntok, computed, gen, comp_total, pend_pf, fl_req,
                             blk_off, req_phys, nalloc, nfree, ref, bhash, ident_map, prev, nxt,
                             head, tail):
    """SGLang continues instance i's chunked prefills under the token budget (decodes wait for
    a step without prefill work). Returns (scheduled, prefill tokens, attention pairs, prefix
    sum, context sum, budget left)."""
    bsz = p.block_size_tokens
    budget = p.token_budget
    n_sched = 0
    pf_tok = 0
    attn_pairs = 0.0
    prefix_sum = 0.0
    ctx_all = 0.0
    for idx in range(nrun[i]):
        if budget <= 0:
            break
        r = run[i, idx]
        if gen[r] >= 1 and computed[r] == ntok[r] - 1:
            continue
        nn = ntok[r] - computed[r]
        if nn > budget:
            nn = budget
        if not _alloc(r, i, computed[r] + nn, bsz, blk_off, req_phys, nalloc, nfree,
                      ref, bhash, ident_map, prev, nxt, head, tail):
            continue
        cb = computed[r]
        pf_tok += nn
        attn_pairs += nn * (cb + nn / 2.0)
        prefix_sum += cb
        ctx_all += cb + nn
        pend_pf[i] -= nn
        computed[r] = cb + nn
        comp_total[r] += nn
        budget -= nn
        fl_req[i, n_sched] = r
        n_sched += 1
    return n_sched, pf_tok, attn_pairs, prefix_sum, ctx_all, budget


# NOTE: scheduling an instance's running requests (vLLM, SGLang) is split into the helpers
# above, over plain arrays and scalars: on the Mooncake benchmark CPU time stayed within noise of
# the inline loop and every result array is bit-identical. Completing a step, admission, SGLang's
# decode step, pricing and the step log stay inline, because every other split measured so far
# was slower (`benchmarks/simulate_vs.py`: CPU seconds, median of 3-5 alternating runs against
# the inline loop, bit-identical in every case; run-to-run noise on a 2-core machine is ±3%):
# - the state as NamedTuples of arrays passed by value to every phase: 1.3-1.8x;
# - step completion over its 46 plain arguments: ~15% with 4 instances (more than 30 arguments
#   reach numba as one *args tuple, which it cannot inline); step completion, compaction and
#   pricing as <=30-argument helpers, even inlined: up to ~10% with 4 instances;
# - step completion alone over tuples of the state arrays, `inline="always"`: +10-12% with 4
#   instances; the same not inlined: +13-14%;
# - step completion alone over one `numba.experimental.structref` of its 28 state arrays (one
#   pointer passed, fields read once per call): +16% (4 instances, kv-aware), +12% (4, SGLang),
#   +4% (1 instance), first-call compile +16%;
# - step completion over state tuples with everything it calls inlined too (`_register`,
#   `_free_request`, the heap push), so that numba can prune the reference counts of the arrays
#   it unpacks: +6% (4 instances, kv-aware), +4% (4 instances SGLang; P/D 2:2), ±1% (1 instance),
#   compile +10%; adding admission the same way (with `_alloc`, `_lookup`, `_touch` inlined):
#   +6% and +20% with 4 instances, compile +13%.
# The slowdown is largest with 4 instances; the likeliest cause, not yet confirmed, is the
# reference counting of every state array a phase reads, on each of its calls.
@nb.njit(cache=True)
def simulate_cluster(inp, p, cost):
    """Run the whole trace; see the module docstring. Returns per-request and per-step arrays
    and the run totals [decode stall s, HBM bytes, KV transfer bytes, prefix re-read bytes,
    host overhead s, dropped requests], busy seconds per instance, and per request the P/D KV
    transfer's exposed seconds and decode start (NaN when colocated)."""
    prompt, out_len, arrival, blk_off, ident, tt_off = (inp.prompt, inp.out_len, inp.arrival,
                                                        inp.blk_off, inp.ident, inp.tt_off)
    assigned = inp.assigned
    n_ident = inp.num_identities
    shared_limit = inp.shared_limit
    n = prompt.shape[0]
    sched_kind = 1 if p.sglang else 0
    n_inst = p.instances
    n_pf = p.prefill_instances
    usable = p.usable_blocks
    bsz = p.block_size_tokens
    max_seqs = p.max_num_seqs
    chunked = p.chunked_prefill
    lpt = p.long_prefill_tokens
    caching = p.prefix_caching
    watermark = p.watermark_blocks
    route = p.route
    link_bw = p.link_bytes_per_s
    link_alpha = p.link_latency_s
    overlap = p.layerwise_overlap
    layers = p.layers
    pd = n_pf > 0
    kvb = cost.kv_bytes_per_token

    # --- per request state
    computed = np.zeros(n, np.int64)
    ntok = prompt.copy()
    gen = np.zeros(n, np.int64)
    nalloc = np.zeros(n, np.int64)
    nreg = np.zeros(n, np.int64)
    req_phys = np.full(blk_off[n], -1, np.int64)
    inst_of = np.full(n, -1, np.int64)
    pf_inst = np.full(n, -1, np.int64)
    sched_s = np.full(n, np.nan)
    first_s = np.full(n, np.nan)
    finish_s = np.full(n, np.nan)
    npre = np.zeros(n, np.int64)
    cached = np.zeros(n, np.int64)
    comp_total = np.zeros(n, np.int64)
    recomp = np.zeros(n, np.int64)
    c_pre = np.zeros(n, np.int64)
    remote = np.zeros(n, np.bool_)
    leaving = np.zeros(n, np.bool_)
    started = np.zeros(n, np.bool_)
    pf_start = np.full(n, np.nan)
    xfer_s = np.full(n, np.nan)  # P/D: KV transfer not hidden behind the prefill
    dec_start = np.full(n, np.nan)  # P/D: start of the first step on the decode instance
    tt = np.full(tt_off[n], np.nan)

    # --- per instance state
    total_blocks = n_inst * usable
    ref = np.zeros(total_blocks, np.int64)
    bhash = np.full(total_blocks, -1, np.int64)
    prev = np.empty(total_blocks, np.int64)
    nxt = np.empty(total_blocks, np.int64)
    head = np.empty(n_inst, np.int64)
    tail = np.empty(n_inst, np.int64)
    nfree = np.full(n_inst, usable, np.int64)
    for i in range(n_inst):
        lo = i * usable
        for b in range(lo, lo + usable):
            prev[b] = b - 1 if b > lo else -1
            nxt[b] = b + 1 if b < lo + usable - 1 else -1
        head[i] = lo
        tail[i] = lo + usable - 1
    ident_map = np.full((n_inst, n_ident), -1, np.int32)
    use_router_tree = route == _PREFIX_AFFINITY
    rtree = np.zeros((n_inst if use_router_tree else 1, shared_limit if use_router_tree else 1),
                     np.bool_)
    run = np.zeros((n_inst, max_seqs), np.int64)
    nrun = np.zeros(n_inst, np.int64)
    cap_q = n + 1
    wq = np.zeros((n_inst, cap_q), np.int64)
    whead = np.zeros(n_inst, np.int64)
    wlen = np.zeros(n_inst, np.int64)
    fl_req = np.zeros((n_inst, max_seqs), np.int64)
    fl_n = np.zeros(n_inst, np.int64)
    inst_t = np.full(n_inst, _INF)
    load = np.zeros(n_inst, np.int64)
    pend_pf = np.zeros(n_inst, np.float64)
    busy_s = np.zeros(n_inst)
    ratio = np.full(n_inst, 0.7)
    rr = np.zeros(2, np.int64)
    ratio_min = 0.7 * 0.14
    ratio_step = (0.7 - ratio_min) / 600.0

    # P/D handoff heap
    hp_t = np.empty(n + 1)
    hp_r = np.empty(n + 1, np.int64)
    hp_n = 0

    # step log
    cap_s = 1024
    s_inst = np.empty(cap_s, np.int64)
    s_start = np.empty(cap_s)
    s_end = np.empty(cap_s)
    s_pf = np.empty(cap_s, np.int64)
    s_dec = np.empty(cap_s, np.int64)
    s_run = np.empty(cap_s, np.int64)
    s_wait = np.empty(cap_s, np.int64)
    s_used = np.empty(cap_s, np.int64)
    s_pre = np.empty(cap_s, np.int64)
    n_steps = 0

    stall_dec_s = 0.0
    hbm_bytes = 0.0
    xfer_bytes = 0.0
    prefix_reread = 0.0
    overhead_total = 0.0

    dropped = 0
    next_arr = 0
    while True:
        t_a = arrival[next_arr] if next_arr < n else _INF
        t_h = hp_t[0] if hp_n > 0 else _INF
        ii = 0
        t_i = _INF
        for i in range(n_inst):
            if inst_t[i] < t_i:
                t_i = inst_t[i]
                ii = i
        if t_a == _INF and t_h == _INF and t_i == _INF:
            break
        if (t_a <= t_h and t_a <= t_i) or t_h <= t_i:
            # ---- a request reaches a router: route it and queue it
            if t_a <= t_h and t_a <= t_i:
                r = next_arr
                next_arr += 1
                lo = 0
                hi = n_pf if pd else n_inst
                now = t_a
                is_remote = False
                stage = 0
            else:
                now = hp_t[0]
                r = hp_r[0]
                hp_n = heap_pop(hp_t, hp_r, hp_n)
                lo = n_pf
                hi = n_inst
                is_remote = True
                stage = 1
            if stage == 0 and assigned[r] >= 0:
                target = assigned[r]
            else:
                target = _route(r, lo, hi, stage, is_remote, p, rr, load, rtree, ident_map,
                                pend_pf, nfree, blk_off, ident, prompt, shared_limit)
            inst_of[r] = target
            if stage == 0:
                pf_inst[r] = target
            remote[r] = is_remote
            q = (whead[target] + wlen[target]) % cap_q
            wq[target, q] = r
            wlen[target] += 1
            load[target] += 1
            if not is_remote:
                pend_pf[target] += ntok[r] - computed[r]
            if inst_t[target] == _INF:
                inst_t[target] = now
            continue

        # ---- instance ii reaches a step boundary at t_i
        i = ii
        now = t_i
        # complete the step in flight
        if fl_n[i] > 0:
            for k in range(fl_n[i]):
                r = fl_req[i, k]
                if sched_kind == 1 and caching:
                    _register(r, i, computed[r], bsz, blk_off, ident, req_phys, nreg, nalloc,
                              bhash, ident_map)
                if computed[r] < ntok[r]:
                    continue
                # the step produced a token for r
                gen[r] += 1
                tt[tt_off[r] + gen[r] - 1] = now
                if gen[r] == 1:
                    first_s[r] = now
                if gen[r] >= out_len[r] or (pd and inst_of[r] < n_pf):
                    _free_request(r, i, blk_off, req_phys, nalloc, nreg, nfree, ref, bhash,
                                  prev, nxt, head, tail)
                    load[i] -= 1
                    leaving[r] = True
                    if gen[r] >= out_len[r]:
                        finish_s[r] = now
                        if pd and inst_of[r] < n_pf:
                            xfer_bytes += prompt[r] * kvb
                    else:
                        ntok[r] += 1
                        # P/D: ship the prompt's KV to a decode instance
                        nbytes = prompt[r] * kvb
                        xfer_bytes += nbytes
                        if overlap:
                            ready = max(now + link_alpha + nbytes / (layers * link_bw),
                                        pf_start[r] + link_alpha + nbytes / link_bw)
                        else:
                            ready = now + link_alpha + nbytes / link_bw
                        xfer_s[r] = ready - now
                        hp_n = heap_push(hp_t, hp_r, hp_n, ready, r)
                else:
                    ntok[r] += 1
            # compact the running list
            m = 0
            for k in range(nrun[i]):
                r = run[i, k]
                if not leaving[r]:
                    run[i, m] = r
                    m += 1
                else:
                    leaving[r] = False
                    computed[r] = 0
            nrun[i] = m
            fl_n[i] = 0

        # schedule the next step
        in_system = nrun[i] + wlen[i]
        if sched_kind == 0:
            # vLLM v1: running requests first, in order, then waiting FCFS
            (n_sched, preempted_n, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all,
             budget) = _schedule_running_vllm(
                i, in_system, p, run, nrun, ntok, computed, gen, comp_total, pend_pf, fl_req,
                remote, blk_off, ident, req_phys, nalloc, nreg, nfree, ref, bhash, ident_map, prev,
                nxt, head, tail, c_pre, npre, wq, whead, wlen)
        else:
            # SGLang: continue chunked prefills, then admit; decode only without prefill work
            n_sched, pf_tok, attn_pairs, prefix_sum, ctx_all, budget = _schedule_running_sglang(
                i, p, run, nrun, ntok, computed, gen, comp_total, pend_pf, fl_req, blk_off,
                req_phys, nalloc, nfree, ref, bhash, ident_map, prev, nxt, head, tail)
            preempted_n = 0
            dec_tok = 0
            ctx_dec = 0.0

        # admit waiting requests (vLLM: only when nothing was preempted this step)
        if preempted_n == 0:
            while wlen[i] > 0 and budget > 0 and nrun[i] < max_seqs:
                r = wq[i, whead[i]]
                if remote[r]:
                    hit = 0
                    evict = 0
                    hit_tok = ntok[r] - 1
                else:
                    hit = 0
                    evict = 0
                    if caching:
                        hit, evict = _lookup(r, i, ntok[r], bsz, blk_off, ident, ident_map, ref)
                    hit_tok = hit * bsz
                nn = ntok[r] - hit_tok
                if not chunked and nn > budget:
                    break
                if chunked:
                    if lpt > 0 and in_system > 1 and nn > lpt:
                        nn = lpt
                    if nn > budget:
                        nn = budget
                need = (ntok[r] + bsz - 1) // bsz - hit + evict
                free_ok = nfree[i] - (watermark if nrun[i] > 0 else 0)
                if sched_kind == 1 and nrun[i] > 0:
                    reserve = 0.0
                    for k in range(nrun[i]):
                        v = run[i, k]
                        left = out_len[v] - gen[v]
                        reserve += min(left, 4096) * ratio[i]
                    reserve += min(out_len[r] - gen[r], 4096) * ratio[i]
                    need += int((reserve + bsz - 1) // bsz)
                if need > free_ok:
                    break  # head-of-line blocking
                if hit > 0:
                    _touch(r, i, hit, blk_off, ident, ident_map, req_phys, nalloc, nreg, nfree,
                           ref, prev, nxt, head, tail)
                # SGLang reserves the whole sequence at admission (its chunk budget does)
                _alloc(r, i, hit_tok + nn if sched_kind == 0 else ntok[r], bsz, blk_off,
                       req_phys, nalloc, nfree, ref, bhash, ident_map, prev, nxt, head, tail)
                if caching and (sched_kind == 0 or remote[r]):
                    _register(r, i, hit_tok + nn, bsz, blk_off, ident, req_phys, nreg, nalloc,
                              bhash, ident_map)
                whead[i] = (whead[i] + 1) % cap_q
                wlen[i] -= 1
                run[i, nrun[i]] = r
                nrun[i] += 1
                if not remote[r]:
                    if not started[r]:
                        started[r] = True
                        sched_s[r] = now
                        cached[r] = hit_tok
                    else:
                        over = c_pre[r] - hit_tok
                        if over > 0:
                            recomp[r] += over
                    pend_pf[i] -= hit_tok
                if pd and inst_of[r] < n_pf and pf_start[r] != pf_start[r]:
                    pf_start[r] = now
                if remote[r]:
                    remote[r] = False
                    dec_start[r] = now
                    dec_tok += 1
                    ctx_dec += ntok[r]
                else:
                    pf_tok += nn
                    attn_pairs += nn * (hit_tok + nn / 2.0)
                    prefix_sum += hit_tok
                    pend_pf[i] -= nn
                ctx_all += hit_tok + nn
                computed[r] = hit_tok + nn
                comp_total[r] += nn
                budget -= nn
                fl_req[i, n_sched] = r
                n_sched += 1

        if sched_kind == 1 and pf_tok == 0 and nrun[i] > 0:
            # SGLang decode step (no prefill work; KV arriving from a prefill instance only adds
            # decodes): every decoding request advances one token; retract on OOM
            while True:
                need = 0
                decoding = 0
                worst = -1
                for k in range(nrun[i]):
                    r = run[i, k]
                    if computed[r] == ntok[r] - 1:
                        need += (computed[r] + 1 + bsz - 1) // bsz - nalloc[r]
                        decoding += 1
                        if worst < 0:
                            worst = k
                        else:
                            b = run[i, worst]
                            if gen[r] < gen[b] or (gen[r] == gen[b] and prompt[r] > prompt[b]):
                                worst = k
                if need <= nfree[i] or decoding <= 1:
                    break
                v = run[i, worst]
                for k in range(worst, nrun[i] - 1):
                    run[i, k] = run[i, k + 1]
                nrun[i] -= 1
                _preempt(v, i, blk_off, req_phys, nalloc, nreg, nfree, ref, bhash, prev, nxt,
                         head, tail, computed, c_pre, npre, pend_pf, wq, whead, wlen)
                preempted_n += 1
                ratio[i] = 0.7
            for k in range(nrun[i]):
                r = run[i, k]
                if computed[r] != ntok[r] - 1:
                    continue
                if not _alloc(r, i, computed[r] + 1, bsz, blk_off, req_phys, nalloc, nfree, ref,
                              bhash, ident_map, prev, nxt, head, tail):
                    continue
                cb = computed[r]
                dec_tok += 1
                ctx_dec += cb + 1
                ctx_all += cb + 1
                computed[r] = cb + 1
                comp_total[r] += 1
                fl_req[i, n_sched] = r
                n_sched += 1
            ratio[i] = max(ratio_min, ratio[i] - ratio_step)

        if n_sched == 0:
            inst_t[i] = _INF
            if wlen[i] > 0:
                if nrun[i] == 0 and preempted_n == 0:
                    # nothing runs and the head cannot be admitted into an empty pool: drop it
                    r = wq[i, whead[i]]
                    whead[i] = (whead[i] + 1) % cap_q
                    wlen[i] -= 1
                    load[i] -= 1
                    dropped += 1
                inst_t[i] = now
            continue
        fl_n[i] = n_sched
        t_step, nbytes = step_time(cost, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum,
                                   ctx_all)
        if pf_tok > 0 and dec_tok > 0:
            t_dec, _ = step_time(cost, 0, dec_tok, 0.0, ctx_dec, 0.0,
                                 ctx_dec)
            stall_dec_s += (t_step - t_dec) * dec_tok
        hbm_bytes += nbytes
        prefix_reread += prefix_sum * kvb
        overhead_total += (cost.overhead_s if not cost.calibrated else 0.0) + cost.host_gap_s
        busy_s[i] += t_step
        end = now + t_step
        # non-overlapped host work: the GPU idles after the step until the host is done
        inst_t[i] = end + cost.host_gap_s
        if n_steps == s_inst.shape[0]:
            s_inst = _grow_f(s_inst)
            s_start = _grow_f(s_start)
            s_end = _grow_f(s_end)
            s_pf = _grow_f(s_pf)
            s_dec = _grow_f(s_dec)
            s_run = _grow_f(s_run)
            s_wait = _grow_f(s_wait)
            s_used = _grow_f(s_used)
            s_pre = _grow_f(s_pre)
        s_inst[n_steps] = i
        s_start[n_steps] = now
        s_end[n_steps] = end
        s_pf[n_steps] = pf_tok
        s_dec[n_steps] = dec_tok
        s_run[n_steps] = nrun[i]
        s_wait[n_steps] = wlen[i]
        s_used[n_steps] = usable - nfree[i]
        s_pre[n_steps] = preempted_n
        n_steps += 1

    return (
        sched_s, first_s, finish_s, tt, npre, cached, comp_total, recomp, inst_of, pf_inst,
        s_inst[:n_steps], s_start[:n_steps], s_end[:n_steps], s_pf[:n_steps], s_dec[:n_steps],
        s_run[:n_steps], s_wait[:n_steps], s_used[:n_steps], s_pre[:n_steps],
        np.array([stall_dec_s, hbm_bytes, xfer_bytes, prefix_reread, overhead_total, dropped]),
        busy_s, xfer_s, dec_start,
    )
