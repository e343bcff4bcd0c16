"""The compiled step loop: instances, KV pools, prefix caches, routing and P/D handoffs.

One call simulates a whole cluster in global time order. Three kinds of events interleave:
an arrival (routed at once to an instance's waiting queue), a KV handoff arriving at a decode
instance (P/D), and an instance's engine turn. An engine turn is vLLM's `EngineCore` loop on a
virtual clock: it completes the oldest batch in flight (its tokens come out), then schedules
new batches until `batch_queue` batches are in flight (vLLM's `max_concurrent_batches`: 2 under
async scheduling, the scheduler deciding batch k + 2 while the GPU runs batch k + 1; 1 when
synchronous), then waits for the oldest. A batch starts on the GPU when the one before it ends,
so routing decisions taken meanwhile see the engine as a real router would (tokens of a batch
in flight are not out yet).

Under async scheduling a request holds output placeholders for the tokens its batches in flight
will sample, is scheduled on them before they are known, and is not scheduled past its output
length; a request preempted with a batch in flight still gets that batch's token, and is not
readmitted before (vLLM's stale output, `Scheduler._preempt_request`).

KV pool (engines.md §1.4–1.5): per instance `usable` blocks with reference counts. Free blocks
sit in one doubly linked free queue; allocation pops the head and evicts the block's cache
entry only then; a request's blocks are freed tail first, hashed blocks appended to the tail
(LRU), hashless blocks prepended to the head. A block's identity (`ident`) is a dense id: the
chain id for cacheable blocks (prompt blocks, and output blocks when the trace gives output
tokens), a private id (one per request block slot) otherwise, so a preempted request can hit its
own surviving blocks on resume. Identities map to the physical blocks caching them (`ident_map`
holds the first, `pool[_DUP]` links the others): two requests that compute the same block at
once keep both copies cached, as vLLM does; a lookup takes the oldest copy still cached. Under
the SGLang preset the first copy wins and the second stays private.

The configuration arrives typed: `EngineParams` and `StepCostParams` (`sim.engine_params`),
NamedTuples of scalars read by field name; the requests arrive as `Inputs`.

The code is written for numba (`cache=True`): flat arrays, int64 scalars, no Python objects.
The state sits in a few matrices with one row per field (the tables below), so that the loop's
phases and the pool helpers each take a handful of arrays: numba counts a reference to every
array argument on every call, an atomic increment and decrement each, and with the state as
some thirty separate arrays those counts were a quarter of the loop's instructions (see the
NOTE above `simulate_cluster`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba as nb
import numpy as np

from yaotu_trace._lists import heap_pop, heap_push

_INF = np.inf
# Route codes (`ROUTE_CODES` in sim.config).
_ROUND_ROBIN, _LEAST_LOADED, _PREFIX_AFFINITY, _KV_AWARE = range(4)

# The loop's state: C-contiguous matrices, one row per field (each field as contiguous as an
# array of its own), indexed by these constants (numba folds them).
# req_i[field, r], per request, int64 (flags 0/1; the first five are copies of the inputs):
(_PROMPT,  # prompt tokens
 _OUT_LEN,  # output tokens
 _BLK_OFF, _BLK_END,  # its block slots in `ident` and `req_phys`: [blk_off, blk_end)
 _TT_OFF,  # its first token's slot in the token times
 _COMPUTED,  # tokens whose KV is computed (or scheduled in a batch in flight)
 _NTOK,  # tokens known: prompt + tokens sampled so far
 _GEN,  # tokens sampled (come out) so far
 _NALLOC,  # KV blocks held
 _NREG,  # of them, published to the prefix cache
 _INST_OF,  # instance serving it (-1: not routed yet)
 _PF_INST,  # instance of its prefill
 _NPRE,  # preemptions
 _CACHED,  # prompt tokens hit in the cache at its first admission
 _COMP_TOTAL,  # tokens computed over the run, recomputation included
 _RECOMP,  # tokens recomputed after preemptions, beyond cache hits
 _C_PRE,  # tokens it had computed when last preempted
 _REMOTE,  # 1: queued on a decode instance, its KV coming from a prefill instance
 _LEAVING,  # 1: leaves its instance with the batch just completed
 _STARTED,  # 1: admitted at least once
 _PH,  # output placeholders: tokens its batches in flight will sample (async scheduling)
 _INFL,  # tokens of it scheduled in batches in flight
 _STALE,  # tokens in flight from before its last preemption (it waits for them)
 _DONE,  # 1: finished
 _REQ_I_FIELDS) = range(25)
# req_f[field, r], per request, float64 seconds (NaN: not yet, or colocated):
(_SCHED_S,  # first admission
 _FIRST_S,  # first token
 _FINISH_S,  # last token
 _PF_START,  # P/D: start of its first step on the prefill instance
 _XFER_S,  # P/D: KV transfer not hidden behind the prefill
 _DEC_START,  # P/D: start of its first step on the decode instance
 _REQ_F_FIELDS) = range(7)
# inst_i[field, i], per instance, int64:
(_HEAD, _TAIL,  # ends of the free block queue
 _NFREE,  # free blocks
 _NRUN,  # running requests: run[i, :nrun]
 _WHEAD, _WLEN,  # waiting requests, a ring: wq[i, whead], ... (wlen of them)
 _QHEAD, _QLEN,  # batches in flight: slots i·2 + (qhead + k) % 2 for k < qlen, oldest first
 _BN0, _BN1,  # requests in the batch of slot 0 / 1
 _FINPEND,  # 1: a request finished since the last schedule (vLLM's has_requests)
 _LOAD,  # requests routed to it and not yet gone
 _RECOMP_NOW,  # tokens to recompute that its requests readmitted in this schedule bring back
 _INST_I_FIELDS) = range(14)
# inst_f[field, i], per instance, float64:
(_INST_T,  # its next engine turn (inf: idle until a request reaches it)
 _PEND_PF,  # prefill tokens queued, not yet scheduled
 _BUSY_S,  # seconds of steps run
 _RATIO,  # SGLang: new-token ratio of the decode reservation
 _GPU_FREE,  # when its GPU finishes the batches launched so far
 _READY0, _READY1,  # when the batch of slot 0 / 1 has its tokens out
 _INST_F_FIELDS) = range(8)
# pool[field, b], per physical KV block (instance i's are [i * usable, (i + 1) * usable)):
(_REF,  # references
 _BHASH,  # the identity it caches (-1: none)
 _PREV, _NXT,  # links of the free queue
 _DUP,  # the next younger copy of the same identity (-1: none)
 _POOL_FIELDS) = range(6)
# totals[field], the run totals (returned in this order):
(_STALL_DEC_S, _HBM_BYTES, _XFER_BYTES, _PREFIX_REREAD, _OVERHEAD_S, _DROPPED,
 _TOTALS_FIELDS) = range(7)
# log_i[field, step] (int64) and log_f[field, step] (float64), the step log:
(_S_INST, _S_PF, _S_DEC, _S_RUN, _S_WAIT, _S_USED, _S_PRE, _S_SCHED,
 _S_NEED, _S_FREE,  # admission: the first waiting request's KV ask (−1: none waits), free blocks
 _S_RECOMP,  # tokens the requests readmitted after a preemption must compute again
 _LOG_I_FIELDS) = range(12)
(_S_START, _S_END, _LOG_F_FIELDS) = range(3)
# fl[plane, slot, k], the batches in flight: plane 0 holds request r (r when the batch samples a
# token for it, -r - 1 when it computes a prefill chunk only), plane 1 its scheduled tokens.
_FL_REQ, _FL_TOK = range(2)


class Inputs(NamedTuple):
    """The requests, read-only: lengths, arrivals, block identities, token-time offsets."""

    prompt: np.ndarray
    out_len: np.ndarray
    arrival: np.ndarray
    blk_off: np.ndarray
    ident: np.ndarray
    tt_off: np.ndarray
    num_identities: int
    shared_limit: int  # identities below it are shared (cacheable content) blocks
    assigned: np.ndarray  # instance fixed in advance (`--route trace|weighted`), −1: the policy
    fail_at: np.ndarray  # injected failure after this many output tokens (`sim.failures`), −1
    fail_instance: int  # the instance such failures happen on, −1: any


@nb.njit(cache=True)
def step_time(cost, prefill_tokens, decode_tokens, attn_pairs, ctx_dec, prefix_sum, ctx_all):
    """(seconds, HBM bytes) of one step; see `StepCost`."""
    tok = prefill_tokens + decode_tokens
    if tok == 0:
        return 0.0, 0.0
    kvb = cost.kv_bytes_per_token
    if cost.calibrated:
        t = (cost.a_s + cost.b_s_per_prefill_token * prefill_tokens
             + cost.c_s_per_context_token * ctx_all + cost.d_s_per_token * tok)
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


# ---- the KV pool. The free-queue operations (`_lists`) are written out over `pool` and
# `inst_i` here: a call, even an inlined one, counts a reference per array for every block.


@nb.njit(cache=True)
def _alloc(r, inst, tokens, bsz, req_i, inst_i, pool, req_phys, ident_map):
    """Give request r blocks for `tokens` tokens; False (nothing taken) when too few are free.
    A block taken from the free queue loses its cache entry (lazy eviction); another copy of
    the same identity stays cached."""
    need = (tokens + bsz - 1) // bsz - req_i[_NALLOC, r]
    if need <= 0:
        return True
    if need > inst_i[_NFREE, inst]:
        return False
    base = req_i[_BLK_OFF, r]
    for _ in range(need):
        b = inst_i[_HEAD, inst]
        p = pool[_PREV, b]  # unlink b from the free queue
        q = pool[_NXT, b]
        if p >= 0:
            pool[_NXT, p] = q
        else:
            inst_i[_HEAD, inst] = q
        if q >= 0:
            pool[_PREV, q] = p
        else:
            inst_i[_TAIL, inst] = p
        h = pool[_BHASH, b]
        if h >= 0:  # evict b's entry: unlink it from its identity's copies
            c = ident_map[inst, h]
            if c == b:
                ident_map[inst, h] = pool[_DUP, b]
            else:
                while pool[_DUP, c] != b:
                    c = pool[_DUP, c]
                pool[_DUP, c] = pool[_DUP, b]
            pool[_DUP, b] = -1
            pool[_BHASH, b] = -1
        pool[_REF, b] = 1
        req_phys[base + req_i[_NALLOC, r]] = b
        req_i[_NALLOC, r] += 1
    inst_i[_NFREE, inst] -= need
    return True


@nb.njit(cache=True)
def _free_request(r, inst, req_i, inst_i, pool, req_phys):
    """Release r's blocks tail first: cached ones to the LRU tail, hashless ones to the head."""
    base = req_i[_BLK_OFF, r]
    for k in range(req_i[_NALLOC, r] - 1, -1, -1):
        b = req_phys[base + k]
        pool[_REF, b] -= 1
        if pool[_REF, b] == 0:
            if pool[_BHASH, b] >= 0:  # append
                t = inst_i[_TAIL, inst]
                pool[_PREV, b] = t
                pool[_NXT, b] = -1
                if t >= 0:
                    pool[_NXT, t] = b
                else:
                    inst_i[_HEAD, inst] = b
                inst_i[_TAIL, inst] = b
            else:  # prepend
                h = inst_i[_HEAD, inst]
                pool[_NXT, b] = h
                pool[_PREV, b] = -1
                if h >= 0:
                    pool[_PREV, h] = b
                else:
                    inst_i[_TAIL, inst] = b
                inst_i[_HEAD, inst] = b
            inst_i[_NFREE, inst] += 1
    req_i[_NALLOC, r] = 0
    req_i[_NREG, r] = 0


