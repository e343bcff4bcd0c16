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

A step boundary runs the phases in order: complete the step in flight (tokens out, finished
requests freed, P/D handoffs shipped), schedule the running requests under the token budget
(vLLM preempts to make room), admit waiting requests (prefix match and KV allocation), SGLang's
decode-only step (retracting on OOM), then price the step and log it. Each phase is a compiled
helper; the state they share travels in NamedTuples of arrays (`Inputs`, `RequestState`,
`KvPool`, `Queues`, `Handoffs`, `StepLog`), the configuration in `EngineParams` and
`StepCostParams` (`sim.engine_params`).

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
# SGLang's new-token ratio: the share of each request's remaining output reserved at admission,
# reset on a retraction and decayed step by step to its floor.
_RATIO_START = 0.7
_RATIO_MIN = 0.7 * 0.14
_RATIO_STEP = (0.7 - _RATIO_MIN) / 600.0
_RESERVE_CAP_TOKENS = 4096
# One step's tally: integer slots (`ti`) and float slots (`tf`).
_PREFILL, _DECODE, _SCHEDULED, _PREEMPTED, _BUDGET = range(5)
_ATTN_PAIRS, _CTX_DECODE, _PREFIX_SUM, _CTX_ALL = range(4)
# Run totals, in the order `simulate_cluster` returns them.
_STALL_S, _HBM_BYTES, _XFER_BYTES, _REREAD_BYTES, _OVERHEAD_S, _DROPPED = range(6)


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


class RequestState(NamedTuple):
    """Per-request progress and the timing columns being filled."""

    computed: np.ndarray
    ntok: np.ndarray
    gen: np.ndarray
    nalloc: np.ndarray
    nreg: np.ndarray
    req_phys: np.ndarray
    inst_of: np.ndarray
    pf_inst: np.ndarray
    sched_s: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    npre: np.ndarray
    cached: np.ndarray
    comp_total: np.ndarray
    recomp: np.ndarray
    c_pre: np.ndarray
    remote: np.ndarray
    leaving: np.ndarray
    started: np.ndarray
    pf_start: np.ndarray
    tt: np.ndarray


class KvPool(NamedTuple):
    """Every instance's blocks: reference counts, cache entries, free queues."""

    ref: np.ndarray
    bhash: np.ndarray
    prev: np.ndarray
    nxt: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    nfree: np.ndarray
    ident_map: np.ndarray


class Queues(NamedTuple):
    """Per-instance running and waiting lists, the step in flight, and the router's view."""

    run: np.ndarray
    nrun: np.ndarray
    wq: np.ndarray
    whead: np.ndarray
    wlen: np.ndarray
    fl_req: np.ndarray
    fl_n: np.ndarray
    inst_t: np.ndarray
    load: np.ndarray
    pend_pf: np.ndarray
    busy_s: np.ndarray
    ratio: np.ndarray
    rtree: np.ndarray
    rr: np.ndarray


class Handoffs(NamedTuple):
    """P/D: KV transfers in flight, a min-heap on their arrival time (`size[0]` entries)."""

    t: np.ndarray
    r: np.ndarray
    size: np.ndarray


class StepLog(NamedTuple):
    """One row per simulated step, grown by doubling."""

    instance: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    prefill: np.ndarray
    decode: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    used: np.ndarray
    preempted: np.ndarray


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


# ---- KV pool: allocation, release, preemption, prefix cache


@nb.njit(cache=True)
def _alloc(r, inst, tokens, bsz, inp, st, pool):
    """Give request r blocks for `tokens` tokens; False (nothing taken) when too few are free."""
    need = (tokens + bsz - 1) // bsz - st.nalloc[r]
    if need <= 0:
        return True
    if need > pool.nfree[inst]:
        return False
    base = inp.blk_off[r]
    for _ in range(need):
        b = pool.head[inst]
        unlink(b, inst, pool.prev, pool.nxt, pool.head, pool.tail)
        h = pool.bhash[b]
        if h >= 0:
            pool.ident_map[inst, h] = -1
            pool.bhash[b] = -1
        pool.ref[b] = 1
        st.req_phys[base + st.nalloc[r]] = b
        st.nalloc[r] += 1
    pool.nfree[inst] -= need
    return True


