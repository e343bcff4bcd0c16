"""Scenarios of `trace simulate` and `trace compare`: user options, their checks, and their
resolution against the model and GPU catalogs into a `SimConfig`.

A scenario comes from the command line or from a TOML file of the same options; both are
checked against one table of ranges. No pandas here: the CLI builds a `Scenario` before any
work.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.catalog.gpus import DEFAULT_LINK_GBPS, GpuSpec, find_gpu
from yaotu_trace.catalog.models import ModelSpec, find_model, kv_bytes_per_token, parse_kv_dtype
from yaotu_trace.catalog.units import MAX_BLOCK_TOKENS
from yaotu_trace.errors import ConfigError, ConfigFileError, TraceReadError
from yaotu_trace.sim.config import (
    DEFAULT_ENGINES,
    EngineVersion,
    RoutePolicy,
    SchedulerKind,
    SimConfig,
)
from yaotu_trace.sim.roofline import (
    batch_defaults,
    calibrate_from,
    kv_blocks_from_memory,
    step_cost_for,
)
from yaotu_trace.sim.run import CalibrationFit

if TYPE_CHECKING:
    from yaotu_trace.data.steplog import StepLog

# Proposed defaults (cost-model §2.4 "Realistic efficiency factors" and §3.3).
DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.7
DEFAULT_OVERHEAD_MS = 2.0  # host-side scheduling + launch per step [proposed default]
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.33 (engines.md §1.6)
DEFAULT_LINK_LATENCY_MS = 0.57  # Mooncake's fitted α (cost-model §3.3)
# vLLM takes max_model_len from the model's config; the catalog does not record it, so the
# default is Llama 3.1's context (131,072 tokens). It sets the step budget of a vLLM engine run
# without chunked prefill (`EngineArgs`: max_num_batched_tokens = max(max_model_len, default)).
DEFAULT_MAX_MODEL_LEN = 131_072


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """User-level options of one simulated deployment (None: the resolved default)."""

    name: str | None = None
    model: str | None = None
    kv_dtype: str | None = None
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
    route_weights: str | None = None
    pd: str | None = None
    link_gbps: float | None = None
    link_latency_ms: float | None = None
    layerwise_overlap: bool | None = None
    scheduler: str | None = None
    engine: str | None = None
    async_scheduling: bool | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tp: int | None = None
    mfu: float | None = None
    mbu: float | None = None
    overhead_ms: float | None = None
    host_gap_ms: float | None = None
    calibrate: str | None = None
    fail_share: float | None = None
    fail_instance: str | None = None
    fail_seed: int | None = None

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
MAX_ENGINE_INT = 2**31 - 1  # seats, token budgets, thresholds, block size: the engine's int range

# Every numeric option: (lowest, highest, whether the lowest is allowed). Checked the same way
# for the command line (`check_scenario`, exit 2) and a scenario file (`load_scenario`, exit 3).
_RANGES: dict[str, tuple[float, float, bool]] = {
    "kv_blocks": (2, MAX_KV_BLOCKS, True),
    "block_size": (1, MAX_BLOCK_TOKENS, True),
    "max_num_seqs": (1, MAX_ENGINE_INT, True),
    "max_batched_tokens": (1, MAX_ENGINE_INT, True),
    "max_model_len": (1, MAX_ENGINE_INT, True),
    "long_prefill_token_threshold": (0, MAX_ENGINE_INT, True),
    "instances": (1, MAX_INSTANCES, True),
    "tp": (1, 1024, True),
    "link_gbps": (0, 1e9, False),
    "link_latency_ms": (0, 1e9, True),
    "gpu_memory_utilization": (0, 1, False),
    "mfu": (0, 1, False),
    "mbu": (0, 1, False),
    "overhead_ms": (0, 1e9, True),
    "host_gap_ms": (0, 1e9, True),
    "fail_share": (0, 0.999999, True),
    "fail_seed": (0, 2**63 - 1, True),
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
    names the option. The CLI's simulate and compare options go through here via
    `resolve_scenario`."""
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
    if name == "route_weights" and isinstance(value, list) \
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        value = ",".join(f"{v:g}" for v in value)
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
    "kv_dtype": parse_kv_dtype,
    "gpu": find_gpu,
    "pd": lambda v: _parse_pd(v),
    "scheduler": lambda v: _choice(SchedulerKind, v, "scheduler"),
    "engine": lambda v: _choice(EngineVersion, v, "engine"),
    "route": lambda v: _choice(RoutePolicy, v, "route"),
    "route_weights": lambda v: parse_route_weights(v),
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
    engine: EngineVersion = EngineVersion.VLLM_0_33


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


def parse_route_weights(text: str) -> tuple[float, ...]:
    """`--route-weights 0.85,0.15`: one positive share per instance (normalised when routing)."""
    try:
        weights = tuple(float(x) for x in str(text).split(","))
    except ValueError as exc:
        raise ConfigError(f"--route-weights {text!r}: give one share per instance, separated "
                          "by commas, e.g. --route-weights 0.85,0.15") from exc
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ConfigError(f"--route-weights {text}: every share must be a positive number")
    return weights


