"""`trace check`: a CI gate on a trace's metrics: thresholds, a baseline, the diagnosis, and the
change against a run before."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.commands.load import Progress, RunBefore, TraceSource, open_trace, tell
from yaotu_trace.commands.settings import DiagnosisSetup, setup_diagnosis
from yaotu_trace.commands.shared.analysis import analysis_report
from yaotu_trace.commands.shared.diagnosis import deferred_diagnosis
from yaotu_trace.commands.shared.observed import observed_vs_replayed
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.data.observed_hits import Reconciliation
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.schema import Trace
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError
from yaotu_trace.gate.change import change_results
from yaotu_trace.gate.check import (
    CheckConfig,
    CheckResult,
    load_baseline,
    load_config,
    report_view,
    run_checks,
    wants_diagnosis,
)
from yaotu_trace.gate.fail_on import (
    DEFAULT_DIFF_GATES,
    DiffGate,
    Gates,
    ObservedGate,
    parse_fail_on,
)
from yaotu_trace.gate.observed import observed_result
from yaotu_trace.prefix.chain_cache import holds_streamed_chains
from yaotu_trace.prefix.options import ReplayOptions


@holds_streamed_chains
def check(
    trace: TraceSource,
    options: DiagnosisOptions | None = None,
    *,
    config: Path | CheckConfig | None = None,
    baseline: Path | None = None,
    fail_on: str | None = None,
    before: RunBefore | None = None,
    progress: Progress | None = None,
    tiers: ReplayOptions | None = None,
) -> Report:
    """`trace check`: the `checks` section of every threshold of `config` (a check file or a
    parsed `CheckConfig`), of the comparison with `baseline` (a JSON report the tool wrote), of
    the diagnosis gate and of the change since `before` (the run before the change).

    `fail_on` is `--fail-on`'s text (`bottleneck`, `regressed,not-comparable`, a `FailOn`); it
    replaces the check file's. With `before`, each condition of the comparison and each axis
    change is a check; a condition that differs fails under `not-comparable`, a regressed axis
    under `regressed`, both by default. The trace is analyzed, and diagnosed under `options`
    (`trace diagnose`'s meaning; they describe both runs of a change) only when a check needs
    an axis, the verdict or the ledger.

    `tiers` (`--tier`, as `trace diagnose` takes it) adds the `tiers` section to what the
    checks read: a gate on the hits a configured tier must reach (`tiers.tiers.cpu.hit_ratio`).

    The report's `checks.failed` says whether the gate fails (`trace check` exits 1).
    """
    options = options or DiagnosisOptions()
    if tiers is not None:
        # NOTE: imported here: the tiers' modules (their specs, pricing) load for --tier only.
        from yaotu_trace.commands.shared.tiers import under_deployment

        tiers = under_deployment(tiers, options)
    asked = _asked(config, baseline, fail_on, before)
    # The diff judges subsets of the requests, so it needs the token columns in memory.
    loaded = open_trace(trace, lazy_content=before is None, progress=progress,
                        without_pandas=before is None)
    setup = setup_diagnosis(options)
    metrics = setup.telemetry(options.metrics)
    earlier = None if before is None else open_trace(before.trace, lazy_content=False)
    diagnosis = deferred_diagnosis(loaded, setup, metrics)
    doc, diagnosed = _metrics_of(loaded, setup.settings, diagnosis, asked, progress)
    if tiers is not None and tiers.tiers:
        tell(progress, "replaying the tiers below the GPU", 0.5)
        from yaotu_trace.commands.shared.tiers import tier_sections

        doc.update(tier_sections(loaded, tiers, metrics))
    changes: list[CheckResult] = []
    if before is not None and earlier is not None:
        tell(progress, "comparing with the run before", 0.6)
        changes = _changes(earlier, loaded, setup, before, metrics, asked.gates.diff)
    observed = None
    if asked.gates.observed is not None:
        tell(progress, "reconciling the engine's cached tokens with the replay", 0.8)
        observed = _observed(loaded, asked.gates.observed, setup, metrics)
        changes.append(observed_result(observed, asked.gates.observed))
    return _report(loaded, doc, asked, changes, before=before, earlier=earlier,
                   diagnosed=diagnosed, observed=observed)


@dataclass(frozen=True, slots=True)
class _Asked:
    """What the gate judges besides the trace: the check file, the gates and the baseline."""

    config: CheckConfig
    gates: Gates
    baseline: dict[str, Any] | None
    baseline_path: str | None


def _asked(config: Path | CheckConfig | None, baseline: Path | None, fail_on: str | None,
           before: RunBefore | None) -> _Asked:
    """Read the check file and the baseline and parse the gates, before the trace is read;
    refuse a run that checks nothing."""
    cfg = load_config(config) if isinstance(config, Path) else config or CheckConfig()
    gates = _gates(fail_on, cfg, before is not None)
    base = load_baseline(baseline) if baseline is not None else None
    if (not cfg.checks and base is None and gates.level is None and before is None
            and gates.observed is None):
        raise ConfigError("nothing to check: give --config with [[check]] entries, "
                          "--baseline, --fail-on or --before (see docs/ci.md)")
    return _Asked(cfg, gates, base, None if baseline is None else str(baseline))


def _metrics_of(loaded: Trace, settings: EngineSettings, diagnosis: Callable[[], Report],
                asked: _Asked, progress: Progress | None) -> tuple[dict[str, Any], bool]:
    """The analysis' metrics by JSON path (its replays under the diagnosis' `settings`:
    preset, block size, model), with the diagnosis' on top when a check needs them; and
    whether it was diagnosed."""
    tell(progress, "analyzing", 0.3)
    doc: dict[str, Any] = report_view(analysis_report(loaded, settings=settings))
    diagnosed = wants_diagnosis(doc, asked.config, asked.baseline is not None, asked.gates.level)
    if diagnosed:
        doc = report_view(diagnosis(), under=doc)
    return doc, diagnosed


def _observed(loaded: Trace, gate: ObservedGate, setup: DiagnosisSetup,
              metrics: EngineMetrics | None) -> Reconciliation:
    """`observed-shortfall`: the engine's own cached tokens against the exact replay under the
    effective rules (`--preset`, `--block-size`), the capacity reason tested at the pool
    `--kv-capacity` or `--metrics` names."""
    found = observed_vs_replayed(loaded, settings=setup.settings, metrics=metrics,
                                 margins=(gate.points, gate.relative))
    if found is None:
        raise ConfigError(
            f"--fail-on observed-shortfall compares the engine's own cached_tokens with the "
            f"replay, and {loaded.path} ({loaded.format_name}) has none; give a capture that "
            "carries them (docs/inputs.md)")
    return found


def _changes(earlier: Trace, loaded: Trace, setup: DiagnosisSetup, before: RunBefore,
             metrics: EngineMetrics | None, gates: frozenset[DiffGate]) -> list[CheckResult]:
    """One check per condition of the comparison with the run before and per axis change."""
    from yaotu_trace.commands.shared.change import change_report  # pandas: for --before only

    judged, _ = change_report(earlier, loaded, setup,
                              metrics=(setup.telemetry(before.metrics), metrics),
                              matched_only=before.matched_only)
    sections = judged.sections
    return change_results(sections["conditions"], sections["axes"], sections["fairness"], gates)


def _report(loaded: Trace, doc: dict[str, Any], asked: _Asked, changes: list[CheckResult], *,
            before: RunBefore | None, earlier: Trace | None, diagnosed: bool,
            observed: Reconciliation | None) -> Report:
    """Run the checks on `doc`, then the change checks; the report says what was judged, and
    with `--fail-on observed-shortfall` shows the windows and the stretch it judged."""
    gates = asked.gates
    before_path = None if earlier is None else earlier.path
    section = run_checks(doc, asked.config, asked.baseline, baseline_path=asked.baseline_path,
                         gates=gates, changes=changes, before_path=before_path)
    base = asked.baseline
    return Report(
        command="check",
        input=input_summary(loaded),
        config={"check_file": asked.config.path, "baseline": asked.baseline_path,
                "baseline_command": None if base is None else base.get("command"),
                "before": before_path, "fail_on": gates.level,
                "fail_on_diff": section.fail_on_diff,
                "fail_on_observed": section.fail_on_observed,
                "matched_only": before is not None and before.matched_only,
                "on_missing": asked.config.on_missing, "diagnosed": diagnosed},
        sections={"checks": section} | ({} if observed is None
                                         else {"observed_vs_replayed": observed})
        # The engine's hits by tier beside the checks on them, with what its file carried
        # that the reader did not use.
        | ({"observed_tiers": doc["observed_tiers"]} if "observed_tiers" in doc else {}),
    )


def _gates(fail_on: str | None, cfg: CheckConfig, has_before: bool) -> Gates:
    """`--fail-on` (else the check file's), with both change gates when a run before is given
    and none is named."""
    gates = (parse_fail_on(fail_on) if fail_on is not None
             else Gates(level=cfg.fail_on, diff=cfg.fail_on_diff, observed=cfg.fail_on_observed))
    if gates.diff and not has_before:
        named = ",".join(sorted(gates.diff))
        raise ConfigError(f"--fail-on {named} judges a change: give the run before it with "
                          "--before BEFORE (see docs/ci.md)")
    if has_before and not gates.diff:
        return Gates(level=gates.level, diff=DEFAULT_DIFF_GATES, observed=gates.observed)
    return gates
