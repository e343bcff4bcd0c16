"""The simulator's entry points, `simulate_requests` and `fit_step_cost`; `yaotu_trace.sim` says
what they take and return."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.errors import ConfigError, ResourceLimitError
from yaotu_trace.sim.config import RoutePolicy, SimConfig, StepCost
from yaotu_trace.sim.engine_params import engine_params, step_cost_params
from yaotu_trace.sim.failures import FailurePlan, Failures, failed_requests, failure_plan

if TYPE_CHECKING:
    from yaotu_trace.sim.engine import Inputs

_MAX_MAP_BYTES = 16 * 2**30  # identity → block maps, one int32 per identity and instance


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestArrays:
    """The requests to simulate, in arrival order.

    `chain_offsets`/`chain_ids` are per-request dense chain ids of cacheable prompt blocks of
    `chain_block_tokens` tokens each (a multiple of the engine block size; each chain block
    then stands for `chain_block_tokens / block_size` engine blocks). None: no prompt content,
    so no request can hit another's blocks. `output_offsets`/`output_ids` continue each chain
    over the request's output tokens when the trace gives them (token ids, `chain_block_tokens`
    the engine block size): the ids of the full blocks of prompt + output after the prompt's
    full blocks, in the same id space, so a later prompt that repeats an answer hits its
    blocks. `instance_codes` index `instance_names`: where the trace says each request ran
    (−1: it does not say), read by `--route trace`.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    chain_offsets: np.ndarray | None = None
    chain_ids: np.ndarray | None = None
    chain_block_tokens: int | None = None
    num_chain_ids: int = 0
    output_offsets: np.ndarray | None = None
    output_ids: np.ndarray | None = None
    instance_codes: np.ndarray | None = None
    instance_names: tuple[str, ...] = ()

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return len(self.arrival_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimResult:
    """Per-request timing (NaN where a request never ran), the step log and work totals.

    `instance`/`prefill_instance` index `instance_labels` (−1: never routed). Token times are
    flat (`token_offsets`, n + 1 entries). `computed_tokens` counts every token put through a
    forward pass (prefill, recompute and decode); `recomputed_tokens` the part of it that redid
    work lost to preemption. `decode_stall_s` is Σ over mixed steps of (step time − the time of
    the same step without its prefill tokens) × decode tokens: the decode-seconds lost to
    prefill/decode interference (cost-model §3.1). Under P/D, `kv_transfer_s` is the part of a
    request's KV transfer not hidden behind its prefill (from its first token until the KV is on
    the decode instance) and `decode_start_s` the start of its first step there (NaN otherwise).
    The step log's admission signal: `step_head_blocks_needed`, the KV blocks the first request
    left waiting after the step needs beyond its cached prefix (−1: none waits), and
    `step_kv_blocks_free`, the blocks free for it. `failed` marks the requests whose injected
    failure happened (`sim.failures`; None without injection): their token times stop at it.
    """

    scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    token_offsets: np.ndarray
    token_times_s: np.ndarray
    num_preemptions: np.ndarray
    cached_tokens: np.ndarray
    computed_tokens: np.ndarray
    recomputed_tokens: np.ndarray
    instance: np.ndarray
    prefill_instance: np.ndarray
    instance_labels: tuple[str, ...]
    kv_transfer_s: np.ndarray
    decode_start_s: np.ndarray
    step_instance: np.ndarray
    step_start_s: np.ndarray
    step_end_s: np.ndarray
    step_prefill_tokens: np.ndarray
    step_decode_tokens: np.ndarray
    step_num_running: np.ndarray
    step_num_waiting: np.ndarray
    step_kv_blocks_used: np.ndarray
    step_num_preempted: np.ndarray
    step_recomputed_tokens: np.ndarray  # what the requests it readmitted must compute again
    step_num_scheduled: np.ndarray
    step_head_blocks_needed: np.ndarray
    step_kv_blocks_free: np.ndarray
    kv_blocks_total: int
    busy_s: np.ndarray
    decode_stall_s: float
    hbm_bytes: float
    kv_transfer_bytes: float
    prefix_reread_bytes: float
    host_overhead_s: float
    rejected_requests: int
    failed: np.ndarray | None = None

    @property
    def num_steps(self) -> int:
        """Steps simulated over all instances."""
        return len(self.step_start_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationFit:
    """Least-squares step-time fit `a + b·prefill_tokens + c·Σcontext` (seconds)."""

    a_s: float
    b_s_per_prefill_token: float
    c_s_per_context_token: float
    r_squared: float
    rmse_s: float
    steps: int
    context_source: str

    def step_cost(self, kv_bytes_per_token: float) -> StepCost:
        """The fitted model as a `StepCost`."""
        return StepCost.fixed(self.a_s, self.b_s_per_prefill_token, self.c_s_per_context_token,
                              kv_bytes_per_token=kv_bytes_per_token)


def fit_step_cost(prefill_tokens: np.ndarray, context_tokens: np.ndarray, step_s: np.ndarray,
                  *, context_source: str = "context") -> CalibrationFit:
    """Fit step time on a real step log by least squares; raises when the log cannot fit it."""
    x1 = np.asarray(prefill_tokens, dtype=np.float64)
    x2 = np.asarray(context_tokens, dtype=np.float64)
    y = np.asarray(step_s, dtype=np.float64)
    keep = np.isfinite(x1) & np.isfinite(x2) & np.isfinite(y) & (y > 0)
    x1, x2, y = x1[keep], x2[keep], y[keep]
    if y.size < 3:
        raise ConfigError(f"--calibrate needs at least 3 steps with durations, got {y.size}")
    design = np.column_stack([np.ones_like(x1), x1, x2])
    # NOTE: coefficients are kept >= 0 (a step never gets faster with more work): the best
    # least-squares fit over the subsets of terms whose coefficients come out non-negative.
    best: np.ndarray | None = None
    best_sse = np.inf
    for mask in ((1, 1, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1)):
        cols = [k for k in range(3) if mask[k]]
        sol, *_ = np.linalg.lstsq(design[:, cols], y, rcond=None)
        if (sol < 0).any():
            continue
        coef_try = np.zeros(3)
        coef_try[cols] = sol
        sse = float(((y - design @ coef_try) ** 2).sum())
        if sse < best_sse:
            best, best_sse = coef_try, sse
    coef = best if best is not None else np.array([float(y.mean()), 0.0, 0.0])
    pred = design @ coef
    resid = y - pred
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return CalibrationFit(a_s=float(coef[0]), b_s_per_prefill_token=float(coef[1]),
                          c_s_per_context_token=float(coef[2]), r_squared=r2,
                          rmse_s=float(np.sqrt((resid**2).mean())), steps=int(y.size),
                          context_source=context_source)


def _segment_positions(counts: np.ndarray) -> np.ndarray:
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def block_identities(requests: RequestArrays, output_tokens: np.ndarray, block_size: int,
                     prefix_caching: bool) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(slot offsets, identity per engine block slot, number of identities, shared limit).

    A request has `ceil((prompt + output) / B)` block slots. Slot j of a cacheable prompt
    chain block c (of m = chain_block_tokens / B engine blocks) gets `id(c)·m + j mod m`, shared
    by every request with the same chain; the slots after the prompt's full blocks take the
    output chain ids when the trace gives output tokens; every other slot gets a private id.
    """
    prompt = requests.prompt_tokens.astype(np.int64)
    slots = (prompt + output_tokens + block_size - 1) // block_size
    offsets = np.zeros(len(prompt) + 1, dtype=np.int64)
    np.cumsum(slots, out=offsets[1:])
    total = int(offsets[-1])
    has_chains = (prefix_caching and requests.chain_ids is not None
                  and requests.chain_offsets is not None and requests.chain_block_tokens)
    if not has_chains:
        return offsets, np.arange(total, dtype=np.int64), total, 0
    chain_tokens = int(requests.chain_block_tokens or block_size)
    if chain_tokens % block_size:
        raise ConfigError(f"block size {block_size} does not divide the trace's {chain_tokens}-"
                          "token content blocks; pick a block size that does")
    m = chain_tokens // block_size
    shared = int(requests.num_chain_ids) * m
    assert requests.chain_offsets is not None and requests.chain_ids is not None  # has_chains
    chain_counts = np.diff(requests.chain_offsets).astype(np.int64)
    shared_slots = np.minimum(chain_counts * m, slots)
    pos = _segment_positions(slots)
    req = np.repeat(np.arange(len(prompt), dtype=np.int64), slots)
    is_shared = pos < shared_slots[req]
    ident = shared + np.arange(total, dtype=np.int64)
    chain_index = requests.chain_offsets[req[is_shared]] + pos[is_shared] // m
    ident[is_shared] = requests.chain_ids[chain_index].astype(np.int64) * m + pos[is_shared] % m
    if (requests.output_ids is not None and requests.output_offsets is not None
            and m == 1):
        out_counts = np.diff(requests.output_offsets).astype(np.int64)
        after = pos - shared_slots[req]  # slot index past the prompt's chain blocks
        is_out = (after >= 0) & (after < out_counts[req])
        ident[is_out] = requests.output_ids[requests.output_offsets[req[is_out]]
                                            + after[is_out]].astype(np.int64)
    return offsets, ident, shared + total, shared


# The progress line of a run whose engine loop is not yet compiled on disk (a fresh install).
COMPILING_STAGE = "compiling the engine first (once, about 15 s)"


def simulate_stage() -> str:
    """What a progress line should say of the run about to start: a fresh install compiles the
    engine loop first (about 15 s, once; numba caches it on disk), and a bar standing still
    that long with no word looks hung."""
    # NOTE: the compiled engine (numba) loads only when a run starts; resolving a scenario or
    # fitting a step time imports this module without it.
    from yaotu_trace.sim.engine import simulation_loop

    try:  # numba's cache index: empty until the loop is compiled for this source and version
        cached = bool(simulation_loop._cache._cache_file._load_index())  # type: ignore[attr-defined]
    except (AttributeError, OSError, EOFError, ValueError, pickle.UnpicklingError):
        return "simulating"  # another numba's internals: say nothing of compiling
    return "simulating" if cached else COMPILING_STAGE


def simulate_requests(requests: RequestArrays, config: SimConfig,
                      failures: Failures | None = None) -> SimResult:
    """Run `requests` through the modelled cluster under `config` (deterministic), with the
    injected `failures` (`sim.failures`) when given."""
    # NOTE: the compiled engine (numba) loads only when a run starts; resolving a scenario or
    # fitting a step time imports this module without it.
    from yaotu_trace.sim.engine import simulate_cluster

    keep, runnable = _runnable(requests, config)
    labels = _instance_labels(config, requests)
    plan = None if failures is None else failure_plan(runnable.output_tokens, failures, labels)
    inputs = _engine_inputs(runnable, config, plan)
    # NOTE: a Ctrl-C during this call is raised once it has returned, not inside numba's boxing
    # of its 21 result arrays, where it crashed the process (see yaotu_trace/cli/interrupts.py).
    out = simulate_cluster(inputs, engine_params(config, _token_budget(runnable, config)),
                           step_cost_params(config.step_cost))
    failed = None
    if plan is not None:
        inst, pf_inst, finish = out[8], out[9], out[2]
        failed = failed_requests(plan, inst, pf_inst, np.isfinite(finish))
        # the tokens a failed request streamed before it failed are all it has
        wanted = requests.output_tokens.astype(np.int64).copy()
        wanted[keep[failed]] = plan.fail_at[failed]
        requests = replace(requests, output_tokens=wanted)
    result = _result(requests, keep, inputs.tt_off, runnable.output_tokens, out, config)
    if failed is None:
        return result
    return replace(result, failed=_scatter(requests.num_requests, keep,
                                           {"f": (failed, False)})["f"])


def _runnable(requests: RequestArrays, config: SimConfig) -> tuple[np.ndarray, RequestArrays]:
    """(indices kept, their requests): those whose whole sequence fits one instance's pool,
    lengths at least 1 as contiguous int64, checked to be in arrival order."""
    bsz = config.block_size_tokens
    prompt_all = np.maximum(requests.prompt_tokens.astype(np.int64), 1)
    out_all = np.maximum(requests.output_tokens.astype(np.int64), 1)
    fits = (prompt_all + out_all + bsz - 1) // bsz <= config.kv_blocks - 1
    keep = np.flatnonzero(fits)
    sub = requests
    if keep.size < requests.num_requests:
        sub = _subset(requests, keep)
    prompt = np.ascontiguousarray(np.maximum(sub.prompt_tokens.astype(np.int64), 1))
    out_len = np.ascontiguousarray(np.maximum(sub.output_tokens.astype(np.int64), 1))
    # a fresh (writable) copy: numba compiles a second loop for a read-only array
    arrival = np.array(sub.arrival_s, dtype=np.float64, order="C")
    if arrival.size and (np.diff(arrival) < 0).any():
        raise ConfigError("requests must be in arrival order")
    return keep, RequestArrays(arrival_s=arrival, prompt_tokens=prompt, output_tokens=out_len,
                               chain_offsets=sub.chain_offsets, chain_ids=sub.chain_ids,
                               chain_block_tokens=sub.chain_block_tokens,
                               num_chain_ids=sub.num_chain_ids,
                               output_offsets=sub.output_offsets, output_ids=sub.output_ids,
                               instance_codes=sub.instance_codes,
                               instance_names=sub.instance_names)


def _engine_inputs(runnable: RequestArrays, config: SimConfig,
                   plan: FailurePlan | None = None) -> Inputs:
    """The compiled loop's `Inputs`, once the cache maps and pools are known to fit."""
    # NOTE: the compiled engine (numba) loads only when a run starts; resolving a scenario or
    # fitting a step time imports this module without it.
    from yaotu_trace.sim.engine import Inputs

    out_len = runnable.output_tokens
    blk_off, ident, n_ident, shared = block_identities(runnable, out_len,
                                                       config.block_size_tokens,
                                                       config.prefix_caching)
    n_inst = config.total_instances
    map_bytes = n_inst * n_ident * 4
    if map_bytes > _MAX_MAP_BYTES:
        raise ResourceLimitError(
            f"{n_inst} instances × {n_ident:,} block identities need {map_bytes / 2**30:.1f} GiB "
            "of cache maps; use fewer instances or a larger --block-size")
    if n_inst * (config.kv_blocks - 1) >= 2**31:
        raise ConfigError("the KV pools exceed 2^31 blocks; use fewer blocks or a larger "
                          "--block-size")
    tt_off = np.zeros(len(out_len) + 1, dtype=np.int64)
    np.cumsum(out_len, out=tt_off[1:])
    return Inputs(prompt=runnable.prompt_tokens, out_len=out_len, arrival=runnable.arrival_s,
                  blk_off=blk_off, ident=ident, tt_off=tt_off, num_identities=int(n_ident),
                  shared_limit=int(max(shared, 1)),
                  assigned=assigned_instances(runnable, config),
                  fail_at=(plan.fail_at if plan is not None
                           else np.full(len(out_len), -1, dtype=np.int64)),
                  fail_instance=-1 if plan is None else plan.instance)


def weighted_assignment(count: int, weights: tuple[float, ...]) -> np.ndarray:
    """The instance of each of `count` requests under fixed shares, interleaved: instance k's
    m-th request sits at (m + ½) / w_k on a common line (Sainte-Laguë's order), so after any
    prefix of the requests each instance holds its share to within one request. Deterministic;
    ties go to the lower instance."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    slots = [np.arange(int(np.ceil(count * wk)) + 1) for wk in w]
    keys = np.concatenate([(m + 0.5) / wk for m, wk in zip(slots, w, strict=True)])
    owner = np.concatenate([np.full(m.size, k, dtype=np.int64) for k, m in enumerate(slots)])
    order = np.lexsort((owner, keys))
    return np.ascontiguousarray(owner[order][:count])


# The seed of `--route random`: a fixed one, so that the same trace always routes the same way.
RANDOM_ROUTE_SEED = 0


def random_assignment(count: int, instances: int, seed: int = RANDOM_ROUTE_SEED) -> np.ndarray:
    """The instance of each of `count` requests drawn uniformly and independently (a router
    blind to load, sessions and prefixes), from PCG64(`seed`): deterministic."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return np.ascontiguousarray(rng.integers(0, instances, size=count, dtype=np.int64))


def assigned_instances(requests: RequestArrays, config: SimConfig) -> np.ndarray:
    """Each request's instance fixed before the run (`--route trace|weighted|random`), else
    −1."""
    n = requests.num_requests
    if config.route is RoutePolicy.RANDOM:
        return random_assignment(n, config.instances)
    if config.route is RoutePolicy.WEIGHTED:
        assert config.route_weights is not None  # SimConfig checks it
        return weighted_assignment(n, config.route_weights)
    if config.route is RoutePolicy.TRACE:
        codes = requests.instance_codes
        if codes is None or (codes < 0).any():
            row = 0 if codes is None else int(np.flatnonzero(codes < 0)[0])
            raise ConfigError(f"--route trace: column 'instance', row {row}: no instance given; "
                              "fill the trace's instance column or pick another --route")
        return np.ascontiguousarray(codes.astype(np.int64))
    return np.full(n, -1, dtype=np.int64)


def _token_budget(runnable: RequestArrays, config: SimConfig) -> int:
    """Tokens per step: `max_batched_tokens`, raised to fit the longest request unchunked."""
    budget = config.max_batched_tokens
    if not config.chunked_prefill:
        # NOTE: vLLM requires max_num_batched_tokens >= max_model_len without chunking.
        prompt, out_len = runnable.prompt_tokens, runnable.output_tokens
        longest = int((prompt + out_len).max()) if prompt.size else 0
        budget = max(budget, longest + config.max_num_seqs)
    return budget


def _instance_labels(config: SimConfig, requests: RequestArrays) -> tuple[str, ...]:
    if config.route is RoutePolicy.TRACE:
        return requests.instance_names
    if config.pd is not None:
        return tuple([f"p{k}" for k in range(config.pd[0])]
                     + [f"d{k}" for k in range(config.pd[1])])
    return tuple(f"i{k}" for k in range(config.total_instances))


def _token_times(requests: RequestArrays, keep: np.ndarray, tt_off: np.ndarray,
                 out_len: np.ndarray, tt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets over every request, token times): the unused slots of requests that asked for
    zero output tokens dropped."""
    n = requests.num_requests
    sub_want = np.maximum(requests.output_tokens.astype(np.int64), 0)[keep]
    take = np.repeat(np.arange(len(out_len)), out_len)
    pos = np.arange(len(tt)) - np.repeat(tt_off[:-1], out_len)
    tt_kept = tt[pos < sub_want[take]]
    lengths = np.zeros(n, dtype=np.int64)
    lengths[keep] = sub_want
    token_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=token_offsets[1:])
    return token_offsets, tt_kept


def _result(requests: RequestArrays, keep: np.ndarray, tt_off: np.ndarray, out_len: np.ndarray,
            out: tuple[np.ndarray, ...], config: SimConfig) -> SimResult:
    """The loop's arrays as a `SimResult` over every request (NaN or −1 where one never ran)."""
    n = requests.num_requests
    (sched, first, finish, tt, npre, cached, comp, recomp, inst, pf_inst, s_inst, s_start,
     s_end, s_pf, s_dec, s_run, s_wait, s_used, s_pre, totals, busy, xfer, dec_start,
     s_sched, s_need, s_free, s_recomp) = out
    columns = _scatter(n, keep, {
        "scheduled_s": (sched, np.nan), "first_token_s": (first, np.nan),
        "finish_s": (finish, np.nan), "num_preemptions": (npre, 0), "cached_tokens": (cached, 0),
        "computed_tokens": (comp, 0), "recomputed_tokens": (recomp, 0),
        "instance": (inst, -1), "prefill_instance": (pf_inst, -1),
        "kv_transfer_s": (xfer, np.nan), "decode_start_s": (dec_start, np.nan),
    })
    token_offsets, tt_kept = _token_times(requests, keep, tt_off, out_len, tt)
    return SimResult(
        scheduled_s=columns["scheduled_s"], first_token_s=columns["first_token_s"],
        finish_s=columns["finish_s"], token_offsets=token_offsets, token_times_s=tt_kept,
        num_preemptions=columns["num_preemptions"], cached_tokens=columns["cached_tokens"],
        computed_tokens=columns["computed_tokens"],
        recomputed_tokens=columns["recomputed_tokens"], instance=columns["instance"],
        prefill_instance=columns["prefill_instance"],
        instance_labels=_instance_labels(config, requests),
        kv_transfer_s=columns["kv_transfer_s"], decode_start_s=columns["decode_start_s"],
        step_instance=s_inst, step_start_s=s_start, step_end_s=s_end,
        step_prefill_tokens=s_pf, step_decode_tokens=s_dec, step_num_running=s_run,
        step_num_waiting=s_wait, step_kv_blocks_used=s_used, step_num_preempted=s_pre,
        step_recomputed_tokens=s_recomp,
        step_num_scheduled=s_sched, step_head_blocks_needed=s_need, step_kv_blocks_free=s_free,
        kv_blocks_total=config.kv_blocks - 1, busy_s=busy, decode_stall_s=float(totals[0]),
        hbm_bytes=float(totals[1]), kv_transfer_bytes=float(totals[2]),
        prefix_reread_bytes=float(totals[3]), host_overhead_s=float(totals[4]),
        rejected_requests=int(n - keep.size + totals[5]),
    )


def _scatter(n: int, keep: np.ndarray, columns: dict[str, tuple[np.ndarray, float]]
             ) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, (values, fill) in columns.items():
        full = np.full(n, fill, dtype=values.dtype)
        full[keep] = values
        out[name] = full
    return out


def _subset(requests: RequestArrays, keep: np.ndarray) -> RequestArrays:
    """The requests at `keep` (chains re-sliced; chain ids keep their meaning)."""
    offsets, ids = _slice_lists(requests.chain_offsets, requests.chain_ids, keep)
    out_offsets, out_ids = _slice_lists(requests.output_offsets, requests.output_ids, keep)
    codes = None if requests.instance_codes is None else requests.instance_codes[keep]
    return RequestArrays(
        arrival_s=requests.arrival_s[keep], prompt_tokens=requests.prompt_tokens[keep],
        output_tokens=requests.output_tokens[keep], chain_offsets=offsets, chain_ids=ids,
        chain_block_tokens=requests.chain_block_tokens, num_chain_ids=requests.num_chain_ids,
        output_offsets=out_offsets, output_ids=out_ids,
        instance_codes=codes, instance_names=requests.instance_names,
    )


def _slice_lists(offsets: np.ndarray | None, values: np.ndarray | None, keep: np.ndarray
                 ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The lists at `keep` of a flattened list column (offsets, values)."""
    if offsets is None or values is None:
        return None, None
    counts = np.diff(offsets)[keep]
    out = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    idx = np.repeat(offsets[keep], counts) + _segment_positions(counts)
    return out, values[idx]
