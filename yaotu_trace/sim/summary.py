"""One simulated run of `trace simulate`: the trace as request arrays, the engine's result as the
canonical table and step log, and the `simulation` report section (latency, throughput, work).

The simulator's modules that touch pandas and pyarrow (`sim.compare` builds on this one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from yaotu_trace.data.report import Distribution
from yaotu_trace.data.schema import CANONICAL_COLUMNS, Trace
from yaotu_trace.data.steplog import STEP_COLUMNS, StepLog
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.sim.config import RoutePolicy, SimConfig
from yaotu_trace.sim.failures import FAILED_ERROR, FAILED_STATUS, Failures
from yaotu_trace.sim.run import CalibrationFit, RequestArrays, SimResult, simulate_requests
from yaotu_trace.sim.scenario import ResolvedScenario, Scenario, resolve_scenario

TIMING_COLUMNS = ("scheduled_s", "first_token_s", "finish_s", "token_times_s",
                  "num_preemptions", "cached_tokens", "instance", "prefill_instance",
                  "decode_instance", "decode_start_s", "kv_transfer_s")


def request_arrays(trace: Trace, block_size: int) -> tuple[RequestArrays, list[str]]:
    """The simulator's requests, with chain ids when the trace carries prompt content."""
    df = trace.requests
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)
    prompt = df["prompt_len"].to_numpy(dtype=np.int64)
    output = df["output_len"].to_numpy(dtype=np.int64)
    codes, names = _trace_instances(trace)
    notes: list[str] = []
    if trace.has("model") and df["model"].nunique() > 1:
        notes.append(f"the trace names {df['model'].nunique()} models; all requests run on the "
                     "simulated model (their prefix caches stay separate)")
    column = trace.content_column
    if column is None or not trace.has(column):
        notes.append("the trace carries no prompt content (token or block ids): no request can "
                     "hit another's prefix, so the prefix cache gives no hits; the hit ratio "
                     "reflects the missing content, not the engine")
        return RequestArrays(arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
                             instance_codes=codes, instance_names=names), notes
    prepared = prepare(trace)
    source = prepared.source_block_size
    chain_block = block_size
    if source is not None:
        if source % block_size == 0:
            chain_block = source
        elif block_size % source != 0:
            raise ConfigError(f"--block-size {block_size} and the trace's {source}-token block "
                              "ids do not divide one another; pick a block size that divides "
                              f"{source} or a multiple of it")
        if chain_block > block_size:
            notes.append(f"prompt content is {source}-token block ids: an engine block is "
                         f"shared only inside a shared {source}-token block (block ids hide the "
                         "tokens); a trailing partial id is never a hit")
    # NOTE: both engines cache generated tokens too (vLLM hashes every full block of prompt +
    # output; SGLang inserts the finished sequence into its tree), so when the trace gives the
    # output token ids a later prompt that repeats an answer hits its blocks. Block ids hide
    # the answer's tokens: they name the prompt's blocks only.
    outputs = source is None and trace.has("output_tokens")
    if outputs:
        prepared = prepare(trace, with_outputs=True)
    rules = rules_for("vllm", block_size_tokens=chain_block, cache_outputs=outputs)
    chains = prepared.chains(rules)
    if outputs:
        notes.append("generated blocks are cached under the trace's output token ids, so a "
                     "later prompt that repeats an answer hits them")
    else:
        notes.append("output token ids are unknown: generated blocks are private to their "
                     "request (hit only by the request itself when it resumes after a "
                     "preemption)")
    return RequestArrays(
        arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
        chain_offsets=chains.offsets, chain_ids=chains.ids, chain_block_tokens=chain_block,
        num_chain_ids=chains.num_distinct, output_offsets=chains.output_offsets,
        output_ids=chains.output_ids, instance_codes=codes, instance_names=names,
    ), notes