def _choice(enum: type[SchedulerKind] | type[RoutePolicy] | type[EngineVersion], value: str,
            option: str) -> Any:
    try:
        return enum(str(value).lower())
    except ValueError as exc:
        raise ConfigError(f"--{option} {value!r}: choose one of "
                          f"{', '.join(e.value for e in enum)}") from exc


def resolve_scenario(scenario: Scenario, step_logs: Mapping[str, StepLog] | None = None
            ) -> ResolvedScenario:
    """Resolve a scenario's options into a `SimConfig` (defaults from the catalogs).

    An option given as 0 is checked like any other value, never replaced by its default.
    `step_logs` holds the step log that `calibrate` names, read by the command, by its path.
    """
    check_scenario(scenario)
    if scenario.model is None:
        raise ConfigError("no model given; pass --model (see `trace models`) or set it in the "
                          "scenario file")
    if scenario.gpu is None:
        raise ConfigError("no GPU given; pass --gpu, e.g. --gpu H100-SXM")
    model = find_model(scenario.model)
    gpu = find_gpu(scenario.gpu)
    engine = _engine(scenario)
    scheduler = engine.scheduler
    route = _choice(RoutePolicy, _given(scenario.route, "round-robin"), "route")
    tp = _given(scenario.tp, 1)
    block_size = _given(scenario.block_size, 16)
    kv_b = kv_bytes_per_token(model, kv_dtype=scenario.kv_dtype)
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
    chunked = True if scenario.chunked_prefill is None else scenario.chunked_prefill
    if engine is EngineVersion.VLLM_0_33 and not chunked:
        # vLLM's EngineArgs: without chunked prefill the budget is at least max_model_len
        budget_default = max(budget_default,
                             _given(scenario.max_model_len, DEFAULT_MAX_MODEL_LEN))
    calibration = None
    if scenario.calibrate is not None:
        log = (step_logs or {}).get(scenario.calibrate)
        if log is None:
            raise ValueError(f"--calibrate {scenario.calibrate}: pass the step log it names, "
                             "read by the command, in `step_logs`")
        calibration = calibrate_from(log, block_size)
        cost = replace(calibration.step_cost(kv_b), host_gap_s=host_gap_ms / 1e3)
    else:
        cost = step_cost_for(model, gpu, tp=tp, mfu=_given(scenario.mfu, DEFAULT_MFU),
                             mbu=_given(scenario.mbu, DEFAULT_MBU),
                             overhead_ms=_given(scenario.overhead_ms, DEFAULT_OVERHEAD_MS),
                             kv_bytes_per_token=kv_b, host_gap_ms=host_gap_ms)
    pd_shape = _parse_pd(scenario.pd) if scenario.pd is not None else None
    weights = (parse_route_weights(scenario.route_weights)
               if scenario.route_weights is not None else None)
    # NOTE: weighted routing has as many instances as shares unless --instances says otherwise
    # (then SimConfig refuses the mismatch); `--route trace` takes them from the trace.
    instances = _given(scenario.instances, len(weights) if weights is not None
                       and route is RoutePolicy.WEIGHTED else 1)
    link_gbps = _given(scenario.link_gbps, DEFAULT_LINK_GBPS)
    config = SimConfig(
        scheduler=scheduler,
        kv_blocks=kv_blocks,
        block_size_tokens=block_size,
        max_num_seqs=_given(scenario.max_num_seqs, seqs_default),
        max_batched_tokens=_given(scenario.max_batched_tokens, budget_default),
        chunked_prefill=chunked,
        long_prefill_token_threshold=_given(scenario.long_prefill_token_threshold, 0),
        prefix_caching=True if scenario.prefix_caching is None else scenario.prefix_caching,
        instances=instances,
        route=route,
        route_weights=weights,
        pd=pd_shape,
        link_bytes_per_s=link_gbps * 1e9 / 8,
        link_latency_s=_given(scenario.link_latency_ms, DEFAULT_LINK_LATENCY_MS) / 1e3,
        layerwise_overlap=True if scenario.layerwise_overlap is None
        else scenario.layerwise_overlap,
        layers=model.layers,
        tensor_parallel=tp,
        async_scheduling=_given(scenario.async_scheduling, engine is EngineVersion.VLLM_0_33),
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
                            derived=derived, engine=engine)


def _engine(scenario: Scenario) -> EngineVersion:
    """The engine release a scenario names (`--engine`), or the one its `--scheduler` family
    stands for (vLLM 0.33 by default); the two must agree when both are given."""
    family = (_choice(SchedulerKind, scenario.scheduler, "scheduler")
              if scenario.scheduler is not None else None)
    if scenario.engine is None:
        return DEFAULT_ENGINES[family or SchedulerKind.VLLM]
    engine: EngineVersion = _choice(EngineVersion, scenario.engine, "engine")
    if family is not None and engine.scheduler is not family:
        raise ConfigError(f"--engine {engine} runs {engine.scheduler}'s scheduler, not "
                          f"--scheduler {family}; give one of the two")
    return engine