@nb.njit(cache=True)
def _free_request(r, inst, inp, st, pool):
    """Release r's blocks tail first: cached ones to the LRU tail, hashless ones to the head."""
    base = inp.blk_off[r]
    for k in range(st.nalloc[r] - 1, -1, -1):
        b = st.req_phys[base + k]
        pool.ref[b] -= 1
        if pool.ref[b] == 0:
            if pool.bhash[b] >= 0:
                append(b, inst, pool.prev, pool.nxt, pool.head, pool.tail)
            else:
                prepend(b, inst, pool.prev, pool.nxt, pool.head, pool.tail)
            pool.nfree[inst] += 1
    st.nalloc[r] = 0
    st.nreg[r] = 0


@nb.njit(cache=True)
def _preempt(r, inst, inp, st, pool, q):
    """Free running r and queue it first again: it recomputes what it had (less any hits)."""
    _free_request(r, inst, inp, st, pool)
    q.pend_pf[inst] += st.computed[r]
    st.c_pre[r] = st.computed[r]
    st.computed[r] = 0
    st.npre[r] += 1
    cap_q = q.wq.shape[1]
    q.whead[inst] = (q.whead[inst] - 1 + cap_q) % cap_q
    q.wq[inst, q.whead[inst]] = r
    q.wlen[inst] += 1


@nb.njit(cache=True)
def _register(r, inst, tokens, bsz, inp, st, pool):
    """Publish r's full blocks up to `tokens` as cache entries (the first copy of an id wins)."""
    full = tokens // bsz
    if full > st.nalloc[r]:
        full = st.nalloc[r]
    base = inp.blk_off[r]
    for k in range(st.nreg[r], full):
        idn = inp.ident[base + k]
        b = st.req_phys[base + k]
        if pool.ident_map[inst, idn] < 0 and pool.bhash[b] < 0:
            pool.ident_map[inst, idn] = b
            pool.bhash[b] = idn
    if full > st.nreg[r]:
        st.nreg[r] = full


@nb.njit(cache=True)
def _lookup(r, inst, num_tokens, bsz, inp, pool):
    """(hit blocks, hit blocks now free) of r's longest cached prefix, last-token rule applied."""
    cap = (num_tokens - 1) // bsz
    avail = inp.blk_off[r + 1] - inp.blk_off[r]
    if cap > avail:
        cap = avail
    base = inp.blk_off[r]
    h = 0
    evictable = 0
    while h < cap:
        b = pool.ident_map[inst, inp.ident[base + h]]
        if b < 0:
            break
        if pool.ref[b] == 0:
            evictable += 1
        h += 1
    return h, evictable


@nb.njit(cache=True)
def _touch(r, inst, hit, inp, st, pool):
    """Take r's `hit` cached prefix blocks (out of the free queue when nobody holds them)."""
    base = inp.blk_off[r]
    for k in range(hit):
        b = pool.ident_map[inst, inp.ident[base + k]]
        if pool.ref[b] == 0:
            unlink(b, inst, pool.prev, pool.nxt, pool.head, pool.tail)
            pool.nfree[inst] -= 1
        pool.ref[b] += 1
        st.req_phys[base + k] = b
    st.nalloc[r] = hit
    st.nreg[r] = hit


# ---- state


@nb.njit(cache=True)
def _request_state(inp):
    n = inp.prompt.shape[0]
    return RequestState(
        computed=np.zeros(n, np.int64), ntok=inp.prompt.copy(), gen=np.zeros(n, np.int64),
        nalloc=np.zeros(n, np.int64), nreg=np.zeros(n, np.int64),
        req_phys=np.full(inp.blk_off[n], -1, np.int64), inst_of=np.full(n, -1, np.int64),
        pf_inst=np.full(n, -1, np.int64), sched_s=np.full(n, np.nan),
        first_s=np.full(n, np.nan), finish_s=np.full(n, np.nan), npre=np.zeros(n, np.int64),
        cached=np.zeros(n, np.int64), comp_total=np.zeros(n, np.int64),
        recomp=np.zeros(n, np.int64), c_pre=np.zeros(n, np.int64),
        remote=np.zeros(n, np.bool_), leaving=np.zeros(n, np.bool_),
        started=np.zeros(n, np.bool_), pf_start=np.full(n, np.nan),
        tt=np.full(inp.tt_off[n], np.nan),
    )


