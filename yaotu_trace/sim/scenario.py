"""`trace simulate` / `trace compare` orchestration: scenario → engine config → sim → tables.

Resolves a scenario (CLI options or a TOML file of the same options) against the model and
GPU catalogs into a `sim.SimConfig`, turns a validated `Trace` into the simulator's request
arrays (prefix-cache identity from `replay.blocks.build_block_chains`), runs `sim.simulate`,
and builds the canonical output table (timing columns), the step log and the report sections.
The only simulation module that touches pandas.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from yaotu_trace.catalog.gpus import DEFAULT_LINK_GBPS, GpuSpec, find_gpu, find_moe
from yaotu_trace.catalog.models import ModelSpec, find_model
from yaotu_trace.catalog.units import MAX_BLOCK_TOKENS
from yaotu_trace.data.report import Distribution
from yaotu_trace.data.schema import STEP_COLUMNS, Trace
from yaotu_trace.errors import ConfigError, ConfigFileError, TraceReadError
from yaotu_trace.sim import (
    CalibrationFit,
    RequestArrays,
    RoutePolicy,
    SchedulerKind,
    SimConfig,
    SimResult,
    StepCost,
    fit_step_cost,
    simulate,
)

# Proposed defaults (cost-model §2.4 "Realistic efficiency factors" and §3.3).
DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.7
DEFAULT_OVERHEAD_MS = 2.0  # host-side scheduling + launch per step [proposed default]
DEFAULT_ACTIVATION_GIB = 2.0  # per GPU: peak activations + CUDA graphs [proposed default]
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.33 (engines.md §1.6)
DEFAULT_LINK_LATENCY_MS = 0.57  # Mooncake's fitted α (cost-model §3.3)
TIMING_COLUMNS = ("scheduled_s", "first_token_s", "finish_s", "token_times_s",
                  "num_preemptions", "cached_tokens", "instance", "prefill_instance",
                  "decode_instance")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """User-level options of one simulated deployment (None: the resolved default)."""

    name: str | None = None
    model: str | None = None
    gpu: str | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    chunked_prefill: bool | None = None
    long_prefill_token_threshold: int | None = None
    prefix_caching: bool | None = None
    instances: int | None = None
    route: str | None = None
    pd: str | None = None
    link_gbps: float | None = None
    link_latency_ms: float | None = None
    layerwise_overlap: bool | None = None
    scheduler: str | None = None
    gpu_memory_utilization: float | None = None
    tp: int | None = None
    mfu: float | None = None
    mbu: float | None = None
    overhead_ms: float | None = None
    host_gap_ms: float | None = None
    calibrate: str | None = None

    def merged(self, override: Scenario) -> Scenario:
        """This scenario with every option `override` sets taken from it."""
        changes = {f.name: getattr(override, f.name) for f in fields(self)
                   if getattr(override, f.name) is not None}
        return replace(self, **changes)


_SCENARIO_KEYS = {f.name for f in fields(Scenario)}

# The largest KV pool per instance and cluster the simulator sizes its tables for: an H100 holds
# ~40,000 16-token blocks of Llama-3.1-8B, so 1e7 is far beyond any GPU; the block tables of
# every instance (three int64 arrays) stay under ~3 GiB.
MAX_KV_BLOCKS = 10**7
MAX_CLUSTER_BLOCKS = 2**27
MAX_INSTANCES = 10**4
MAX_COUNT = 2**31 - 1  # seats, token budgets, thresholds, block size: the engine's int range

# Every numeric option: (lowest, highest, whether the lowest is allowed). Checked the same way
# for the command line (`check_scenario`, exit 2) and a scenario file (`load_scenario`, exit 3).
_RANGES: dict[str, tuple[float, float, bool]] = {
    "kv_blocks": (2, MAX_KV_BLOCKS, True),
    "block_size": (1, MAX_BLOCK_TOKENS, True),
    "max_num_seqs": (1, MAX_COUNT, True),
    "max_batched_tokens": (1, MAX_COUNT, True),
    "long_prefill_token_threshold": (0, MAX_COUNT, True),
    "instances": (1, MAX_INSTANCES, True),
    "tp": (1, 1024, True),
    "link_gbps": (0, 1e9, False),
    "link_latency_ms": (0, 1e9, True),
    "gpu_memory_utilization": (0, 1, False),
    "mfu": (0, 1, False),
    "mbu": (0, 1, False),
    "overhead_ms": (0, 1e9, True),
    "host_gap_ms": (0, 1e9, True),
}
_KINDS = {f.name: str(f.type).split(" |")[0] for f in fields(Scenario)}
_KIND_WORDS = {"int": "a whole number", "float": "a number", "bool": "true or false",
               "str": "text"}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _bound(value: float) -> str:
    """A range's end as people read it: 10,000,000 rather than 1e+07."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _range_problem(name: str, value: float) -> str | None:
    """Why `value` is out of `name`'s range, or None when it is in it."""
    bounds = _RANGES.get(name)
    if bounds is None:
        return None
    low, high, closed = bounds
    if not math.isfinite(value) or value > high or value < low or (value == low and not closed):
        return (f"must be {'>=' if closed else '>'} {low:g} and <= {_bound(high)}"
                if high != 1 else f"must be in {'[' if closed else '('}{low:g}, 1]")
    return None


