"""`trace report`: profile, prefix replay, capacity curve, diagnosis and the plot data; with a
run before, both runs' and the diff between them."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.commands.load import (
    Progress,
    RunBefore,
    TraceInput,
    TraceSource,
    open_trace,
    tell,
)
from yaotu_trace.commands.settings import setup_diagnosis
from yaotu_trace.commands.shared.change import change_report
from yaotu_trace.commands.shared.diagnosis import deferred_diagnosis
from yaotu_trace.commands.shared.tiers import tier_sections, under_deployment
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest.load import read_step_logs
from yaotu_trace.prefix.chain_cache import holds_streamed_chains
from yaotu_trace.prefix.options import ReplayOptions
from yaotu_trace.prefix.sweep_trace import CurveSectionSpec, sweep_trace
from yaotu_trace.prefix.trace import replay_trace_with_requests
from yaotu_trace.profile.figures import plot_data
from yaotu_trace.profile.success import success_profile
from yaotu_trace.profile.workload import profile_trace
from yaotu_trace.profile.workload_figures import workload_figures
from yaotu_trace.sim.options import EngineOptions
from yaotu_trace.sim.run import simulate_stage
from yaotu_trace.sim.summary import run_scenario

# Capacities of the hit-ratio curve in the report (log-spaced; knee and shares added).
CURVE_POINTS = 40
# The diagnosis' sections the report shows (`observed_vs_replayed`: a capture's own cached
# tokens against the replay, drawn with the stretch where they fall short).
DIAGNOSIS_SECTIONS = ("principal", "verdict", "axes", "ledger", "findings",
                      "observed_vs_replayed")


@holds_streamed_chains
def report(
    trace: TraceSource,
    options: DiagnosisOptions | None = None,
    *,
    before: RunBefore | None = None,
    simulate: EngineOptions | None = None,
    progress: Progress | None = None,
    tiers: ReplayOptions | None = None,
) -> Report:
    """`trace report`: what the HTML report shows (its default format), with the diagnosis
    under `options` (`trace diagnose`'s meaning).

    With `before` (the run before a change), the report is of both runs, judged under the same
    options, and of the diff between them (`two_run_report`).

    With `simulate`, a trace of arrivals and lengths is first run through the modelled engine
    (`trace simulate`'s core, `sim.summary.run_scenario`): the engine options of `simulate`
    (`sim/options.py`), with the deployment `options` states (model, GPU, KV dtype, block
    size, engine limits, link) over them; the report is of the simulated requests and step log,
    held in memory, and its `config.modelled` states the engine.

    `tiers` (`--tier`) adds what `trace diagnose --tier` shows (which source served what with
    tiers below the KV pool of `options.kv_capacity`, and the engine's own split against it
    when `options.metrics` has one) and, with one tier, the hits over GPU size × tier size
    around that pool (`commands/shared/tiers.py`); with `before`, for each run.
    """
    options = options or DiagnosisOptions()
    tiers = under_deployment(tiers, options)
    if simulate is not None:
        check_simulate(options, simulate, before=before, steps=_steps_of(trace))
        return _simulated_report(trace, options, simulate, progress, tiers)
    # The diff judges subsets of the requests, so it needs the token columns in memory.
    loaded = open_trace(trace, lazy_content=before is None, progress=progress)
    setup = setup_diagnosis(options)
    metrics = setup.telemetry(options.metrics)
    diagnosis = deferred_diagnosis(loaded, setup, metrics)
    # The replay and the curve follow the diagnosis' settings (its preset and block size; KV
    # sized as `--kv-bytes-per-token` over `--model`'s), so the page's numbers agree.
    settings = setup.settings
    if before is None:
        return build_report(loaded, diagnose_report=diagnosis, progress=progress,
                            tiers=tiers, metrics=metrics, settings=settings)
    earlier = open_trace(before.trace, lazy_content=False)
    metrics_before = setup.telemetry(before.metrics)
    diagnosis_before = deferred_diagnosis(earlier, setup, metrics_before)
    after_report = build_report(loaded, diagnose_report=diagnosis, progress=progress,
                                tiers=tiers, metrics=metrics, settings=settings)
    before_report = build_report(earlier, diagnose_report=diagnosis_before, tiers=tiers,
                                 metrics=metrics_before, settings=settings)
    tell(progress, "comparing the runs", 1.0)
    judged, _ = change_report(earlier, loaded, setup, metrics=(metrics_before, metrics),
                              matched_only=before.matched_only)
    return two_run_report(before_report, after_report, judged)


def _simulated_report(trace: TraceSource, options: DiagnosisOptions, engine: EngineOptions,
                      progress: Progress | None, tiers: ReplayOptions | None) -> Report:
    """`--simulate`: the report of the modelled run, `config.modelled` stating the engine."""
    setup_diagnosis(options)  # checked before the run, as without --simulate
    loaded, modelled = simulated_trace(trace, options, engine, progress)
    judged = setup_diagnosis(replace(options, model=options.model or modelled["model"]))
    simulated = build_report(loaded, diagnose_report=deferred_diagnosis(loaded, judged, None),
                             progress=progress, tiers=tiers, settings=judged.settings)
    return Report(command="report", input=simulated.input,
                  config={**simulated.config, "modelled": modelled},
                  sections=simulated.sections)


# What `config.modelled` says of the timing of a simulated report.
MODELLED_BASIS = ("timing modelled by the engine model from arrivals and lengths; not observed")
# The columns of observed engine timing `--simulate` would replace.
OBSERVED_TIMING = ("scheduled_s", "first_token_s", "finish_s", "token_times_s")


def _steps_of(trace: TraceSource) -> Path | None:
    """The step log named with the trace (`--steps`), if any."""
    return trace.steps if isinstance(trace, TraceInput) else None


def check_simulate(options: DiagnosisOptions, engine: EngineOptions, *,
                   before: RunBefore | None, steps: Path | None) -> None:
    """Refuse, before any work, a `--simulate` the engine model cannot run or that would mix
    modelled timing with observed telemetry."""
    if before is not None:
        raise ConfigError("--simulate models one run; --before compares two observed ones: "
                          "simulate each with trace simulate, then trace report AFTER --before "
                          "BEFORE")
    if options.metrics is not None or steps is not None:
        option = "--metrics" if options.metrics is not None else "--steps"
        raise ConfigError(f"{option} is observed telemetry of a run, --simulate models the run: "
                          f"drop {option} or --simulate")
    if options.model is None and engine.file is None and engine.scenario.model is None:
        raise ConfigError("--simulate needs the engine to model: give --model and --gpu (e.g. "
                          "--model Llama-3.1-8B --gpu H100) or --scenario FILE")


def simulated_trace(trace: TraceSource, options: DiagnosisOptions, engine: EngineOptions,
                    progress: Progress | None = None) -> tuple[Trace, dict[str, Any]]:
    """The trace with the modelled engine's timing and step log (in memory), and what
    `config.modelled` states: model, GPU, the resolved engine settings, the basis. The
    deployment `options` states is the engine's, over the options of `engine`."""
    stated: dict[str, Any] = {
        "model": options.model, "gpu": options.gpu, "kv_dtype": options.kv_dtype,
        "block_size": options.block_size_tokens, "max_num_seqs": options.max_num_seqs,
        "max_batched_tokens": options.max_batched_tokens, "link_gbps": options.link_gbps}
    given = replace(engine.scenario, **{k: v for k, v in stated.items() if v is not None})
    chosen = replace(engine, scenario=given).resolved()
    loaded = open_trace(trace, lazy_content=False, progress=progress, steps=False)
    observed = [c for c in OBSERVED_TIMING if loaded.has(c)]
    if observed:
        raise ConfigError(
            f"--simulate would replace the trace's observed timing ({', '.join(observed)}): "
            f"report the observed run without --simulate, or model it in two steps: trace "
            f"simulate TRACE --out sim.parquet --steps-out steps.parquet, then trace report "
            f"sim.parquet --steps steps.parquet --before {loaded.path}")
    tell(progress, simulate_stage(), 0.2)
    run = run_scenario(loaded, chosen, read_step_logs([chosen.calibrate], "--calibrate"))
    if len(run.steps) == 0:  # every request was too large for the pool, so none ran
        pool = run.resolved.config
        raise ConfigError(
            f"--simulate: no request fits the modelled KV pool of {pool.kv_blocks:,} blocks "
            f"of {pool.block_size_tokens} tokens; give a larger --kv-blocks, or leave it out "
            "to size the pool from the GPU's memory")
    timed = normalize(RawTrace(requests=run.requests, format_name=loaded.format_name,
                               source_block_size=loaded.source_block_size,
                               notes=(*loaded.notes, *run.summary.notes)), loaded.path)
    timed = replace(timed, rows_read=loaded.rows_read,
                    steps=StepLog.of_frame(run.steps, "simulated step log"))
    modelled = {"model": run.resolved.model.name, "gpu": run.resolved.gpu.name,
                "engine": run.resolved.config.to_dict(), "basis": MODELLED_BASIS}
    return timed, modelled


def two_run_report(before: Report, after: Report, diff: Report) -> Report:
    """The report of the run after, its sections where a one-run report has them, plus
    `before` (the run before's input, config and sections) and `diff` (the sections of
    `trace diff`'s report, and the run-to-run noise they were judged against)."""
    return Report(command="report", input=after.input,
                  config={**after.config, "before": before.input.path},
                  sections={**after.sections,
                            "before": {"input": before.input, "config": before.config,
                                       **before.sections},
                            "diff": {**diff.sections, "noise": diff.config.get("noise")}})


def build_report(
    trace: Trace,
    *,
    diagnose_report: Callable[[], Report] | None = None,
    kv_capacity_tokens: float | None = None,
    progress: Progress | None = None,
    tiers: ReplayOptions | None = None,
    metrics: EngineMetrics | None = None,
    settings: EngineSettings | None = None,
) -> Report:
    """The report of a trace read: profile, diagnosis (when `diagnose_report` is given), prefix
    replay and capacity curve under the diagnosis' `settings` (`replay_rules`: its preset and
    block size; the curve in bytes too with its `kv_bytes_per_token`, of its `model`), the
    tiers below the GPU (`tiers`, held against the engine's own split in `metrics`) and the
    plot data."""
    settings = settings or EngineSettings()
    model, kv_bytes_per_token = settings.model, settings.kv_bytes_per_token
    sections: dict[str, Any] = {}
    tell(progress, "profile", 0.0)
    sections["profile"] = profile_trace(trace)
    if (success := success_profile(trace)) is not None:
        sections["success"] = success
    diagnosis = None
    if diagnose_report is not None:
        tell(progress, "diagnosis", 0.1)
        diagnosis = diagnose_report().sections
        sections.update({k: diagnosis[k] for k in DIAGNOSIS_SECTIONS if k in diagnosis})
    hit_tokens = None
    config: dict[str, Any] = {}
    if trace.content_column is not None:
        tell(progress, "prefix replay", 0.4)
        rules, preset, notes = settings.replay_rules(trace)
        summary, table = replay_trace_with_requests(trace, rules, preset=preset, notes=notes)
        sections["prefix_reuse"] = summary.to_dict()
        hit_tokens = table.to_columns()["hit_tokens"]
        config = {"preset": preset, "rules": rules.to_dict()}
        if rules.eviction == "lru":
            tell(progress, "capacity sweep", 0.7)
            write_up = CurveSectionSpec(preset=preset or "", points=CURVE_POINTS, model=model,
                                        kv_bytes_per_token=kv_bytes_per_token, notes=notes)
            curve, _ = sweep_trace(trace, rules.with_(capacity_blocks=None), write_up)
            sections["capacity_curve"] = curve
    if tiers is not None and tiers.tiers:
        tell(progress, "replaying the tiers below the GPU", 0.8)
        sections.update(tier_sections(trace, tiers, metrics, curve=True))
    capacity = kv_capacity_tokens
    if capacity is None and diagnosis is not None:
        capacity = kv_capacity_of(diagnosis.get("axes"))
    tell(progress, "plots", 0.9)
    sections["plots"] = plot_data(trace, hit_tokens, capacity)
    sections["workload_figures"] = workload_figures(trace, hit_tokens)
    config["kv_capacity_tokens"] = capacity
    tell(progress, "done", 1.0)
    return Report(command="report", input=input_summary(trace), config=config,
                  sections=sections)


def kv_capacity_of(axes: Any) -> float | None:
    """The KV pool the diagnosis found (step log, metrics or --kv-capacity), in tokens: the
    `kv_memory` axis' `kv_capacity_tokens`, from its list or its mapping form."""
    items = list(axes.items()) if isinstance(axes, Mapping) else [
        (_field(axis, "name"), axis) for axis in axes or ()]
    for name, axis in items:
        if str(name) == "kv_memory":
            value = _field(_field(axis, "metrics"), "kv_capacity_tokens")
            if isinstance(value, numbers.Real) and math.isfinite(value):
                return float(value)
            return None
    return None


def _field(value: Any, name: str) -> Any:
    """A field of a section value, or a key of its mapping form."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)