@nb.njit(cache=True)
def _kv_pool(n_inst, usable, n_ident):
    """Every block free, each instance's free queue in block order, nothing cached."""
    total_blocks = n_inst * usable
    prev = np.empty(total_blocks, np.int64)
    nxt = np.empty(total_blocks, np.int64)
    head = np.empty(n_inst, np.int64)
    tail = np.empty(n_inst, np.int64)
    for i in range(n_inst):
        lo = i * usable
        for b in range(lo, lo + usable):
            prev[b] = b - 1 if b > lo else -1
            nxt[b] = b + 1 if b < lo + usable - 1 else -1
        head[i] = lo
        tail[i] = lo + usable - 1
    return KvPool(ref=np.zeros(total_blocks, np.int64), bhash=np.full(total_blocks, -1, np.int64),
                  prev=prev, nxt=nxt, head=head, tail=tail,
                  nfree=np.full(n_inst, usable, np.int64),
                  ident_map=np.full((n_inst, n_ident), -1, np.int32))


@nb.njit(cache=True)
def _queues(p, n, shared_limit):
    n_inst = p.instances
    tree = p.route == _PREFIX_AFFINITY  # only sgl-router keeps its own prefix tree
    return Queues(
        run=np.zeros((n_inst, p.max_num_seqs), np.int64), nrun=np.zeros(n_inst, np.int64),
        wq=np.zeros((n_inst, n + 1), np.int64), whead=np.zeros(n_inst, np.int64),
        wlen=np.zeros(n_inst, np.int64), fl_req=np.zeros((n_inst, p.max_num_seqs), np.int64),
        fl_n=np.zeros(n_inst, np.int64), inst_t=np.full(n_inst, _INF),
        load=np.zeros(n_inst, np.int64), pend_pf=np.zeros(n_inst, np.float64),
        busy_s=np.zeros(n_inst), ratio=np.full(n_inst, _RATIO_START),
        rtree=np.zeros((n_inst if tree else 1, shared_limit if tree else 1), np.bool_),
        rr=np.zeros(2, np.int64),
    )


@nb.njit(cache=True)
def _step_log(cap):
    return StepLog(instance=np.empty(cap, np.int64), start_s=np.empty(cap),
                   end_s=np.empty(cap), prefill=np.empty(cap, np.int64),
                   decode=np.empty(cap, np.int64), running=np.empty(cap, np.int64),
                   waiting=np.empty(cap, np.int64), used=np.empty(cap, np.int64),
                   preempted=np.empty(cap, np.int64))