def _trace_instances(trace: Trace) -> tuple[np.ndarray | None, tuple[str, ...]]:
    """(code per request, instance names in sorted order) of the trace's `instance` column
    (code −1 where it is empty), or (None, ()) without one: what `--route trace` follows."""
    if not trace.has("instance"):
        return None, ()
    codes, names = pd.factorize(trace.requests["instance"].astype("string"), sort=True)
    return codes.astype(np.int64), tuple(str(n) for n in names)


def _fit_trace_route(resolved: ResolvedScenario, requests: RequestArrays,
                     scenario: Scenario) -> ResolvedScenario:
    """Under `--route trace` the cluster has the trace's instances (its `instance` column)."""
    names = requests.instance_names
    if resolved.config.route is not RoutePolicy.TRACE:
        return resolved
    if not names:
        raise ConfigError("--route trace follows the trace's instance column, which this trace "
                          "lacks; add it or pick another --route")
    if scenario.instances is not None and scenario.instances != len(names):
        raise ConfigError(f"--instances {scenario.instances} conflicts with --route trace: the "
                          f"trace names {len(names)} instance(s); drop --instances")
    return replace(resolved, config=replace(resolved.config, instances=len(names)))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkLedger:
    """Work one scenario did: the quantities remedies save or add (cost-model §8)."""

    prefill_tokens: int
    recomputed_tokens: int
    decode_tokens: int
    hit_tokens: int
    steps: int
    host_overhead_s: float
    decode_stall_s: float
    prefix_reread_bytes: float
    kv_transfer_bytes: float
    hbm_bytes: float
    gpu_busy_s: float
    gpu_provisioned_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLoad:
    """One instance's share of the run: how routing spread the work."""

    instance: str
    requests: int
    prefill_tokens: int
    decode_tokens: int
    busy_share: float | None
    preemptions: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationSummary:
    """The `simulation` report section: configuration, latency, throughput, work."""

    scenario: str
    model: str
    gpu: str
    scheduler: str
    instances: str
    kv_blocks_per_instance: int
    kv_bytes_per_token: int
    block_size_tokens: int
    max_num_seqs: int
    max_batched_tokens: int
    chunked_prefill: bool
    prefix_caching: bool
    route: str
    step_model: str
    requests: int
    finished: int
    rejected: int
    makespan_s: float | None
    throughput_rps: float | None
    output_tokens_per_s: float | None
    ttft_s: Distribution
    itl_s: Distribution
    tpot_s: Distribution
    queue_s: Distribution
    e2e_s: Distribution
    max_itl_s: float | None
    preemptions: int
    preempted_requests: int
    hit_ratio: float | None
    kv_usage_mean: float | None
    kv_usage_max: float | None
    work: WorkLedger
    per_instance: tuple[InstanceLoad, ...] = ()
    calibration: CalibrationFit | None = None
    notes: tuple[str, ...] = ()
    failed: int = 0  # injected failures (`--fail-share`), among the finished


@dataclass(frozen=True, slots=True, kw_only=True)
class SimRun:
    """One scenario's outputs: the canonical table, the step log and the summary."""

    resolved: ResolvedScenario
    result: SimResult
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: SimulationSummary


def _arrow_list(offsets: np.ndarray, values: np.ndarray, valid: np.ndarray) -> pd.Series:
    arr = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()),
                                        pa.array(values, type=pa.float64()),
                                        mask=pa.array(~valid))
    return pd.Series(pd.arrays.ArrowExtensionArray(arr))


REJECTED_ERROR = ("the simulated engine rejected it: its prompt and output need more KV blocks "
                  "than one instance's pool holds (--kv-blocks)")


def _labels(codes: np.ndarray, labels: tuple[str, ...]) -> pd.Series:
    names = np.array((*labels, ""), dtype=object)
    out = pd.Series(names[codes], dtype="string")
    return out.mask(codes < 0)