def _float(value: float) -> float:
    """`value` as a float; an integer too large for one is infinite (and out of range)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def check_scenario(scenario: Scenario) -> Scenario:
    """Check every option a scenario sets against its range; a `ConfigError` (a usage error)
    names the option. The CLI's simulate and compare options go through here via `resolve`."""
    for name in _RANGES:
        value = getattr(scenario, name)
        if value is None:
            continue
        problem = _range_problem(name, _float(value))
        if problem is not None:
            raise ConfigError(f"{_option(name)} {value!r} {problem}")
    return scenario


def _typed(path: Path, key: str, name: str, value: Any) -> Any:
    """A scenario file's value of the type its option takes (an int is a fine float), else a
    `ConfigFileError` naming the file, the key, the value and the expected type."""
    kind = _KINDS[name]
    if name == "pd" and isinstance(value, list) and len(value) == 2 \
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        value = f"{value[0]}:{value[1]}"
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }[kind]
    if not ok:
        got = {bool: "a boolean", str: "text", int: "a whole number", float: "a number",
               list: "a list", dict: "a table"}.get(type(value), type(value).__name__)
        example = {"int": f"{key} = 4000", "float": f"{key} = 0.5",
                   "bool": f"{key} = true", "str": f'{key} = "..."'}[kind]
        hint = (" (write it without quotes)" if isinstance(value, str)
                and kind in ("int", "float") else "")
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        raise ConfigFileError(f"{path}: key '{key}': {shown} is {got}, expected "
                              f"{_KIND_WORDS[kind]}{hint}; e.g. {example}")
    if kind in ("int", "float"):
        problem = _range_problem(name, _float(value))
        if problem is not None:
            raise ConfigFileError(f"{path}: key '{key}': {value!r} {problem} (the range of "
                                  f"{_option(name)})")
    check = _NAMED.get(name)
    if check is not None:
        try:
            check(value)
        except ConfigError as exc:
            raise ConfigFileError(f"{path}: key '{key}': {exc}") from exc
    return float(value) if kind == "float" else value


# Options naming something, checked when a scenario file is read so the error names the file
# (the parsers are defined further down, hence the lambdas).
_NAMED: dict[str, Callable[[Any], Any]] = {
    "model": find_model,
    "gpu": find_gpu,
    "pd": lambda v: _parse_pd(v),
    "scheduler": lambda v: _choice(SchedulerKind, v, "scheduler"),
    "route": lambda v: _choice(RoutePolicy, v, "route"),
}