@nb.njit(cache=True)
def _grow(a):
    out = np.empty(a.shape[0] * 2, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@nb.njit(cache=True)
def _record_step(log, k, inst, start_s, end_s, prefill, decode, running, waiting, used,
                 preempted):
    """Write step row k (doubling the log when full); returns the log."""
    if k == log.start_s.shape[0]:
        log = StepLog(instance=_grow(log.instance), start_s=_grow(log.start_s),
                      end_s=_grow(log.end_s), prefill=_grow(log.prefill),
                      decode=_grow(log.decode), running=_grow(log.running),
                      waiting=_grow(log.waiting), used=_grow(log.used),
                      preempted=_grow(log.preempted))
    log.instance[k] = inst
    log.start_s[k] = start_s
    log.end_s[k] = end_s
    log.prefill[k] = prefill
    log.decode[k] = decode
    log.running[k] = running
    log.waiting[k] = waiting
    log.used[k] = used
    log.preempted[k] = preempted
    return log


# ---- routing: a request reaches a router (arrival, or its KV reaching the decode pool)


@nb.njit(cache=True)
def _route_prefix_affinity(r, lo, hi, p, inp, q):
    """sgl-router cache_aware: imbalance → least load, else the best match over the router's
    own tree if its match rate exceeds the threshold; the tree then learns r's blocks."""
    load = q.load
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
    base = inp.blk_off[r]
    nblocks = inp.blk_off[r + 1] - base
    if not (mx - mn > p.balance_abs_threshold and mx > p.balance_rel_threshold * mn):
        best_m = -1
        best_i = least
        for i in range(lo, hi):
            m = 0
            while m < nblocks and inp.ident[base + m] < inp.shared_limit and q.rtree[
                    i, inp.ident[base + m]]:
                m += 1
            if m > best_m:
                best_m = m
                best_i = i
        if inp.prompt[r] > 0 and best_m * p.block_size_tokens / inp.prompt[r] > \
                p.affinity_threshold:
            target = best_i
    for m in range(nblocks):
        idn = inp.ident[base + m]
        if idn < inp.shared_limit:
            q.rtree[target, idn] = True
    return target


@nb.njit(cache=True)
def _route_kv_aware(r, lo, hi, is_remote, p, inp, pool, q):
    """Dynamo: the least prefill blocks after overlap credit + active decode blocks."""
    bsz = p.block_size_tokens
    target = lo
    best_l = _INF
    base = inp.blk_off[r]
    cap = (inp.prompt[r] - 1) // bsz
    for i in range(lo, hi):
        ov = 0
        if p.prefix_caching and not is_remote:
            while ov < cap and pool.ident_map[i, inp.ident[base + ov]] >= 0:
                ov += 1
        pf_blocks = (q.pend_pf[i] + inp.prompt[r]) / bsz - ov
        if pf_blocks < 0.0:
            pf_blocks = 0.0
        logit = pf_blocks + (p.usable_blocks - pool.nfree[i])
        if logit < best_l:
            best_l = logit
            target = i
    return target


@nb.njit(cache=True)
def _route(r, lo, hi, stage, is_remote, p, inp, pool, q):
    """The instance in [lo, hi) that request r goes to under the route policy."""
    span = hi - lo
    if span <= 1:
        return lo
    if p.route == _ROUND_ROBIN:
        target = lo + q.rr[stage] % span
        q.rr[stage] += 1
        return target
    if p.route == _LEAST_LOADED:
        target = lo
        best = q.load[lo]
        for i in range(lo + 1, hi):
            if q.load[i] < best:
                best = q.load[i]
                target = i
        return target
    if p.route == _PREFIX_AFFINITY:
        return _route_prefix_affinity(r, lo, hi, p, inp, q)
    return _route_kv_aware(r, lo, hi, is_remote, p, inp, pool, q)


@nb.njit(cache=True)
def _enqueue(r, target, now, stage, is_remote, st, q):
    """Queue r last at `target`, waking the instance if it idles."""
    st.inst_of[r] = target
    if stage == 0:
        st.pf_inst[r] = target
    st.remote[r] = is_remote
    slot = (q.whead[target] + q.wlen[target]) % q.wq.shape[1]
    q.wq[target, slot] = r
    q.wlen[target] += 1
    q.load[target] += 1
    if not is_remote:
        q.pend_pf[target] += st.ntok[r] - st.computed[r]
    if q.inst_t[target] == _INF:
        q.inst_t[target] = now


# ---- completing the step in flight


@nb.njit(cache=True)
def _ship_kv(r, now, p, kvb, inp, st, hand, totals):
    """P/D: send r's prompt KV to the decode pool (α + bytes / bandwidth, maybe layer-wise)."""
    nbytes = inp.prompt[r] * kvb
    totals[_XFER_BYTES] += nbytes
    if p.layerwise_overlap:
        ready = max(now + p.link_latency_s + nbytes / (p.layers * p.link_bytes_per_s),
                    st.pf_start[r] + p.link_latency_s + nbytes / p.link_bytes_per_s)
    else:
        ready = now + p.link_latency_s + nbytes / p.link_bytes_per_s
    hand.size[0] = heap_push(hand.t, hand.r, hand.size[0], ready, r)


@nb.njit(cache=True)
def _complete_step(i, now, p, kvb, inp, st, pool, q, hand, totals):
    """Tokens of the step in flight come out; finished requests (and, under P/D, prefilled
    ones) leave instance i, and the running list closes up behind them."""
    bsz = p.block_size_tokens
    n_pf = p.prefill_instances
    pd = n_pf > 0
    for k in range(q.fl_n[i]):
        r = q.fl_req[i, k]
        if p.sglang and p.prefix_caching:
            _register(r, i, st.computed[r], bsz, inp, st, pool)
        if st.computed[r] < st.ntok[r]:
            continue
        # the step produced a token for r
        st.gen[r] += 1
        st.tt[inp.tt_off[r] + st.gen[r] - 1] = now
        if st.gen[r] == 1:
            st.first_s[r] = now
        if st.gen[r] >= inp.out_len[r] or (pd and st.inst_of[r] < n_pf):
            _free_request(r, i, inp, st, pool)
            q.load[i] -= 1
            st.leaving[r] = True
            if st.gen[r] >= inp.out_len[r]:
                st.finish_s[r] = now
                if pd and st.inst_of[r] < n_pf:
                    totals[_XFER_BYTES] += inp.prompt[r] * kvb
            else:
                st.ntok[r] += 1
                _ship_kv(r, now, p, kvb, inp, st, hand, totals)
        else:
            st.ntok[r] += 1
    m = 0
    for k in range(q.nrun[i]):
        r = q.run[i, k]
        if not st.leaving[r]:
            q.run[i, m] = r
            m += 1
        else:
            st.leaving[r] = False
            st.computed[r] = 0
    q.nrun[i] = m
    q.fl_n[i] = 0


# ---- scheduling the next step under the token budget


@nb.njit(cache=True)
def _schedule(r, i, nn, q, ti):
    """Put r in the step, spending nn tokens of its budget."""
    ti[_BUDGET] -= nn
    q.fl_req[i, ti[_SCHEDULED]] = r
    ti[_SCHEDULED] += 1


@nb.njit(cache=True)
def _take_prefill(r, i, cb, nn, q, ti, tf):
    """nn prompt (or recomputed) tokens of r after the cb it has, attention over both."""
    ti[_PREFILL] += nn
    tf[_ATTN_PAIRS] += nn * (cb + nn / 2.0)
    tf[_PREFIX_SUM] += cb
    q.pend_pf[i] -= nn
    tf[_CTX_ALL] += cb + nn
    _schedule(r, i, nn, q, ti)


@nb.njit(cache=True)
def _take_decode(r, i, ctx, nn, q, ti, tf):
    """One decode of r over `ctx` tokens of context (nn: the tokens it counts for)."""
    ti[_DECODE] += 1
    tf[_CTX_DECODE] += ctx
    tf[_CTX_ALL] += ctx
    _schedule(r, i, nn, q, ti)


@nb.njit(cache=True)
def _make_room(r, i, tokens, bsz, inp, st, pool, q, ti):
    """vLLM: preempt running[-1] until r's blocks fit; False when r itself was preempted."""
    while not _alloc(r, i, tokens, bsz, inp, st, pool):
        v = q.run[i, q.nrun[i] - 1]
        q.nrun[i] -= 1
        _preempt(v, i, inp, st, pool, q)
        st.remote[v] = False
        ti[_PREEMPTED] += 1
        if v == r:
            return False
    return True


@nb.njit(cache=True)
def _schedule_running_vllm(i, in_system, p, inp, st, pool, q, ti, tf):
    """vLLM v1: running requests first, in order, each up to the budget left."""
    bsz = p.block_size_tokens
    lpt = p.long_prefill_tokens
    idx = 0
    while idx < q.nrun[i] and ti[_BUDGET] > 0:
        r = q.run[i, idx]
        nn = st.ntok[r] - st.computed[r]
        if lpt > 0 and in_system > 1 and nn > lpt:
            nn = lpt
        if nn > ti[_BUDGET]:
            nn = ti[_BUDGET]
        if not _make_room(r, i, st.computed[r] + nn, bsz, inp, st, pool, q, ti):
            break
        if p.prefix_caching:
            _register(r, i, st.computed[r] + nn, bsz, inp, st, pool)
        cb = st.computed[r]
        if st.gen[r] >= 1 and cb == st.ntok[r] - 1 and nn == 1:
            _take_decode(r, i, cb + 1, nn, q, ti, tf)
        else:
            _take_prefill(r, i, cb, nn, q, ti, tf)
        st.computed[r] = cb + nn
        st.comp_total[r] += nn
        idx += 1


@nb.njit(cache=True)
def _schedule_running_sglang(i, p, inp, st, pool, q, ti, tf):
    """SGLang: continue the chunked prefills of running requests (decodes wait)."""
    bsz = p.block_size_tokens
    for idx in range(q.nrun[i]):
        if ti[_BUDGET] <= 0:
            break
        r = q.run[i, idx]
        if st.gen[r] >= 1 and st.computed[r] == st.ntok[r] - 1:
            continue
        nn = st.ntok[r] - st.computed[r]
        if nn > ti[_BUDGET]:
            nn = ti[_BUDGET]
        if not _alloc(r, i, st.computed[r] + nn, bsz, inp, st, pool):
            continue
        cb = st.computed[r]
        _take_prefill(r, i, cb, nn, q, ti, tf)
        st.computed[r] = cb + nn
        st.comp_total[r] += nn


# ---- admission: prefix match, KV allocation, first schedule


@nb.njit(cache=True)
def _fits(r, i, hit, evict, p, inp, st, pool, q):
    """Whether waiting r's blocks (less hits, plus SGLang's reserve for the outputs of every
    running request) fit the free blocks above the watermark."""
    bsz = p.block_size_tokens
    need = (st.ntok[r] + bsz - 1) // bsz - hit + evict
    free_ok = pool.nfree[i] - (p.watermark_blocks if q.nrun[i] > 0 else 0)
    if p.sglang and q.nrun[i] > 0:
        reserve = 0.0
        for k in range(q.nrun[i]):
            v = q.run[i, k]
            left = inp.out_len[v] - st.gen[v]
            reserve += min(left, _RESERVE_CAP_TOKENS) * q.ratio[i]
        reserve += min(inp.out_len[r] - st.gen[r], _RESERVE_CAP_TOKENS) * q.ratio[i]
        need += int((reserve + bsz - 1) // bsz)
    return need <= free_ok


@nb.njit(cache=True)
def _admit(r, i, now, hit, hit_tok, nn, p, inp, st, pool, q):
    """Move waiting r to the running list with its hit blocks and new blocks."""
    bsz = p.block_size_tokens
    if hit > 0:
        _touch(r, i, hit, inp, st, pool)
    # SGLang reserves the whole sequence at admission (its chunk budget does)
    _alloc(r, i, hit_tok + nn if not p.sglang else st.ntok[r], bsz, inp, st, pool)
    if p.prefix_caching and (not p.sglang or st.remote[r]):
        _register(r, i, hit_tok + nn, bsz, inp, st, pool)
    q.whead[i] = (q.whead[i] + 1) % q.wq.shape[1]
    q.wlen[i] -= 1
    q.run[i, q.nrun[i]] = r
    q.nrun[i] += 1
    if not st.remote[r]:
        if not st.started[r]:
            st.started[r] = True
            st.sched_s[r] = now
            st.cached[r] = hit_tok
        else:
            over = st.c_pre[r] - hit_tok
            if over > 0:
                st.recomp[r] += over
        q.pend_pf[i] -= hit_tok
    if p.prefill_instances > 0 and st.inst_of[r] < p.prefill_instances and \
            st.pf_start[r] != st.pf_start[r]:
        st.pf_start[r] = now


@nb.njit(cache=True)
def _admit_waiting(i, now, in_system, p, inp, st, pool, q, ti, tf):
    """Admit waiting requests FCFS while budget, seats and blocks last (head-of-line blocking)."""
    bsz = p.block_size_tokens
    lpt = p.long_prefill_tokens
    while q.wlen[i] > 0 and ti[_BUDGET] > 0 and q.nrun[i] < p.max_num_seqs:
        r = q.wq[i, q.whead[i]]
        hit = 0
        evict = 0
        if st.remote[r]:
            hit_tok = st.ntok[r] - 1
        else:
            if p.prefix_caching:
                hit, evict = _lookup(r, i, st.ntok[r], bsz, inp, pool)
            hit_tok = hit * bsz
        nn = st.ntok[r] - hit_tok
        if not p.chunked_prefill and nn > ti[_BUDGET]:
            break
        if p.chunked_prefill:
            if lpt > 0 and in_system > 1 and nn > lpt:
                nn = lpt
            if nn > ti[_BUDGET]:
                nn = ti[_BUDGET]
        if not _fits(r, i, hit, evict, p, inp, st, pool, q):
            break  # head-of-line blocking
        _admit(r, i, now, hit, hit_tok, nn, p, inp, st, pool, q)
        if st.remote[r]:
            # its KV came from a prefill instance: the next token is a decode
            st.remote[r] = False
            _take_decode(r, i, st.ntok[r], nn, q, ti, tf)
        else:
            _take_prefill(r, i, hit_tok, nn, q, ti, tf)
        st.computed[r] = hit_tok + nn
        st.comp_total[r] += nn


# ---- SGLang's decode step


@nb.njit(cache=True)
def _retract_for_decode(i, p, inp, st, pool, q, ti):
    """SGLang: retract the decoding request with the fewest outputs (longest prompt on ties)
    until every decode's next block fits, keeping at least one."""
    bsz = p.block_size_tokens
    while True:
        need = 0
        decoding = 0
        worst = -1
        for k in range(q.nrun[i]):
            r = q.run[i, k]
            if st.computed[r] == st.ntok[r] - 1:
                need += (st.computed[r] + 1 + bsz - 1) // bsz - st.nalloc[r]
                decoding += 1
                if worst < 0:
                    worst = k
                else:
                    b = q.run[i, worst]
                    if st.gen[r] < st.gen[b] or (st.gen[r] == st.gen[b]
                                                 and inp.prompt[r] > inp.prompt[b]):
                        worst = k
        if need <= pool.nfree[i] or decoding <= 1:
            return
        v = q.run[i, worst]
        for k in range(worst, q.nrun[i] - 1):
            q.run[i, k] = q.run[i, k + 1]
        q.nrun[i] -= 1
        _preempt(v, i, inp, st, pool, q)
        ti[_PREEMPTED] += 1
        q.ratio[i] = _RATIO_START


@nb.njit(cache=True)
def _sglang_decode_step(i, p, inp, st, pool, q, ti, tf):
    """A step without prefill work: every decoding request advances one token (KV arriving
    from a prefill instance only adds decodes)."""
    _retract_for_decode(i, p, inp, st, pool, q, ti)
    for k in range(q.nrun[i]):
        r = q.run[i, k]
        if st.computed[r] != st.ntok[r] - 1:
            continue
        if not _alloc(r, i, st.computed[r] + 1, p.block_size_tokens, inp, st, pool):
            continue
        cb = st.computed[r]
        ti[_DECODE] += 1
        tf[_CTX_DECODE] += cb + 1
        tf[_CTX_ALL] += cb + 1
        st.computed[r] = cb + 1
        st.comp_total[r] += 1
        q.fl_req[i, ti[_SCHEDULED]] = r
        ti[_SCHEDULED] += 1
    q.ratio[i] = max(_RATIO_MIN, q.ratio[i] - _RATIO_STEP)


@nb.njit(cache=True)
def _schedule_step(i, now, p, inp, st, pool, q, ti, tf):
    """Fill the tally of instance i's next step; returns the requests scheduled."""
    ti[:] = 0
    ti[_BUDGET] = p.token_budget
    tf[:] = 0.0
    in_system = q.nrun[i] + q.wlen[i]
    if not p.sglang:
        _schedule_running_vllm(i, in_system, p, inp, st, pool, q, ti, tf)
    else:
        _schedule_running_sglang(i, p, inp, st, pool, q, ti, tf)
    # vLLM admits only when nothing was preempted this step
    if ti[_PREEMPTED] == 0:
        _admit_waiting(i, now, in_system, p, inp, st, pool, q, ti, tf)
    if p.sglang and ti[_PREFILL] == 0 and q.nrun[i] > 0:
        _sglang_decode_step(i, p, inp, st, pool, q, ti, tf)
    return ti[_SCHEDULED]


# ---- pricing the step, bookkeeping


@nb.njit(cache=True)
def _idle(i, now, q, ti, totals):
    """Nothing was scheduled: sleep until an event, or drop a head that can never fit."""
    q.inst_t[i] = _INF
    if q.wlen[i] > 0:
        if q.nrun[i] == 0 and ti[_PREEMPTED] == 0:
            # nothing runs and the head cannot be admitted into an empty pool: drop it
            q.whead[i] = (q.whead[i] + 1) % q.wq.shape[1]
            q.wlen[i] -= 1
            q.load[i] -= 1
            totals[_DROPPED] += 1
        q.inst_t[i] = now


@nb.njit(cache=True)
def _price_step(i, now, cost, q, ti, tf, totals):
    """Time the step (and the decode stall it causes), add its work; returns its end."""
    q.fl_n[i] = ti[_SCHEDULED]
    pf_tok = ti[_PREFILL]
    dec_tok = ti[_DECODE]
    ctx_dec = tf[_CTX_DECODE]
    t_step, nbytes = step_time(cost, pf_tok, dec_tok, tf[_ATTN_PAIRS], ctx_dec, tf[_PREFIX_SUM],
                               tf[_CTX_ALL])
    if pf_tok > 0 and dec_tok > 0:
        t_dec, _ = step_time(cost, 0, dec_tok, 0.0, ctx_dec, 0.0, ctx_dec)
        totals[_STALL_S] += (t_step - t_dec) * dec_tok
    totals[_HBM_BYTES] += nbytes
    totals[_REREAD_BYTES] += tf[_PREFIX_SUM] * cost.kv_bytes_per_token
    totals[_OVERHEAD_S] += (cost.overhead_s if not cost.calibrated else 0.0) + cost.host_gap_s
    q.busy_s[i] += t_step
    end = now + t_step
    # non-overlapped host work: the GPU idles after the step until the host is done
    q.inst_t[i] = end + cost.host_gap_s
    return end


@nb.njit(cache=True)
def _next_instance(inst_t):
    """(instance, time) of the earliest step boundary."""
    ii = 0
    t_i = _INF
    for i in range(inst_t.shape[0]):
        if inst_t[i] < t_i:
            t_i = inst_t[i]
            ii = i
    return ii, t_i


@nb.njit(cache=True)
def simulate_cluster(inp, p, cost):
    """Run the whole trace; see the module docstring. Returns per-request and per-step arrays
    and the run totals [decode stall s, HBM bytes, KV transfer bytes, prefix re-read bytes,
    host overhead s, dropped requests]."""
    n = inp.prompt.shape[0]
    st = _request_state(inp)
    pool = _kv_pool(p.instances, p.usable_blocks, inp.num_identities)
    q = _queues(p, n, inp.shared_limit)
    hand = Handoffs(t=np.empty(n + 1), r=np.empty(n + 1, np.int64), size=np.zeros(1, np.int64))
    log = _step_log(1024)
    totals = np.zeros(6)
    ti = np.zeros(5, np.int64)
    tf = np.zeros(4)
    n_pf = p.prefill_instances
    n_steps = 0
    next_arr = 0
    while True:
        t_a = inp.arrival[next_arr] if next_arr < n else _INF
        t_h = hand.t[0] if hand.size[0] > 0 else _INF
        i, t_i = _next_instance(q.inst_t)
        if t_a == _INF and t_h == _INF and t_i == _INF:
            break
        if (t_a <= t_h and t_a <= t_i) or t_h <= t_i:
            # a request reaches a router: at its arrival, or when its KV reaches the decode pool
            if t_a <= t_h and t_a <= t_i:
                r = next_arr
                next_arr += 1
                now, lo, hi, stage, is_remote = t_a, 0, n_pf if n_pf > 0 else p.instances, 0, False
            else:
                r = hand.r[0]
                hand.size[0] = heap_pop(hand.t, hand.r, hand.size[0])
                now, lo, hi, stage, is_remote = t_h, n_pf, p.instances, 1, True
            target = _route(r, lo, hi, stage, is_remote, p, inp, pool, q)
            _enqueue(r, target, now, stage, is_remote, st, q)
            continue
        # instance i reaches a step boundary at t_i
        if q.fl_n[i] > 0:
            _complete_step(i, t_i, p, cost.kv_bytes_per_token, inp, st, pool, q, hand, totals)
        if _schedule_step(i, t_i, p, inp, st, pool, q, ti, tf) == 0:
            _idle(i, t_i, q, ti, totals)
            continue
        end = _price_step(i, t_i, cost, q, ti, tf, totals)
        log = _record_step(log, n_steps, i, t_i, end, ti[_PREFILL], ti[_DECODE], q.nrun[i],
                           q.wlen[i], p.usable_blocks - pool.nfree[i], ti[_PREEMPTED])
        n_steps += 1
    return (
        st.sched_s, st.first_s, st.finish_s, st.tt, st.npre, st.cached, st.comp_total,
        st.recomp, st.inst_of, st.pf_inst, log.instance[:n_steps], log.start_s[:n_steps],
        log.end_s[:n_steps], log.prefill[:n_steps], log.decode[:n_steps],
        log.running[:n_steps], log.waiting[:n_steps], log.used[:n_steps],
        log.preempted[:n_steps], totals, q.busy_s,
    )