def output_tables(trace: Trace, result: SimResult, config: SimConfig
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(canonical request table with the simulated timing, step log)."""
    df = trace.requests.drop(columns=[c for c in TIMING_COLUMNS if c in trace.requests.columns])
    df = df.reset_index(drop=True).copy()
    ran = np.isfinite(result.finish_s)
    df["scheduled_s"] = pd.Series(result.scheduled_s, dtype="float64")
    df["first_token_s"] = pd.Series(result.first_token_s, dtype="float64")
    df["finish_s"] = pd.Series(result.finish_s, dtype="float64")
    df["token_times_s"] = _arrow_list(result.token_offsets, result.token_times_s, ran)
    df["num_preemptions"] = pd.array(np.where(ran, result.num_preemptions, 0), dtype="Int64"
                                     ).astype("Int64")
    df.loc[~ran, "num_preemptions"] = pd.NA
    df["cached_tokens"] = pd.array(result.cached_tokens, dtype="Int64")
    df.loc[~ran, "cached_tokens"] = pd.NA
    df["instance"] = _labels(result.instance, result.instance_labels)
    if config.pd is not None:
        df["prefill_instance"] = _labels(result.prefill_instance, result.instance_labels)
        # a request with one output token never leaves its prefill instance
        decoded = np.where(result.instance >= config.pd[0], result.instance, -1)
        df["decode_instance"] = _labels(decoded, result.instance_labels)
        df["decode_start_s"] = pd.Series(result.decode_start_s, dtype="float64")
        df["kv_transfer_s"] = pd.Series(result.kv_transfer_s, dtype="float64")
    failed = (np.zeros(len(df), dtype=bool) if result.failed is None
              else np.asarray(result.failed, dtype=bool))
    if failed.any():
        # a request that failed mid-stream generated only the tokens it streamed
        generated = np.diff(result.token_offsets)
        df["output_len"] = pd.array(np.where(failed, generated, df["output_len"]),
                                    dtype=df["output_len"].dtype)
    if not ran.all() or failed.any():
        # Only a request too large for one instance's empty pool never runs (vLLM refuses it
        # too), and one fails only by injection (`--fail-share`); a table whose every request
        # ran and succeeded keeps its columns as they were.
        status = np.where(~ran, "rejected", np.where(failed, FAILED_STATUS, "ok"))
        error = np.where(~ran, REJECTED_ERROR, np.where(failed, FAILED_ERROR, ""))
        df["status"] = pd.Series(status, dtype="string")
        df["error"] = pd.Series(error, dtype="string").mask(ran & ~failed)

    df = df[[c for c in CANONICAL_COLUMNS if c in df.columns]]
    steps = pd.DataFrame({
        "instance": _labels(result.step_instance, result.instance_labels),
        "start_s": result.step_start_s,
        "end_s": result.step_end_s,
        "prefill_tokens": result.step_prefill_tokens,
        "decode_tokens": result.step_decode_tokens,
        "num_running": result.step_num_running,
        "num_waiting": result.step_num_waiting,
        "kv_blocks_used": result.step_kv_blocks_used,
        "kv_blocks_total": np.full(result.num_steps, result.kv_blocks_total, dtype=np.int64),
        "num_preempted": result.step_num_preempted,
        "recomputed_tokens": result.step_recomputed_tokens,
        "head_blocks_needed": pd.array(result.step_head_blocks_needed, dtype="Int64"),
        "kv_blocks_free": result.step_kv_blocks_free,
    })
    steps.loc[result.step_head_blocks_needed < 0, "head_blocks_needed"] = pd.NA
    # In start order across instances, so the log written with --steps-out streams.
    steps = steps.sort_values("start_s", kind="stable").reset_index(drop=True)
    return df, steps[[c for c in STEP_COLUMNS if c in steps.columns]]


def _inter_token_gaps(result: SimResult) -> np.ndarray:
    """Gaps between consecutive tokens of one request (never across two requests)."""
    tt, off = result.token_times_s, result.token_offsets
    gaps = np.diff(tt)
    starts = off[1:-1] - 1
    keep = np.ones(len(gaps), dtype=bool)
    boundary = starts[(starts >= 0) & (starts < len(gaps))]
    keep[boundary] = False
    return gaps[keep] if len(gaps) else np.array([], dtype=np.float64)


def _work_ledger(result: SimResult, cfg: SimConfig, ran: np.ndarray,
                 makespan: float | None) -> WorkLedger:
    tp = cfg.tensor_parallel
    return WorkLedger(
        prefill_tokens=int(result.step_prefill_tokens.sum()),
        recomputed_tokens=int(result.recomputed_tokens.sum()),
        decode_tokens=int(result.step_decode_tokens.sum()),
        hit_tokens=int(result.cached_tokens[ran].sum()),
        steps=result.num_steps,
        host_overhead_s=result.host_overhead_s,
        decode_stall_s=result.decode_stall_s,
        prefix_reread_bytes=result.prefix_reread_bytes,
        kv_transfer_bytes=result.kv_transfer_bytes,
        hbm_bytes=result.hbm_bytes,
        gpu_busy_s=float(result.busy_s.sum()) * tp,
        gpu_provisioned_s=(makespan or 0.0) * cfg.gpus,
    )


def _run_notes(notes: list[str], result: SimResult, cfg: SimConfig) -> tuple[str, ...]:
    all_notes = list(notes)
    if result.rejected_requests:
        all_notes.append(f"{result.rejected_requests} request(s) need more KV blocks than one "
                         f"instance has ({cfg.kv_blocks - 1} usable) and were not run")
    if cfg.pd is not None:
        all_notes.append("P/D: the prefill instance frees a request's KV when its first token is "
                         "out; the transfer occupies only the link (not the pool)")
    return tuple(all_notes)


def _scheduler_text(resolved: ResolvedScenario) -> str:
    """The engine release and how it schedules, e.g. 'vLLM 0.33, async scheduling'."""
    mode = "async scheduling" if resolved.config.async_scheduling else "synchronous"
    return f"{resolved.engine.label}, {mode}"


def _instances_text(cfg: SimConfig) -> str:
    instances = (f"{cfg.pd[0]} prefill + {cfg.pd[1]} decode" if cfg.pd is not None
                 else str(cfg.instances))
    if cfg.tensor_parallel > 1:
        instances += f" (TP{cfg.tensor_parallel})"
    return instances


def _route_text(cfg: SimConfig) -> str:
    """The route, with its shares under `weighted`."""
    if cfg.route_weights is None:
        return str(cfg.route)
    return f"{cfg.route} {','.join(f'{w:g}' for w in cfg.route_weights)}"


def _step_model_text(resolved: ResolvedScenario) -> str:
    """The step-time model in words: the fitted line, or the roofline's GPU and efficiencies."""
    if resolved.calibration is not None:
        c = resolved.calibration
        return (f"fitted: {c.a_s * 1e3:.3g} ms + {c.b_s_per_prefill_token * 1e6:.3g} µs/"
                f"prefill token + {c.c_s_per_context_token * 1e9:.3g} ns/context token")
    cfg = resolved.config
    tp = cfg.tensor_parallel
    sc = cfg.step_cost
    mfu = sc.flops_per_s / (resolved.gpu.bf16_flops * tp)
    mbu = sc.bytes_per_s / (resolved.gpu.hbm_bytes_per_s * tp)
    return (f"roofline: {resolved.gpu.name}, MFU {mfu:.2f}, MBU {mbu:.2f}, "
            f"+{sc.overhead_s * 1e3:.3g} ms/step")


def _per_instance(result: SimResult, makespan: float | None) -> tuple[InstanceLoad, ...]:
    """How routing spread the work over the instances (empty for one instance)."""
    per_instance: list[InstanceLoad] = []
    if len(result.instance_labels) > 1:
        served = np.where(result.prefill_instance >= 0, result.prefill_instance, result.instance)
        for k, label in enumerate(result.instance_labels):
            here = result.step_instance == k
            routed = (served == k) | (result.instance == k)
            per_instance.append(InstanceLoad(
                instance=label, requests=int(routed.sum()),
                prefill_tokens=int(result.step_prefill_tokens[here].sum()),
                decode_tokens=int(result.step_decode_tokens[here].sum()),
                busy_share=float(result.busy_s[k] / makespan) if makespan else None,
                preemptions=int(result.step_num_preempted[here].sum()),
            ))
    return tuple(per_instance)


def summarize_run(trace: Trace, resolved: ResolvedScenario, result: SimResult,
              notes: list[str]) -> SimulationSummary:
    """Latency percentiles, throughput and the work ledger of one simulated run."""
    cfg = resolved.config
    df = trace.requests
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)
    prompt = df["prompt_len"].to_numpy(dtype=np.int64)
    output = df["output_len"].to_numpy(dtype=np.int64)
    ran = np.isfinite(result.finish_s)
    multi = ran & (output > 1)
    tpot = np.where(multi, (result.finish_s - result.first_token_s) / np.maximum(output - 1, 1),
                    np.nan)
    itl = _inter_token_gaps(result)
    makespan = float(np.nanmax(result.finish_s) - arrival.min()) if ran.any() else None
    tput = ran.sum() / makespan if makespan else None
    out_tok = output[ran].sum() / makespan if makespan else None
    usage = (result.step_kv_blocks_used / max(result.kv_blocks_total, 1)
             if result.num_steps else np.array([]))
    step_s = result.step_end_s - result.step_start_s
    usage_mean = float((usage * step_s).sum() / step_s.sum()) if step_s.sum() > 0 else None
    hit = float(result.cached_tokens[ran].sum() / prompt[ran].sum()) if prompt[ran].sum() else None
    return SimulationSummary(
        scenario=resolved.name, model=resolved.model.name, gpu=resolved.gpu.name,
        scheduler=_scheduler_text(resolved), instances=_instances_text(cfg),
        kv_blocks_per_instance=cfg.kv_blocks, kv_bytes_per_token=resolved.kv_bytes_per_token,
        block_size_tokens=cfg.block_size_tokens, max_num_seqs=cfg.max_num_seqs,
        max_batched_tokens=cfg.max_batched_tokens, chunked_prefill=cfg.chunked_prefill,
        prefix_caching=cfg.prefix_caching, route=_route_text(cfg),
        step_model=_step_model_text(resolved),
        requests=len(df), finished=int(ran.sum()), rejected=result.rejected_requests,
        makespan_s=makespan, throughput_rps=float(tput) if tput is not None else None,
        output_tokens_per_s=float(out_tok) if out_tok is not None else None,
        ttft_s=Distribution.of((result.first_token_s - arrival)[ran]),
        itl_s=Distribution.of(itl), tpot_s=Distribution.of(tpot[multi]),
        queue_s=Distribution.of((result.scheduled_s - arrival)[ran]),
        e2e_s=Distribution.of((result.finish_s - arrival)[ran]),
        max_itl_s=float(itl.max()) if itl.size else None,
        preemptions=int(result.num_preemptions.sum()),
        preempted_requests=int((result.num_preemptions > 0).sum()),
        hit_ratio=hit, kv_usage_mean=usage_mean,
        kv_usage_max=float(usage.max()) if usage.size else None,
        work=_work_ledger(result, cfg, ran, makespan), per_instance=_per_instance(result, makespan),
        calibration=resolved.calibration, notes=_run_notes(notes, result, cfg),
        failed=0 if result.failed is None else int(result.failed.sum()),
    )


def run_scenario(trace: Trace, scenario: Scenario,
                 step_logs: Mapping[str, StepLog] | None = None) -> SimRun:
    """Resolve, simulate and tabulate one scenario on `trace` (`step_logs`: the step log its
    `calibrate` names, by path)."""
    resolved = resolve_scenario(scenario, step_logs)
    requests, notes = request_arrays(trace, resolved.config.block_size_tokens)
    resolved = _fit_trace_route(resolved, requests, scenario)
    failures = (None if not scenario.fail_share
                else Failures(share=scenario.fail_share, instance=scenario.fail_instance,
                              seed=scenario.fail_seed or 0))
    result = simulate_requests(requests, resolved.config, failures)
    table, steps = output_tables(trace, result, resolved.config)
    summary = summarize_run(trace, resolved, result, notes)
    return SimRun(resolved=resolved, result=result, requests=table, steps=steps, summary=summary)