def load_scenario(path: Path) -> Scenario:
    """Read a scenario TOML file: top-level keys are the CLI options (dashes or underscores).

    Each value must have its option's type and range; a problem is a `ConfigFileError` naming
    the file and the key.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TraceReadError(f"{path}: no such scenario file; check the --scenario path") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: not valid TOML ({str(exc).splitlines()[0]})") from exc
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read the scenario file ({exc.strerror or exc}); "
                              "check the --scenario path") from exc
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name == "gpu_memory_util":
            name = "gpu_memory_utilization"
        if name not in _SCENARIO_KEYS:
            raise ConfigFileError(f"{path}: unknown option {key!r}; options are "
                              f"{', '.join(sorted(k.replace('_', '-') for k in _SCENARIO_KEYS))}")
        value = _typed(path, key, name, value)
        if name == "calibrate":
            value = str((path.parent / value) if not Path(value).is_absolute() else value)
        values[name] = value
    values.setdefault("name", path.stem)
    return Scenario(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedScenario:
    """A scenario resolved against the catalogs: the engine config plus what it came from."""

    name: str
    model: ModelSpec
    gpu: GpuSpec
    config: SimConfig
    kv_bytes_per_token: int
    calibration: CalibrationFit | None
    derived: dict[str, Any] = field(default_factory=dict)


def _given(value: Any, default: Any) -> Any:
    """`value` when the scenario sets it (0 and False included), else `default`."""
    return default if value is None else value


def _parse_pd(text: str) -> tuple[int, int]:
    try:
        p, d = (int(x) for x in str(text).split(":"))
    except ValueError as exc:
        raise ConfigError(f"--pd {text!r}: give prefill:decode instance counts, e.g. --pd 1:3"
                          ) from exc
    if p < 1 or d < 1:
        raise ConfigError(f"--pd {text}: needs at least one prefill and one decode instance")
    return p, d


def _choice(enum: type[SchedulerKind] | type[RoutePolicy], value: str, option: str) -> Any:
    try:
        return enum(str(value).lower())
    except ValueError as exc:
        raise ConfigError(f"--{option} {value!r}: choose one of "
                          f"{', '.join(e.value for e in enum)}") from exc


def batch_defaults(gpu: GpuSpec, tp: int, scheduler: SchedulerKind) -> tuple[int, int]:
    """(max_batched_tokens, max_num_seqs) defaults by GPU memory (engines.md §1.7, §2.5)."""
    gib = gpu.memory_bytes * tp / 2**30
    if scheduler is SchedulerKind.SGLANG:
        per_gpu = gpu.memory_bytes / 1e9
        chunk = 2048 if per_gpu < 20 else 4096 if per_gpu < 60 else 8192 if per_gpu < 160 else 16384
        return chunk, 1024
    if gib >= 160:
        return 16384, 1024
    if gib >= 70 and not gpu.name.startswith("A100"):
        return 8192, 1024
    return 2048, 256


def kv_blocks_from_memory(model: ModelSpec, gpu: GpuSpec, *, tp: int, block_size: int,
                          utilization: float, kv_bytes_per_token: int) -> int:
    """`num_gpu_blocks` of one instance: (memory·util − weights − activations) / block bytes.

    With tensor parallelism each rank holds `ceil(n_kv/TP)/n_kv` of the KV (replicated heads
    when TP > n_kv; the MLA latent cache is replicated on every rank), cost-model §1.1.
    """
    weights = 2.0 * model.total_params
    budget = gpu.memory_bytes * utilization * tp - weights - DEFAULT_ACTIVATION_GIB * 2**30 * tp
    if model.attention == "mla":
        replication = float(tp)
    else:
        replication = tp * math.ceil(model.kv_heads / tp) / model.kv_heads
    per_block = kv_bytes_per_token * replication * block_size
    blocks = int(budget // per_block) if budget > 0 else 0
    if blocks < 2:
        raise ConfigError(
            f"{model.name} ({weights / 1e9:.0f} GB of bf16 weights) leaves no KV memory on "
            f"{tp}× {gpu.name} at utilization {utilization}; add --tp, a larger GPU, or "
            "--kv-blocks"
        )
    return blocks


def step_cost_for(model: ModelSpec, gpu: GpuSpec, *, tp: int, mfu: float, mbu: float,
                  overhead_ms: float, kv_bytes_per_token: int, host_gap_ms: float = 0.0
                  ) -> StepCost:
    """The roofline step cost of `model` on `tp` × `gpu` (cost-model §2.1–2.2)."""
    if not (0 < mfu <= 1 and 0 < mbu <= 1):
        raise ConfigError(f"--mfu {mfu} and --mbu {mbu} must be in (0, 1]")
    moe = find_moe(model.name)
    if moe is not None:
        lm_head = moe.lm_head_params
        expert_bytes = 2.0 * moe.routed_expert_params
    else:
        lm_head = (model.total_params - model.active_nonembedding_params) // 2
        expert_bytes = 0.0
    if model.attention == "mla":
        lora = model.kv_lora_rank or 0
        rope = model.qk_rope_head_dim or 0
        attn = model.layers * (2 * model.query_heads * (lora + rope) + 2 * model.query_heads * lora)
    else:
        head_dim = model.head_dim or model.hidden_size // model.query_heads
        attn = 4 * model.layers * model.query_heads * head_dim
    return StepCost(
        linear_params=float(model.active_nonembedding_params + lm_head),
        attention_flops_per_token_pair=float(attn),
        dense_weight_bytes=2.0 * model.total_params - expert_bytes,
        expert_weight_bytes=expert_bytes,
        experts=moe.experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        kv_bytes_per_token=float(kv_bytes_per_token),
        flops_per_s=gpu.bf16_flops * mfu * tp,
        bytes_per_s=gpu.hbm_bytes_per_s * mbu * tp,
        overhead_s=overhead_ms / 1e3,
        host_gap_s=host_gap_ms / 1e3,
    )


def calibrate_from(path: Path, block_size: int) -> CalibrationFit:
    """Fit `a + b·prefill_tokens + c·Σcontext` on a real step log (Σcontext: KV in use).

    The log is read whole, even a Parquet log in start order that other commands stream: the
    least-squares fit takes every step at once.
    """
    from yaotu_trace.ingest import read_steps

    steps = read_steps(path, "--calibrate").frame()
    if "prefill_tokens" not in steps.columns:
        raise ConfigError(f"{path}: --calibrate needs a 'prefill_tokens' column in the step log")
    duration = (steps["end_s"] - steps["start_s"]).to_numpy(dtype=np.float64)
    prefill = steps["prefill_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    if "kv_blocks_used" in steps.columns and steps["kv_blocks_used"].notna().any():
        context = steps["kv_blocks_used"].to_numpy(dtype=np.float64, na_value=np.nan) * block_size
        source = f"kv_blocks_used × {block_size}"
    elif "decode_tokens" in steps.columns:
        context = steps["decode_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
        source = "decode_tokens (no kv_blocks_used in the log)"
    else:
        context = np.zeros_like(prefill)
        source = "none (the log has neither kv_blocks_used nor decode_tokens)"
    return fit_step_cost(prefill, context, duration, context_source=source)


def resolve(scenario: Scenario) -> ResolvedScenario:
    """Resolve a scenario's options into a `SimConfig` (defaults from the catalogs).

    An option given as 0 is checked like any other value, never replaced by its default.
    """
    check_scenario(scenario)
    if scenario.model is None:
        raise ConfigError("no model given; pass --model (see `trace models`) or set it in the "
                          "scenario file")
    if scenario.gpu is None:
        raise ConfigError("no GPU given; pass --gpu, e.g. --gpu H100-SXM")
    model = find_model(scenario.model)
    gpu = find_gpu(scenario.gpu)
    scheduler = _choice(SchedulerKind, _given(scenario.scheduler, "vllm"), "scheduler")
    route = _choice(RoutePolicy, _given(scenario.route, "round-robin"), "route")
    tp = _given(scenario.tp, 1)
    block_size = _given(scenario.block_size, 16)
    kv_b = model.kv_bytes_per_token
    util = _given(scenario.gpu_memory_utilization, DEFAULT_GPU_MEMORY_UTILIZATION)
    host_gap_ms = _given(scenario.host_gap_ms, 0.0)
    derived: dict[str, Any] = {}
    if scenario.kv_blocks is not None:
        kv_blocks = int(scenario.kv_blocks)
    else:
        kv_blocks = kv_blocks_from_memory(model, gpu, tp=tp, block_size=block_size,
                                          utilization=util, kv_bytes_per_token=kv_b)
        derived["kv_blocks"] = "from GPU memory"
    budget_default, seqs_default = batch_defaults(gpu, tp, scheduler)
    calibration = None
    if scenario.calibrate is not None:
        calibration = calibrate_from(Path(scenario.calibrate), block_size)
        cost = replace(calibration.step_cost(kv_b), host_gap_s=host_gap_ms / 1e3)
    else:
        cost = step_cost_for(model, gpu, tp=tp, mfu=_given(scenario.mfu, DEFAULT_MFU),
                             mbu=_given(scenario.mbu, DEFAULT_MBU),
                             overhead_ms=_given(scenario.overhead_ms, DEFAULT_OVERHEAD_MS),
                             kv_bytes_per_token=kv_b, host_gap_ms=host_gap_ms)
    pd_shape = _parse_pd(scenario.pd) if scenario.pd is not None else None
    link_gbps = _given(scenario.link_gbps, DEFAULT_LINK_GBPS)
    config = SimConfig(
        scheduler=scheduler,
        kv_blocks=kv_blocks,
        block_size_tokens=block_size,
        max_num_seqs=_given(scenario.max_num_seqs, seqs_default),
        max_batched_tokens=_given(scenario.max_batched_tokens, budget_default),
        chunked_prefill=True if scenario.chunked_prefill is None else scenario.chunked_prefill,
        long_prefill_token_threshold=_given(scenario.long_prefill_token_threshold, 0),
        prefix_caching=True if scenario.prefix_caching is None else scenario.prefix_caching,
        instances=_given(scenario.instances, 1),
        route=route,
        pd=pd_shape,
        link_bytes_per_s=link_gbps * 1e9 / 8,
        link_latency_s=_given(scenario.link_latency_ms, DEFAULT_LINK_LATENCY_MS) / 1e3,
        layerwise_overlap=True if scenario.layerwise_overlap is None
        else scenario.layerwise_overlap,
        layers=model.layers,
        tensor_parallel=tp,
        step_cost=cost,
    )
    if pd_shape is not None and scenario.instances not in (None, 1, sum(pd_shape)):
        raise ConfigError(f"--instances {scenario.instances} conflicts with --pd {scenario.pd}; "
                          "under disaggregation the instances are P + D")
    blocks = config.kv_blocks * config.total_instances
    if blocks > MAX_CLUSTER_BLOCKS:
        raise ConfigError(f"{config.total_instances} instance(s) × {config.kv_blocks} KV blocks "
                          f"= {blocks} blocks is beyond the {MAX_CLUSTER_BLOCKS} the simulator "
                          "holds; lower --kv-blocks or --instances")
    return ResolvedScenario(name=_given(scenario.name, "scenario"), model=model, gpu=gpu,
                            config=config, kv_bytes_per_token=kv_b, calibration=calibration,
                            derived=derived)


def request_arrays(trace: Trace, block_size: int) -> tuple[RequestArrays, list[str]]:
    """The simulator's requests, with chain ids when the trace carries prompt content."""
    from yaotu_trace.replay.prepare import prepare
    from yaotu_trace.replay.rules import rules_for

    df = trace.requests
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)
    prompt = df["prompt_len"].to_numpy(dtype=np.int64)
    output = df["output_len"].to_numpy(dtype=np.int64)
    notes: list[str] = []
    if trace.has("model") and df["model"].nunique() > 1:
        notes.append(f"the trace names {df['model'].nunique()} models; all requests run on the "
                     "simulated model (their prefix caches stay separate)")
    column = trace.content_column
    if column is None or not trace.has(column):
        notes.append("the trace carries no prompt content (token or block ids): no request can "
                     "hit another's prefix, so the prefix cache gives no hits; the hit ratio "
                     "reflects the missing content, not the engine")
        return RequestArrays(arrival_s=arrival, prompt_tokens=prompt, output_tokens=output), notes
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
    rules = rules_for("vllm", block_size_tokens=chain_block)
    chains = prepared.chains(rules)
    notes.append("output token ids are unknown: generated blocks are private to their request "
                 "(hit only by the request itself when it resumes after a preemption)")
    return RequestArrays(
        arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
        chain_offsets=chains.offsets, chain_ids=chains.ids, chain_block_tokens=chain_block,
        num_chain_ids=chains.num_distinct,
    ), notes


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
    from yaotu_trace.data.schema import CANONICAL_COLUMNS

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
    })
    # In start order across instances, so the log written with --steps-out streams.
    steps = steps.sort_values("start_s", kind="stable").reset_index(drop=True)
    return df, steps[list(STEP_COLUMNS)]