@nb.njit(cache=True)
def _preempt(r, inst, req_i, inst_i, inst_f, pool, req_phys, wq):
    """Free running r and queue it first again: it recomputes what it had (less any hits).
    Its tokens in flight still come out; until they have, it is not readmitted."""
    _free_request(r, inst, req_i, inst_i, pool, req_phys)
    inst_f[_PEND_PF, inst] += req_i[_COMPUTED, r]
    req_i[_C_PRE, r] = req_i[_COMPUTED, r]
    req_i[_COMPUTED, r] = 0
    req_i[_NPRE, r] += 1
    req_i[_STALE, r] = req_i[_INFL, r]
    req_i[_PH, r] = 0
    cap_q = wq.shape[1]
    inst_i[_WHEAD, inst] = (inst_i[_WHEAD, inst] - 1 + cap_q) % cap_q
    wq[inst, inst_i[_WHEAD, inst]] = r
    inst_i[_WLEN, inst] += 1


@nb.njit(cache=True)
def _register(r, inst, tokens, bsz, dup, req_i, pool, ident, req_phys, ident_map):
    """Publish r's full blocks up to `tokens` as cache entries. With `dup` (vLLM) a block whose
    identity is already cached becomes a further copy of it; without (SGLang) the first copy
    wins and the block stays private."""
    full = tokens // bsz
    if full > req_i[_NALLOC, r]:
        full = req_i[_NALLOC, r]
    base = req_i[_BLK_OFF, r]
    for k in range(req_i[_NREG, r], full):
        idn = ident[base + k]
        b = req_phys[base + k]
        if pool[_BHASH, b] >= 0:
            continue
        c = ident_map[inst, idn]
        if c < 0:
            ident_map[inst, idn] = b
            pool[_BHASH, b] = idn
        elif dup:
            while pool[_DUP, c] >= 0:
                c = pool[_DUP, c]
            pool[_DUP, c] = b
            pool[_BHASH, b] = idn
    if full > req_i[_NREG, r]:
        req_i[_NREG, r] = full


@nb.njit(cache=True)
def _lookup(r, inst, num_tokens, bsz, req_i, pool, ident, ident_map):
    """(hit blocks, hit blocks now free) of r's longest cached prefix, last-token rule applied."""
    cap = (num_tokens - 1) // bsz
    base = req_i[_BLK_OFF, r]
    avail = req_i[_BLK_END, r] - base
    if cap > avail:
        cap = avail
    h = 0
    evictable = 0
    while h < cap:
        b = ident_map[inst, ident[base + h]]
        if b < 0:
            break
        if pool[_REF, b] == 0:
            evictable += 1
        h += 1
    return h, evictable


@nb.njit(cache=True)
def _touch(r, inst, hit, req_i, inst_i, pool, ident, req_phys, ident_map):
    """Take r's `hit` cached prefix blocks (out of the free queue when nobody holds them)."""
    base = req_i[_BLK_OFF, r]
    for k in range(hit):
        b = ident_map[inst, ident[base + k]]
        if pool[_REF, b] == 0:
            p = pool[_PREV, b]  # unlink b from the free queue
            q = pool[_NXT, b]
            if p >= 0:
                pool[_NXT, p] = q
            else:
                inst_i[_HEAD, inst] = q
            if q >= 0:
                pool[_PREV, q] = p
            else:
                inst_i[_TAIL, inst] = p
            inst_i[_NFREE, inst] -= 1
        pool[_REF, b] += 1
        req_phys[base + k] = b
    req_i[_NALLOC, r] = hit
    req_i[_NREG, r] = hit


# ---- routing: a request reaches a router (arrival, or its KV reaching the decode pool)


@nb.njit(cache=True, inline="always")
def _route_prefix_affinity(r, lo, hi, p, shared_limit, req_i, inst_i, rtree, ident):
    """sgl-router cache_aware: imbalance → least load, else the best match over the router's
    own tree if its match rate exceeds the threshold; the tree then learns r's blocks."""
    mn = inst_i[_LOAD, lo]
    mx = inst_i[_LOAD, lo]
    least = lo
    for i in range(lo + 1, hi):
        if inst_i[_LOAD, i] < mn:
            mn = inst_i[_LOAD, i]
            least = i
        if inst_i[_LOAD, i] > mx:
            mx = inst_i[_LOAD, i]
    target = least
    base = req_i[_BLK_OFF, r]
    prompt = req_i[_PROMPT, r]
    # the router holds prompts only (sgl-router inserts the request text, not the answer)
    nb_ = min(req_i[_BLK_END, r] - base, prompt // p.block_size_tokens)
    if not (mx - mn > p.balance_abs_threshold and mx > p.balance_rel_threshold * mn):
        best_m = -1
        best_i = least
        for i in range(lo, hi):
            m = 0
            while m < nb_ and ident[base + m] < shared_limit and rtree[i, ident[base + m]]:
                m += 1
            if m > best_m:
                best_m = m
                best_i = i
        if prompt > 0 and best_m * p.block_size_tokens / prompt > p.affinity_threshold:
            target = best_i
    for m in range(nb_):
        idn = ident[base + m]
        if idn < shared_limit:
            rtree[target, idn] = True
    return target


@nb.njit(cache=True, inline="always")
def _route_kv_aware(r, lo, hi, is_remote, p, req_i, inst_i, inst_f, ident, ident_map):
    """Dynamo: the least prefill blocks after overlap credit + active decode blocks."""
    bsz = p.block_size_tokens
    target = lo
    best_l = _INF
    base = req_i[_BLK_OFF, r]
    prompt = req_i[_PROMPT, r]
    cap = (prompt - 1) // bsz
    for i in range(lo, hi):
        ov = 0
        if p.prefix_caching and not is_remote:
            while ov < cap and ident_map[i, ident[base + ov]] >= 0:
                ov += 1
        pf_blocks = (inst_f[_PEND_PF, i] + prompt) / bsz - ov
        if pf_blocks < 0.0:
            pf_blocks = 0.0
        logit = pf_blocks + (p.usable_blocks - inst_i[_NFREE, i])
        if logit < best_l:
            best_l = logit
            target = i
    return target


@nb.njit(cache=True)
def _route(r, lo, hi, stage, is_remote, p, shared_limit, rr, req_i, inst_i, inst_f, rtree,
           ident, ident_map):
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
        best = inst_i[_LOAD, lo]
        for i in range(lo + 1, hi):
            if inst_i[_LOAD, i] < best:
                best = inst_i[_LOAD, i]
                target = i
        return target
    if p.route == _PREFIX_AFFINITY:
        return _route_prefix_affinity(r, lo, hi, p, shared_limit, req_i, inst_i, rtree, ident)
    return _route_kv_aware(r, lo, hi, is_remote, p, req_i, inst_i, inst_f, ident, ident_map)


@nb.njit(cache=True)
def _queue(r, stage, now, inp, p, rr, req_i, inst_i, inst_f, rtree, ident_map, wq):
    """Route request r (stage 0: arrival; 1: its KV reaching the decode pool) and queue it."""
    if stage == 0:
        lo, hi = 0, (p.prefill_instances if p.prefill_instances > 0 else p.instances)
    else:
        lo, hi = p.prefill_instances, p.instances
    is_remote = stage == 1
    if stage == 0 and inp.assigned[r] >= 0:
        target = inp.assigned[r]
    else:
        target = _route(r, lo, hi, stage, is_remote, p, inp.shared_limit, rr, req_i, inst_i,
                        inst_f, rtree, inp.ident, ident_map)
    req_i[_INST_OF, r] = target
    if stage == 0:
        req_i[_PF_INST, r] = target
    # an injected failure: the request stops after fail_at tokens on the instance it fails on
    fail = inp.fail_at[r]
    if fail >= 0 and fail < req_i[_OUT_LEN, r] and (inp.fail_instance < 0
                                                    or target == inp.fail_instance):
        req_i[_OUT_LEN, r] = fail
    req_i[_REMOTE, r] = is_remote
    q = (inst_i[_WHEAD, target] + inst_i[_WLEN, target]) % wq.shape[1]
    wq[target, q] = r
    inst_i[_WLEN, target] += 1
    inst_i[_LOAD, target] += 1
    if not is_remote:
        inst_f[_PEND_PF, target] += req_i[_NTOK, r] - req_i[_COMPUTED, r]
    if inst_f[_INST_T, target] == _INF:
        inst_f[_INST_T, target] = now


# ---- an engine turn: complete the oldest batch in flight, schedule the next ones


@nb.njit(cache=True)
def _unqueue_waiting(r, i, inst_i, wq):
    """Take r out of instance i's waiting ring, keeping the others' order."""
    cap_q = wq.shape[1]
    head = inst_i[_WHEAD, i]
    n = inst_i[_WLEN, i]
    k = 0
    while k < n and wq[i, (head + k) % cap_q] != r:
        k += 1
    for j in range(k, n - 1):
        wq[i, (head + j) % cap_q] = wq[i, (head + j + 1) % cap_q]
    inst_i[_WLEN, i] -= 1


@nb.njit(cache=True)
def _complete_batch(i, slot, now, p, kvb, req_i, req_f, inst_i, pool, req_phys, ident, ident_map,
                    fl, run, wq, tt, hp_t, hp_r, hp_n, totals):
    """Instance i's batch in `slot` has its tokens out at `now` (vLLM's update_from_output):
    each request it samples for gets a token; finished ones and P/D prefills leave the instance,
    a prefill's KV pushed onto the handoff heap (`hp_t`, `hp_r`: ready s, request) for the
    decode pool. Under async scheduling a running request's blocks are cached up to the tokens
    whose batches have completed. Returns the heap's new size."""
    bsz = p.block_size_tokens
    n_pf = p.prefill_instances
    pd = n_pf > 0
    dup = p.duplicate_copies
    row = i * 2 + slot
    left = 0
    for k in range(inst_i[_BN0 + slot, i]):
        code = fl[_FL_REQ, row, k]
        r = code if code >= 0 else -code - 1
        req_i[_INFL, r] -= fl[_FL_TOK, row, k]
        stale = req_i[_STALE, r] > 0
        if stale:
            req_i[_STALE, r] -= fl[_FL_TOK, row, k]
        if req_i[_DONE, r]:
            continue
        if p.sglang and p.prefix_caching and req_i[_COMPUTED, r] // bsz > req_i[_NREG, r]:
            _register(r, i, req_i[_COMPUTED, r], bsz, dup, req_i, pool, ident, req_phys,
                      ident_map)
        if code < 0:
            continue
        # the batch sampled a token for r
        req_i[_GEN, r] += 1
        req_i[_NTOK, r] += 1
        gen = req_i[_GEN, r]
        tt[req_i[_TT_OFF, r] + gen - 1] = now
        if gen == 1:
            req_f[_FIRST_S, r] = now
        had_ph = req_i[_PH, r] > 0
        if had_ph and not stale:
            req_i[_PH, r] -= 1
            if p.prefix_caching:
                tokens = req_i[_COMPUTED, r] - req_i[_INFL, r]
                if tokens > req_i[_NTOK, r]:
                    tokens = req_i[_NTOK, r]
                if tokens // bsz > req_i[_NREG, r]:  # a block filled (the call costs)
                    _register(r, i, tokens, bsz, dup, req_i, pool, ident, req_phys, ident_map)
        prefilled = pd and req_i[_INST_OF, r] < n_pf
        if gen < req_i[_OUT_LEN, r] and not prefilled:
            continue
        # r leaves the instance: finished, or its prefill done on a P instance
        if stale:
            _unqueue_waiting(r, i, inst_i, wq)
        else:
            _free_request(r, i, req_i, inst_i, pool, req_phys)
            req_i[_LEAVING, r] = 1
            left += 1
        inst_i[_LOAD, i] -= 1
        inst_i[_FINPEND, i] = 1
        if gen >= req_i[_OUT_LEN, r]:
            req_i[_DONE, r] = 1
            req_f[_FINISH_S, r] = now
            if prefilled:
                totals[_XFER_BYTES] += req_i[_PROMPT, r] * kvb
            continue
        # P/D: ship the prompt's KV to a decode instance
        nbytes = req_i[_PROMPT, r] * kvb
        totals[_XFER_BYTES] += nbytes
        alpha = p.link_latency_s
        bw = p.link_bytes_per_s
        if p.layerwise_overlap:
            ready = max(now + alpha + nbytes / (p.layers * bw),
                        req_f[_PF_START, r] + alpha + nbytes / bw)
        else:
            ready = now + alpha + nbytes / bw
        req_f[_XFER_S, r] = ready - now
        hp_n = heap_push(hp_t, hp_r, hp_n, ready, r)
    if left > 0:  # compact the running list
        m = 0
        for k in range(inst_i[_NRUN, i]):
            r = run[i, k]
            if not req_i[_LEAVING, r]:
                run[i, m] = r
                m += 1
            else:
                req_i[_LEAVING, r] = 0
                req_i[_COMPUTED, r] = 0
                req_i[_PH, r] = 0
        inst_i[_NRUN, i] = m
    return hp_n


@nb.njit(cache=True)
def _schedule_running_vllm(i, row, in_system, p, req_i, inst_i, inst_f, pool, req_phys, ident,
                           ident_map, run, fl, wq):
    """vLLM v1 schedules instance i's running requests first, in order, under the token budget;
    one that finds no free block preempts the last running one (itself included). Under async
    scheduling a request is scheduled on its placeholders, but not past its output length.
    Returns (scheduled, preempted, prefill tokens, decode tokens, attention pairs, decode
    context, prefix sum, context sum, budget left)."""
    bsz = p.block_size_tokens
    lpt = p.long_prefill_tokens
    budget = p.token_budget
    n_pf = p.prefill_instances
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
    while idx < inst_i[_NRUN, i] and budget > 0 and not stop:
        r = run[i, idx]
        cb = req_i[_COMPUTED, r]
        ph = req_i[_PH, r]
        if ph > 0:
            # its batches in flight already reach its last token (a P instance stops at one)
            wanted = 1 if (n_pf > 0 and req_i[_INST_OF, r] < n_pf) else req_i[_OUT_LEN, r]
            if cb + 2 - ph >= req_i[_PROMPT, r] + wanted:
                idx += 1
                continue
        ntok = req_i[_NTOK, r]
        nn = ntok + ph - cb
        if lpt > 0 and in_system > 1 and nn > lpt:
            nn = lpt
        if nn > budget:
            nn = budget
        while not _alloc(r, i, cb + nn, bsz, req_i, inst_i, pool, req_phys, ident_map):
            v = run[i, inst_i[_NRUN, i] - 1]
            inst_i[_NRUN, i] -= 1
            _preempt(v, i, req_i, inst_i, inst_f, pool, req_phys, wq)
            req_i[_REMOTE, v] = 0
            preempted_n += 1
            if v == r:
                stop = True
                break
        if stop:
            break
        if p.prefix_caching and min(cb + nn, ntok) // bsz > req_i[_NREG, r]:
            _register(r, i, min(cb + nn, ntok), bsz, p.duplicate_copies, req_i, pool, ident,
                      req_phys, ident_map)
        if nn == 1 and cb >= ntok - 1 and req_i[_GEN, r] + ph >= 1:
            dec_tok += 1
            ctx_dec += cb + 1
        else:
            pf_tok += nn
            attn_pairs += nn * (cb + nn / 2.0)
            prefix_sum += cb
            inst_f[_PEND_PF, i] -= nn
        ctx_all += cb + nn
        req_i[_COMPUTED, r] = cb + nn
        req_i[_COMP_TOTAL, r] += nn
        req_i[_INFL, r] += nn
        samples = cb + nn >= ntok + ph
        if samples and p.batch_queue > 1:
            req_i[_PH, r] += 1
        fl[_FL_REQ, row, n_sched] = r if samples else -r - 1
        fl[_FL_TOK, row, n_sched] = nn
        budget -= nn
        n_sched += 1
        idx += 1
    return (n_sched, preempted_n, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all,
            budget)


@nb.njit(cache=True)
def _schedule_running_sglang(i, row, p, req_i, inst_i, inst_f, pool, req_phys, ident_map, run,
                             fl):
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
    for idx in range(inst_i[_NRUN, i]):
        if budget <= 0:
            break
        r = run[i, idx]
        cb = req_i[_COMPUTED, r]
        if req_i[_GEN, r] >= 1 and cb == req_i[_NTOK, r] - 1:
            continue
        nn = req_i[_NTOK, r] - cb
        if nn > budget:
            nn = budget
        if not _alloc(r, i, cb + nn, bsz, req_i, inst_i, pool, req_phys, ident_map):
            continue
        pf_tok += nn
        attn_pairs += nn * (cb + nn / 2.0)
        prefix_sum += cb
        ctx_all += cb + nn
        inst_f[_PEND_PF, i] -= nn
        req_i[_COMPUTED, r] = cb + nn
        req_i[_COMP_TOTAL, r] += nn
        req_i[_INFL, r] += nn
        fl[_FL_REQ, row, n_sched] = r if cb + nn >= req_i[_NTOK, r] else -r - 1
        fl[_FL_TOK, row, n_sched] = nn
        budget -= nn
        n_sched += 1
    return n_sched, pf_tok, attn_pairs, prefix_sum, ctx_all, budget


@nb.njit(cache=True)
def _admission(r, i, in_system, budget, p, req_i, inst_i, inst_f, pool, ident, ident_map, run):
    """(cached prefix blocks, their tokens, tokens to compute now) of waiting request r on
    instance i, or cached blocks −1 when it does not fit (head-of-line blocking)."""
    bsz = p.block_size_tokens
    ntok = req_i[_NTOK, r]
    hit = 0
    evict = 0
    if req_i[_REMOTE, r]:
        hit_tok = ntok - 1
    else:
        if p.prefix_caching:
            hit, evict = _lookup(r, i, ntok, bsz, req_i, pool, ident, ident_map)
        hit_tok = hit * bsz
    nn = ntok - hit_tok
    capped = p.chunked_prefill or not p.sglang  # vLLM caps a prompt before the chunking check
    if capped and p.long_prefill_tokens > 0 and in_system > 1 and nn > p.long_prefill_tokens:
        nn = p.long_prefill_tokens
    if not p.chunked_prefill and nn > budget:
        return -1, 0, 0
    if nn > budget:
        nn = budget
    nrun = inst_i[_NRUN, i]
    need = (ntok + bsz - 1) // bsz - hit + evict
    free_ok = inst_i[_NFREE, i] - (p.watermark_blocks if nrun > 0 else 0)
    if p.sglang and nrun > 0:
        ratio = inst_f[_RATIO, i]
        reserve = 0.0
        for k in range(nrun):
            v = run[i, k]
            left = req_i[_OUT_LEN, v] - req_i[_GEN, v]
            reserve += min(left, 4096) * ratio
        reserve += min(req_i[_OUT_LEN, r] - req_i[_GEN, r], 4096) * ratio
        need += int((reserve + bsz - 1) // bsz)
    if need > free_ok:
        return -1, 0, 0
    return hit, hit_tok, nn


@nb.njit(cache=True)
def _admit_waiting(i, row, now, in_system, budget, work, p, req_i, req_f, inst_i, inst_f, pool,
                   req_phys, ident, ident_map, run, fl, wq):
    """Admit instance i's waiting requests in order while the budget, the sequence limit and the
    pool allow; a request whose tokens are still in flight from before its preemption is
    passed over (it keeps its place). `work` is the step's (scheduled, prefill tokens, decode
    tokens, attention pairs, decode context, prefix sum, context sum) so far, returned
    updated."""
    n_sched, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all = work
    bsz = p.block_size_tokens
    cap_q = wq.shape[1]
    skipped = 0
    while skipped < inst_i[_WLEN, i] and budget > 0 and inst_i[_NRUN, i] < p.max_num_seqs:
        head = inst_i[_WHEAD, i]
        r = wq[i, (head + skipped) % cap_q]
        if req_i[_STALE, r] > 0:
            skipped += 1
            continue
        hit, hit_tok, nn = _admission(r, i, in_system, budget, p, req_i, inst_i, inst_f, pool,
                                      ident, ident_map, run)
        if hit < 0:
            break
        if hit > 0:
            _touch(r, i, hit, req_i, inst_i, pool, ident, req_phys, ident_map)
        # SGLang reserves the whole sequence at admission (its chunk budget does)
        _alloc(r, i, req_i[_NTOK, r] if p.sglang else hit_tok + nn, bsz, req_i, inst_i, pool,
               req_phys, ident_map)
        remote = req_i[_REMOTE, r]
        if p.prefix_caching and (not p.sglang or remote):
            _register(r, i, hit_tok + nn, bsz, p.duplicate_copies, req_i, pool, ident,
                      req_phys, ident_map)
        for j in range(skipped, 0, -1):  # the passed-over requests keep their places
            wq[i, (head + j) % cap_q] = wq[i, (head + j - 1) % cap_q]
        inst_i[_WHEAD, i] = (head + 1) % cap_q
        inst_i[_WLEN, i] -= 1
        run[i, inst_i[_NRUN, i]] = r
        inst_i[_NRUN, i] += 1
        if not remote:
            if not req_i[_STARTED, r]:
                req_i[_STARTED, r] = 1
                req_f[_SCHED_S, r] = now
                req_i[_CACHED, r] = hit_tok
            else:
                over = req_i[_C_PRE, r] - hit_tok
                if over > 0:
                    req_i[_RECOMP, r] += over
                    inst_i[_RECOMP_NOW, i] += over
            inst_f[_PEND_PF, i] -= hit_tok
        if (p.prefill_instances > 0 and req_i[_INST_OF, r] < p.prefill_instances
                and req_f[_PF_START, r] != req_f[_PF_START, r]):
            req_f[_PF_START, r] = now
        if remote:
            req_i[_REMOTE, r] = 0
            req_f[_DEC_START, r] = now
            dec_tok += 1
            ctx_dec += req_i[_NTOK, r]
        else:
            pf_tok += nn
            attn_pairs += nn * (hit_tok + nn / 2.0)
            prefix_sum += hit_tok
            inst_f[_PEND_PF, i] -= nn
        ctx_all += hit_tok + nn
        req_i[_COMPUTED, r] = hit_tok + nn
        req_i[_COMP_TOTAL, r] += nn
        req_i[_INFL, r] += nn
        samples = hit_tok + nn >= req_i[_NTOK, r]
        if samples and p.batch_queue > 1:
            req_i[_PH, r] = 1
        fl[_FL_REQ, row, n_sched] = r if samples else -r - 1
        fl[_FL_TOK, row, n_sched] = nn
        budget -= nn
        n_sched += 1
    return n_sched, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all


@nb.njit(cache=True)
def _retract_sglang(i, p, req_i, inst_i, inst_f, pool, req_phys, run, wq):
    """Before SGLang's decode step: while the decoding requests' next tokens need more blocks
    than are free, retract the one with the fewest generated tokens (then the longest prompt),
    as long as another one decodes. Returns how many were retracted."""
    bsz = p.block_size_tokens
    retracted = 0
    while True:
        need = 0
        decoding = 0
        worst = -1
        for k in range(inst_i[_NRUN, i]):
            r = run[i, k]
            if req_i[_COMPUTED, r] == req_i[_NTOK, r] - 1:
                need += (req_i[_COMPUTED, r] + 1 + bsz - 1) // bsz - req_i[_NALLOC, r]
                decoding += 1
                if worst < 0:
                    worst = k
                else:
                    b = run[i, worst]
                    if req_i[_GEN, r] < req_i[_GEN, b] or (
                            req_i[_GEN, r] == req_i[_GEN, b]
                            and req_i[_PROMPT, r] > req_i[_PROMPT, b]):
                        worst = k
        if need <= inst_i[_NFREE, i] or decoding <= 1:
            return retracted
        v = run[i, worst]
        for k in range(worst, inst_i[_NRUN, i] - 1):
            run[i, k] = run[i, k + 1]
        inst_i[_NRUN, i] -= 1
        _preempt(v, i, req_i, inst_i, inst_f, pool, req_phys, wq)
        retracted += 1
        inst_f[_RATIO, i] = 0.7


@nb.njit(cache=True)
def _decode_step_sglang(i, row, work, p, req_i, inst_i, inst_f, pool, req_phys, ident_map, run,
                        fl, wq):
    """SGLang's decode step (no prefill work; KV arriving from a prefill instance only adds
    decodes): every decoding request advances one token, after retraction on OOM. `work` is the
    step's (scheduled, preempted, decode tokens, decode context, context sum), returned
    updated."""
    n_sched, preempted_n, dec_tok, ctx_dec, ctx_all = work
    preempted_n += _retract_sglang(i, p, req_i, inst_i, inst_f, pool, req_phys, run, wq)
    for k in range(inst_i[_NRUN, i]):
        r = run[i, k]
        cb = req_i[_COMPUTED, r]
        if cb != req_i[_NTOK, r] - 1:
            continue
        if not _alloc(r, i, cb + 1, p.block_size_tokens, req_i, inst_i, pool, req_phys,
                      ident_map):
            continue
        dec_tok += 1
        ctx_dec += cb + 1
        ctx_all += cb + 1
        req_i[_COMPUTED, r] = cb + 1
        req_i[_COMP_TOTAL, r] += 1
        req_i[_INFL, r] += 1
        fl[_FL_REQ, row, n_sched] = r
        fl[_FL_TOK, row, n_sched] = 1
        n_sched += 1
    ratio_min = 0.7 * 0.14
    inst_f[_RATIO, i] = max(ratio_min, inst_f[_RATIO, i] - (0.7 - ratio_min) / 600.0)
    return n_sched, preempted_n, dec_tok, ctx_dec, ctx_all


@nb.njit(cache=True)
def _grow(a):
    """`a` with twice the columns, the first half copied (an element loop: a slice assignment
    compiles numba's broadcasting and its shape-mismatch message on a first run)."""
    out = np.empty((a.shape[0], a.shape[1] * 2), dtype=a.dtype)
    for r in range(a.shape[0]):
        for c in range(a.shape[1]):
            out[r, c] = a[r, c]
    return out


@nb.njit(cache=True)
def _price_and_log(i, slot, now, n_steps, preempted_n, work, usable, cost, inst_i, inst_f,
                   totals, log_i, log_f):
    """Price instance i's new batch in `slot`, decided at `now` (`work`: scheduled, prefill
    tokens, decode tokens, attention pairs, decode context, prefix sum, context sum): it starts
    when the GPU is free, and its tokens are out after it ends and the host has spent its gap.
    Adds it to the totals and logs it as step `n_steps`. Returns the step log, grown if it was
    full."""
    n_sched, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all = work
    inst_i[_BN0 + slot, i] = n_sched
    t_step, nbytes = step_time(cost, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all)
    if pf_tok > 0 and dec_tok > 0:
        t_dec, _ = step_time(cost, np.int64(0), dec_tok, 0.0, ctx_dec, 0.0, ctx_dec)
        totals[_STALL_DEC_S] += (t_step - t_dec) * dec_tok
    totals[_HBM_BYTES] += nbytes
    totals[_PREFIX_REREAD] += prefix_sum * cost.kv_bytes_per_token
    totals[_OVERHEAD_S] += (cost.overhead_s if not cost.calibrated else 0.0) + cost.host_gap_s
    inst_f[_BUSY_S, i] += t_step
    start = max(now, inst_f[_GPU_FREE, i])
    end = start + t_step
    inst_f[_GPU_FREE, i] = end
    # non-overlapped host work: the tokens are out (and a synchronous engine goes on) after it
    inst_f[_READY0 + slot, i] = end + cost.host_gap_s
    if n_steps == log_i.shape[1]:
        log_i = _grow(log_i)
        log_f = _grow(log_f)
    log_i[_S_INST, n_steps] = i
    log_f[_S_START, n_steps] = start
    log_f[_S_END, n_steps] = end
    log_i[_S_PF, n_steps] = pf_tok
    log_i[_S_DEC, n_steps] = dec_tok
    log_i[_S_RUN, n_steps] = inst_i[_NRUN, i]
    log_i[_S_WAIT, n_steps] = inst_i[_WLEN, i]
    log_i[_S_USED, n_steps] = usable - inst_i[_NFREE, i]
    log_i[_S_PRE, n_steps] = preempted_n
    log_i[_S_SCHED, n_steps] = n_sched
    # Booked in the step that readmits them, as vLLM's scheduler stats count a readmitted
    # request's prefix-cache queries less its hits.
    log_i[_S_RECOMP, n_steps] = inst_i[_RECOMP_NOW, i]
    inst_i[_RECOMP_NOW, i] = 0
    return log_i, log_f


@nb.njit(cache=True)
def _head_ask(i, p, req_i, inst_i, pool, ident, ident_map, wq):
    """(KV blocks the first request still waiting on instance i needs to be admitted, beyond
    its cached prefix, −1 when none waits; blocks free for it, vLLM's watermark left out): the
    step log's admission signal, read once the step is scheduled."""
    free_ok = inst_i[_NFREE, i] - (p.watermark_blocks if inst_i[_NRUN, i] > 0 else 0)
    if free_ok < 0:
        free_ok = 0
    if inst_i[_WLEN, i] == 0:
        return -1, free_ok
    r = wq[i, inst_i[_WHEAD, i]]
    bsz = p.block_size_tokens
    ntok = req_i[_NTOK, r]
    hit = 0
    evict = 0
    if p.prefix_caching and not req_i[_REMOTE, r]:
        hit, evict = _lookup(r, i, ntok, bsz, req_i, pool, ident, ident_map)
    return (ntok + bsz - 1) // bsz - req_i[_NALLOC, r] - hit + evict, free_ok


@nb.njit(cache=True)
def _schedule(i, slot, now, p, req_i, req_f, inst_i, inst_f, pool, req_phys, ident, ident_map,
              run, fl, wq):
    """One scheduler call of instance i at `now` into batch `slot`. Returns (scheduled,
    preempted, prefill tokens, decode tokens, attention pairs, decode context, prefix sum,
    context sum)."""
    row = i * 2 + slot
    in_system = inst_i[_NRUN, i] + inst_i[_WLEN, i]
    inst_i[_FINPEND, i] = 0
    if not p.sglang:  # vLLM v1: running requests first, in order, then waiting FCFS
        (n_sched, preempted_n, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all,
         budget) = _schedule_running_vllm(i, row, in_system, p, req_i, inst_i, inst_f, pool,
                                          req_phys, ident, ident_map, run, fl, wq)
    else:  # SGLang: continue chunked prefills, then admit; decode only without prefill
        n_sched, pf_tok, attn_pairs, prefix_sum, ctx_all, budget = _schedule_running_sglang(
            i, row, p, req_i, inst_i, inst_f, pool, req_phys, ident_map, run, fl)
        preempted_n, dec_tok, ctx_dec = 0, 0, 0.0
    if preempted_n == 0:  # vLLM admits only when nothing was preempted this step
        n_sched, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all = _admit_waiting(
            i, row, now, in_system, budget,
            (n_sched, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all), p, req_i,
            req_f, inst_i, inst_f, pool, req_phys, ident, ident_map, run, fl, wq)
    if p.sglang and pf_tok == 0 and inst_i[_NRUN, i] > 0:
        n_sched, preempted_n, dec_tok, ctx_dec, ctx_all = _decode_step_sglang(
            i, row, (n_sched, preempted_n, dec_tok, ctx_dec, ctx_all), p, req_i, inst_i, inst_f,
            pool, req_phys, ident_map, run, fl, wq)
    return n_sched, preempted_n, pf_tok, dec_tok, attn_pairs, ctx_dec, prefix_sum, ctx_all


# ---- the loop


def _initial_state(inp: Inputs, p: Any) -> tuple[np.ndarray, ...]:
    """(req_i, req_f, inst_i, inst_f, pool) at the start: every block free, in order."""
    n = inp.prompt.shape[0]
    req_i = np.zeros((_REQ_I_FIELDS, n), np.int64)
    req_i[_PROMPT] = inp.prompt
    req_i[_OUT_LEN] = inp.out_len
    req_i[_BLK_OFF] = inp.blk_off[:n]
    req_i[_BLK_END] = inp.blk_off[1:]
    req_i[_TT_OFF] = inp.tt_off[:n]
    req_i[_NTOK] = inp.prompt
    req_i[_INST_OF] = -1
    req_i[_PF_INST] = -1
    req_f = np.full((_REQ_F_FIELDS, n), np.nan)
    n_inst = p.instances
    usable = p.usable_blocks
    inst_i = np.zeros((_INST_I_FIELDS, n_inst), np.int64)
    inst_i[_NFREE] = usable
    inst_f = np.zeros((_INST_F_FIELDS, n_inst))
    inst_f[_INST_T] = _INF
    inst_f[_RATIO] = 0.7
    pool = np.empty((_POOL_FIELDS, n_inst * usable), np.int64)
    pool[_REF] = 0
    pool[_BHASH] = -1
    pool[_DUP] = -1
    # each instance's free list: its blocks in order (one instance at a time: a whole-pool
    # temporary would add gigabytes to the peak at the largest pools)
    for i in range(n_inst):
        lo = i * usable
        hi = lo + usable
        pool[_PREV, lo:hi] = np.arange(lo - 1, hi - 1)
        pool[_NXT, lo:hi] = np.arange(lo + 1, hi + 1)
        if usable:
            pool[_PREV, lo] = -1
            pool[_NXT, hi - 1] = -1
        inst_i[_HEAD, i] = lo
        inst_i[_TAIL, i] = hi - 1
    return req_i, req_f, inst_i, inst_f, pool


# NOTE: the loop runs in phases (`_queue`, `_complete_batch`, `_schedule` with its
# `_schedule_running_*`, `_admit_waiting` and `_decode_step_sglang`, `_price_and_log`) over the
# state matrices. `python benchmarks/simulate_vs.py --repeats 7` against the inline loop over
# some thirty separate arrays that came before (CPU seconds, median of 7 alternating runs; every
# result array bit-identical; noise on the shared 2-core machine is about ±3 %):
#   deployment               inline s   phases s   phases/inline
#   1 instance                 1.868      0.634       0.34
#   4 instances, kv-aware      2.223      1.082       0.49
#   P/D 2:2                    2.974      1.160       0.39
#   1 instance, sglang         1.835      0.647       0.35
#   4 instances, sglang        2.176      1.138       0.52
# First-call compile (fresh process, empty cache, median of 3): 12.8 s inline, 20.5 s phases.
# Why: numba increfs and decrefs every array argument of every call (two atomic operations),
# and an inlined call inside a loop does so on every iteration. Under callgrind (4 instances,
# kv-aware, NUMBA_CPU_NAME=haswell) the inline loop ran 6.04e9 instructions, 24 % of them in
# the reference counting, about 1.6e8 increments (`_alloc`'s 11 arrays on 4.1e6 calls,
# `_free_request`'s inlined list steps on every freed block); the phases run 3.96e9, with
# about 4.3e7 increments. Slower, measured the same way against the inline loop:
# - these matrices with the loop and the helpers still on one-row views of them (as many
#   array arguments as before): the same instruction count, +8-10 % with 4 instances; step
#   completion as a phase over the matrices on top of that: +15-21 % on every deployment;
# - before the matrices: the state as NamedTuples of arrays: 1.3-1.8x; step completion over
#   its 46 plain arguments (beyond 30, numba gets them as one *args tuple): ~15 % (4
#   instances); over one `structref` of its 28 arrays: +16 %; over state tuples with everything
#   it calls inlined: +6 %, compile +10 %.
# The engine turn (batches in flight, placeholders, stale tokens, duplicate copies) against the
# one-batch loop before it, measured the same way (median of 7, the machine otherwise idle; the
# new loop runs async scheduling where vLLM does): 1 instance 0.855 → 0.880 s (+3 %); 4
# instances, kv-aware 1.358 → 1.743 s (+28 %); P/D 2:2 1.530 → 2.143 s (+40 %); 1 instance,
# sglang 0.730 → 0.730 s; 4 instances, sglang 1.177 → 1.289 s (+10 %). The extra is per step
# (more fields per request), where many small instances make many steps; async itself costs
# 6–12 % over the same loop run synchronously (separate runs, median of 5: P/D 2:2 1.554 →
# 1.737 s, 4 instances kv-aware 1.278 → 1.355 s). Inlining `_schedule` changed nothing
# measurable.
def simulate_cluster(inp: Inputs, p: Any, cost: Any) -> tuple:
    """Run the whole trace; see the module docstring. Returns per-request and per-step arrays
    and the run totals [decode stall s, HBM bytes, KV transfer bytes, prefix re-read bytes,
    host overhead s, dropped requests], busy seconds per instance, and per request the P/D KV
    transfer's exposed seconds and decode start (NaN when colocated).

    The state is made here and only the loop (`simulation_loop`) is compiled: arrays
    allocated and filled by rows in compiled code compile numba's `np.full`, `np.zeros` and its
    broadcasting with them. With that and no literal arguments (below), a first `trace
    simulate` of the Mooncake conversation trace compiles in 14.6 s where it took 33.7 s, the
    same results."""
    n = inp.prompt.shape[0]
    n_inst = int(p.instances)
    max_seqs = int(p.max_num_seqs)
    tree = p.route == _PREFIX_AFFINITY  # the router's own prefix tree (sgl-router)
    req_i, req_f, inst_i, inst_f, pool = _initial_state(inp, p)
    tt = np.full(inp.tt_off[n], np.nan)  # token times
    totals = np.zeros(_TOTALS_FIELDS)
    log_i, log_f, n_steps = simulation_loop(
        inp, p, cost, req_i, req_f, inst_i, inst_f, pool,
        np.full(inp.blk_off[n], -1, np.int64),  # physical block of each block slot
        tt, np.full((n_inst, inp.num_identities), -1, np.int32),
        np.zeros((n_inst if tree else 1, inp.shared_limit if tree else 1), np.bool_),
        np.zeros(2, np.int64),  # round-robin counters of the two routers
        np.zeros((n_inst, max_seqs), np.int64),
        np.zeros((2, n_inst * 2, min(max_seqs, n) + 1), np.int64),
        np.zeros((n_inst, n + 1), np.int64),
        np.empty(n + 1),  # P/D handoffs: a heap of (KV ready s, request)
        np.empty(n + 1, np.int64), totals,
        np.empty((_LOG_I_FIELDS, 1024), np.int64), np.empty((_LOG_F_FIELDS, 1024)))
    return _results(req_i, req_f, inst_f, tt, totals, log_i[:, :n_steps], log_f[:, :n_steps])


@nb.njit(cache=True)
def simulation_loop(inp, p, cost, req_i, req_f, inst_i, inst_f, pool, req_phys, tt, ident_map,
                    rtree, rr, run, fl, wq, hp_t, hp_r, totals, log_i, log_f):
    """`simulate_cluster`'s loop over its state; returns the step log's rows and length."""
    n = inp.prompt.shape[0]
    n_inst = p.instances
    depth = p.batch_queue
    ident = inp.ident
    # np.int64, not literals: numba compiles a helper once per literal type it is given (the
    # first run compiled most of the engine twice, 31 s, with them)
    hp_n = np.int64(0)
    n_steps = np.int64(0)
    next_arr = np.int64(0)
    while True:
        t_a = inp.arrival[next_arr] if next_arr < n else _INF
        t_h = hp_t[0] if hp_n > 0 else _INF
        i = np.int64(0)
        now = _INF
        for k in range(n_inst):
            if inst_f[_INST_T, k] < now:
                now = inst_f[_INST_T, k]
                i = k
        if t_a == _INF and t_h == _INF and now == _INF:
            break
        if (t_a <= t_h and t_a <= now) or t_h <= now:
            # a request reaches a router: route it and queue it
            if t_a <= t_h and t_a <= now:
                _queue(next_arr, np.int64(0), t_a, inp, p, rr, req_i, inst_i, inst_f, rtree,
                       ident_map, wq)
                next_arr += 1
            else:
                r = hp_r[0]
                t_h = hp_t[0]
                hp_n = heap_pop(hp_t, hp_r, hp_n)
                _queue(r, np.int64(1), t_h, inp, p, rr, req_i, inst_i, inst_f, rtree,
                       ident_map, wq)
            continue
        # instance i's engine turn: complete its oldest batch (ready now), schedule, wait
        if inst_i[_QLEN, i] > 0:
            slot = inst_i[_QHEAD, i]
            hp_n = _complete_batch(i, slot, now, p, cost.kv_bytes_per_token, req_i, req_f,
                                   inst_i, pool, req_phys, ident, ident_map, fl, run, wq, tt,
                                   hp_t, hp_r, hp_n, totals)
            inst_i[_QHEAD, i] = 1 - slot
            inst_i[_QLEN, i] -= 1
        while True:
            has_req = inst_i[_NRUN, i] + inst_i[_WLEN, i] > 0 or inst_i[_FINPEND, i] > 0
            if not has_req and inst_i[_QLEN, i] == 0:
                inst_f[_INST_T, i] = _INF
                break
            if has_req:
                slot = (inst_i[_QHEAD, i] + inst_i[_QLEN, i]) % 2
                work = _schedule(i, slot, now, p, req_i, req_f, inst_i, inst_f, pool, req_phys,
                                 ident, ident_map, run, fl, wq)
                n_sched, preempted_n = work[0], work[1]
                inst_i[_QLEN, i] += 1
                if n_sched > 0:
                    log_i, log_f = _price_and_log(i, slot, now, n_steps, preempted_n,
                                                  (n_sched, work[2], work[3], work[4], work[5],
                                                   work[6], work[7]),
                                                  p.usable_blocks, cost, inst_i, inst_f,
                                                  totals, log_i, log_f)
                    log_i[_S_NEED, n_steps], log_i[_S_FREE, n_steps] = _head_ask(
                        i, p, req_i, inst_i, pool, ident, ident_map, wq)
                    n_steps += 1
                else:
                    inst_i[_BN0 + slot, i] = 0
                    inst_f[_READY0 + slot, i] = now
                    busy = inst_i[_QLEN, i] == 2 and inst_i[_BN0 + inst_i[_QHEAD, i], i] > 0
                    if preempted_n == 0 and not busy:
                        # nothing can run until a request arrives (an empty batch in flight
                        # changes nothing either): drop a head that cannot be admitted even
                        # into an empty instance, else wait
                        inst_i[_QLEN, i] = 0
                        if inst_i[_NRUN, i] == 0 and inst_i[_WLEN, i] > 0:
                            inst_i[_WHEAD, i] = (inst_i[_WHEAD, i] + 1) % wq.shape[1]
                            inst_i[_WLEN, i] -= 1
                            inst_i[_LOAD, i] -= 1
                            totals[_DROPPED] += 1.0
                            continue
                        inst_f[_INST_T, i] = _INF
                        break
                if inst_i[_QLEN, i] < depth and (
                        n_sched > 0 or inst_i[_NRUN, i] + inst_i[_WLEN, i] > 0
                        or inst_i[_FINPEND, i] > 0):
                    continue
            # wait for the oldest batch
            slot = inst_i[_QHEAD, i]
            ready = inst_f[_READY0 + slot, i]
            if ready > now:
                inst_f[_INST_T, i] = ready
                break
            if inst_i[_BN0 + slot, i] > 0:
                hp_n = _complete_batch(i, slot, now, p, cost.kv_bytes_per_token, req_i,
                                       req_f, inst_i, pool, req_phys, ident, ident_map, fl,
                                       run, wq, tt, hp_t, hp_r, hp_n, totals)
            inst_i[_QHEAD, i] = 1 - slot
            inst_i[_QLEN, i] -= 1
    return log_i, log_f, n_steps


def _results(req_i: np.ndarray, req_f: np.ndarray, inst_f: np.ndarray, tt: np.ndarray,
             totals: np.ndarray, log_i: np.ndarray, log_f: np.ndarray) -> tuple:
    """`simulate_cluster`'s results, each field its own array."""
    return (
        req_f[_SCHED_S].copy(), req_f[_FIRST_S].copy(), req_f[_FINISH_S].copy(), tt,
        req_i[_NPRE].copy(), req_i[_CACHED].copy(), req_i[_COMP_TOTAL].copy(),
        req_i[_RECOMP].copy(), req_i[_INST_OF].copy(), req_i[_PF_INST].copy(),
        log_i[_S_INST].copy(), log_f[_S_START].copy(), log_f[_S_END].copy(),
        log_i[_S_PF].copy(), log_i[_S_DEC].copy(), log_i[_S_RUN].copy(), log_i[_S_WAIT].copy(),
        log_i[_S_USED].copy(), log_i[_S_PRE].copy(), totals.copy(), inst_f[_BUSY_S].copy(),
        req_f[_XFER_S].copy(), req_f[_DEC_START].copy(), log_i[_S_SCHED].copy(),
        log_i[_S_NEED].copy(), log_i[_S_FREE].copy(), log_i[_S_RECOMP].copy(),
    )