def summarize(trace: Trace, resolved: ResolvedScenario, result: SimResult,
              notes: list[str]) -> SimulationSummary:
    """Latency percentiles, throughput and the work ledger of one simulated run."""
    cfg = resolved.config
    df = trace.requests
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)
    prompt = df["prompt_len"].to_numpy(dtype=np.int64)
    output = df["output_len"].to_numpy(dtype=np.int64)
    ran = np.isfinite(result.finish_s)
    ttft = result.first_token_s - arrival
    queue = result.scheduled_s - arrival
    e2e = result.finish_s - arrival
    multi = ran & (output > 1)
    tpot = np.where(multi, (result.finish_s - result.first_token_s) / np.maximum(output - 1, 1),
                    np.nan)
    tt, off = result.token_times_s, result.token_offsets
    gaps = np.diff(tt)
    starts = off[1:-1] - 1
    keep = np.ones(len(gaps), dtype=bool)
    boundary = starts[(starts >= 0) & (starts < len(gaps))]
    keep[boundary] = False
    itl = gaps[keep] if len(gaps) else np.array([], dtype=np.float64)
    makespan = float(np.nanmax(result.finish_s) - arrival.min()) if ran.any() else None
    tput = ran.sum() / makespan if makespan else None
    out_tok = output[ran].sum() / makespan if makespan else None
    usage = (result.step_kv_blocks_used / max(result.kv_blocks_total, 1)
             if result.num_steps else np.array([]))
    step_s = result.step_end_s - result.step_start_s
    usage_mean = float((usage * step_s).sum() / step_s.sum()) if step_s.sum() > 0 else None
    hit = float(result.cached_tokens[ran].sum() / prompt[ran].sum()) if prompt[ran].sum() else None
    tp = cfg.tensor_parallel
    work = WorkLedger(
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
    all_notes = list(notes)
    if result.rejected_requests:
        all_notes.append(f"{result.rejected_requests} request(s) need more KV blocks than one "
                         f"instance has ({cfg.kv_blocks - 1} usable) and were not run")
    if cfg.pd is not None:
        all_notes.append("P/D: the prefill instance frees a request's KV when its first token is "
                         "out; the transfer occupies only the link (not the pool)")
    instances = (f"{cfg.pd[0]} prefill + {cfg.pd[1]} decode" if cfg.pd is not None
                 else str(cfg.instances))
    if tp > 1:
        instances += f" (TP{tp})"
    if resolved.calibration is not None:
        c = resolved.calibration
        step_model = (f"fitted: {c.a_s * 1e3:.3g} ms + {c.b_s_per_prefill_token * 1e6:.3g} µs/"
                      f"prefill token + {c.c_s_per_context_token * 1e9:.3g} ns/context token")
    else:
        sc = cfg.step_cost
        mfu = sc.flops_per_s / (resolved.gpu.bf16_flops * tp)
        mbu = sc.bytes_per_s / (resolved.gpu.hbm_bytes_per_s * tp)
        step_model = (f"roofline: {resolved.gpu.name}, MFU {mfu:.2f}, MBU {mbu:.2f}, "
                      f"+{sc.overhead_s * 1e3:.3g} ms/step")
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
    return SimulationSummary(
        scenario=resolved.name, model=resolved.model.name, gpu=resolved.gpu.name,
        scheduler=str(cfg.scheduler), instances=instances,
        kv_blocks_per_instance=cfg.kv_blocks, kv_bytes_per_token=resolved.kv_bytes_per_token,
        block_size_tokens=cfg.block_size_tokens, max_num_seqs=cfg.max_num_seqs,
        max_batched_tokens=cfg.max_batched_tokens, chunked_prefill=cfg.chunked_prefill,
        prefix_caching=cfg.prefix_caching, route=str(cfg.route), step_model=step_model,
        requests=len(df), finished=int(ran.sum()), rejected=result.rejected_requests,
        makespan_s=makespan, throughput_rps=float(tput) if tput is not None else None,
        output_tokens_per_s=float(out_tok) if out_tok is not None else None,
        ttft_s=Distribution.of(ttft[ran]), itl_s=Distribution.of(itl),
        tpot_s=Distribution.of(tpot[multi]), queue_s=Distribution.of(queue[ran]),
        e2e_s=Distribution.of(e2e[ran]),
        max_itl_s=float(itl.max()) if itl.size else None,
        preemptions=int(result.num_preemptions.sum()),
        preempted_requests=int((result.num_preemptions > 0).sum()),
        hit_ratio=hit, kv_usage_mean=usage_mean,
        kv_usage_max=float(usage.max()) if usage.size else None,
        work=work, per_instance=tuple(per_instance), calibration=resolved.calibration,
        notes=tuple(all_notes),
    )


def run_scenario(trace: Trace, scenario: Scenario) -> SimRun:
    """Resolve, simulate and tabulate one scenario on `trace`."""
    resolved = resolve(scenario)
    requests, notes = request_arrays(trace, resolved.config.block_size_tokens)
    result = simulate(requests, resolved.config)
    table, steps = output_tables(trace, result, resolved.config)
    summary = summarize(trace, resolved, result, notes)
    return SimRun(resolved=resolved, result=result, requests=table, steps=steps, summary=summary)


# ---- compare

LEDGER_METRICS: tuple[tuple[str, str, str], ...] = (
    # (field of WorkLedger, label, unit) — lower is less work
    ("prefill_tokens", "prefill tokens computed", "tokens"),
    ("recomputed_tokens", "tokens recomputed after preemption", "tokens"),
    ("decode_stall_s", "decode-seconds lost to prefill stalls", "s"),
    ("steps", "engine steps", "count"),
    ("host_overhead_s", "host time (steps × fixed cost + host gaps)", "s"),
    ("prefix_reread_bytes", "prefix KV re-read by prefill chunks", "bytes"),
    ("kv_transfer_bytes", "KV bytes over the P/D link", "bytes"),
    ("hbm_bytes", "HBM bytes moved", "bytes"),
    ("gpu_busy_s", "GPU-seconds busy", "s"),
    ("gpu_provisioned_s", "GPU-seconds provisioned", "s"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEntry:
    """One quantity a remedy changed, relative to the baseline scenario."""

    metric: str
    unit: str
    baseline: float
    value: float
    change: float
    change_ratio: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemedyLedger:
    """Work saved and work added by one scenario relative to the first (the baseline)."""

    scenario: str
    baseline: str
    saved: tuple[LedgerEntry, ...]
    added: tuple[LedgerEntry, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonSection:
    """The `comparison` report section: scenarios side by side, then one ledger per remedy."""

    scenarios: tuple[SimulationSummary, ...]
    ledgers: tuple[RemedyLedger, ...]


def ledger(baseline: SimulationSummary, other: SimulationSummary) -> RemedyLedger:
    """Split the work quantities that changed into saved (lower) and added (higher)."""
    saved: list[LedgerEntry] = []
    added: list[LedgerEntry] = []
    for name, label, unit in LEDGER_METRICS:
        base = float(getattr(baseline.work, name))
        value = float(getattr(other.work, name))
        change = value - base
        if change == 0 or (base and abs(change) / abs(base) < 1e-9):
            continue
        entry = LedgerEntry(metric=label, unit=unit, baseline=base, value=value, change=change,
                            change_ratio=change / base if base else None)
        (saved if change < 0 else added).append(entry)
    return RemedyLedger(scenario=other.scenario, baseline=baseline.scenario,
                        saved=tuple(saved), added=tuple(added))


def compare(trace: Trace, scenarios: list[Scenario],
            progress: Callable[[str, float], None] | None = None) -> ComparisonSection:
    """Run every scenario on the same request chain; the first one is the baseline.

    `progress(stage, share_done)` is told before each scenario runs (the CLI draws a bar).
    """
    if len(scenarios) < 2:
        raise ConfigError("compare needs at least two scenarios (--scenario a.toml "
                          "--scenario b.toml)")
    names = [s.name for s in scenarios]
    if len(set(names)) < len(names):
        scenarios = [replace(s, name=f"{s.name}#{k + 1}") for k, s in enumerate(scenarios)]
    runs = []
    for k, s in enumerate(scenarios):
        if progress is not None:
            progress(f"scenario {s.name}", k / len(scenarios))
        runs.append(run_scenario(trace, s).summary)
    summaries = tuple(runs)
    ledgers = tuple(ledger(summaries[0], s) for s in summaries[1:])
    return ComparisonSection(scenarios=summaries, ledgers=ledgers)
