"""`trace check`: a CI gate on a trace's metrics: thresholds, a baseline, the diagnosis, and the
change against a run before."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.data.schema import Trace
    from yaotu_trace.gate.check import CheckConfig, CheckResult
    from yaotu_trace.gate.fail_on import DiffGate, Gates, ObservedGate


def check(
    trace: TraceSource,
    *,
    config: Path | CheckConfig | None = None,
    baseline: Path | None = None,
    fail_on: str | None = None,
    before: TraceSource | None = None,
    metrics_before: Path | None = None,
    matched_only: bool = False,
    gpu: str | None = None,
    metrics: Path | None = None,
    log_tz: str | None = None,
    model: str | None = None,
    kv_dtype: str | None = None,
    kv_capacity: str | None = None,
    block_size_tokens: int | None = None,
    preset: str | None = None,
    threshold: Sequence[str] = (),
    progress: Progress | None = None,
) -> Report:
    """`trace check`: the `checks` section of every threshold of `config` (a check file or a
    parsed `CheckConfig`), of the comparison with `baseline` (a JSON report the tool wrote), of
    the diagnosis gate and of the change since `before` (a trace of the run before the change).

    `fail_on` is `--fail-on`'s text (`bottleneck`, `regressed,not-comparable`, a `FailOn`); it
    replaces the check file's. With `before`, each condition of the comparison and each axis
    change is a check; a condition that differs fails under `not-comparable`, a regressed axis
    under `regressed`, both by default; `gpu` states the hardware of both runs. The trace is
    analyzed, and diagnosed with the diagnosis options only when a check needs an axis, the
    verdict or the ledger.

    The report's `checks.failed` says whether the gate fails (`trace check` exits 1).
    """
    from yaotu_trace.commands.diagnose import diagnosis_of

    asked = _asked(config, baseline, fail_on, metrics_before, has_before=before is not None)
    # The diff judges subsets of the requests, so it needs the token columns in memory.
    loaded = open_trace(trace, lazy_content=before is None, progress=progress)
    options: dict[str, Any] = {"model": model, "kv_capacity": kv_capacity,
                               "block_size_tokens": block_size_tokens, "preset": preset,
                               "threshold": threshold, "kv_dtype": kv_dtype, "log_tz": log_tz}
    diagnosis = diagnosis_of(loaded, metrics=metrics, **options)
    earlier = None if before is None else open_trace(before, lazy_content=False)
    doc, diagnosed = _metrics_of(loaded, diagnosis, asked, progress)
    changes = [] if earlier is None else _changes(
        earlier, loaded, asked.gates.diff, progress, metrics_before=metrics_before,
        metrics_after=metrics, matched_only=matched_only, gpu=gpu, **options)
    if asked.gates.observed is not None:
        changes.append(_observed(loaded, asked.gates.observed, preset, block_size_tokens))
    before_path = None if earlier is None else earlier.path
    return _report(loaded, doc, asked, changes, before_path=before_path,
                   matched_only=matched_only, diagnosed=diagnosed)


@dataclass(frozen=True, slots=True)
class _Asked:
    """What the gate judges besides the trace: the check file, the gates and the baseline."""

    config: CheckConfig
    gates: Gates
    baseline: dict[str, Any] | None
    baseline_path: str | None


def _asked(config: Path | CheckConfig | None, baseline: Path | None, fail_on: str | None,
           metrics_before: Path | None, *, has_before: bool) -> _Asked:
    """Read the check file and the baseline and parse the gates, before the trace is read;
    refuse a run that checks nothing or names a run before without `--before`."""
    from yaotu_trace.gate.check import CheckConfig, load_baseline, load_config

    cfg = load_config(config) if isinstance(config, Path) else config or CheckConfig()
    gates = _gates(fail_on, cfg, has_before)
    if not has_before and metrics_before is not None:
        raise ConfigError("--metrics-before is the telemetry of the run before: give --before "
                          "BEFORE too")
    base = load_baseline(baseline) if baseline is not None else None
    if (not cfg.checks and base is None and gates.level is None and not has_before
            and gates.observed is None):
        raise ConfigError("nothing to check: give --config with [[check]] entries, "
                          "--baseline, --fail-on or --before (see docs/ci.md)")
    return _Asked(cfg, gates, base, None if baseline is None else str(baseline))


def _metrics_of(loaded: Trace, diagnosis: Callable[[], Report], asked: _Asked,
                progress: Progress | None) -> tuple[dict[str, Any], bool]:
    """The analysis' metrics by JSON path, with the diagnosis' on top when a check needs them;
    and whether it was diagnosed."""
    from yaotu_trace.commands.analyze import analyze
    from yaotu_trace.gate.check import report_view, wants_diagnosis

    tell(progress, "analyzing", 0.3)
    doc: dict[str, Any] = report_view(analyze(loaded))
    diagnosed = wants_diagnosis(doc, asked.config, asked.baseline is not None, asked.gates.level)
    if diagnosed:
        doc = report_view(diagnosis(), under=doc)
    return doc, diagnosed


def _observed(loaded: Trace, gate: ObservedGate, preset: str | None,
              block_size_tokens: int | None) -> CheckResult:
    """`observed-shortfall`: the engine's own cached tokens against the exact replay under
    the effective rules, one check naming the stretch of time where they fall short."""
    from yaotu_trace.gate.check import CheckKind, CheckResult, CheckStatus
    from yaotu_trace.ingest.load import load_full
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.reconcile import reconcile
    from yaotu_trace.prefix.rules import effective_rules
    from yaotu_trace.prefix.trace import replay_trace_with_requests

    full = load_full(loaded)
    if not full.has("cached_tokens"):
        raise ConfigError(f"--fail-on observed-shortfall compares the engine's own cached_tokens "
                          f"with the replay, and {full.path} has none; give a capture that "
                          "carries them (docs/inputs.md)")
    rules, name, _ = effective_rules(full, preset, block_size_tokens=block_size_tokens)
    _, table = replay_trace_with_requests(full, rules, preset=name, waterfall=False)
    prepared = prepare(full)
    assert prepared.cached_tokens is not None
    found = reconcile(prepared.arrival_s, prepared.request_id, prepared.cached_tokens,
                      table.columns["hit_tokens"], prepared.prompt_tokens,
                      unlimited=rules.unlimited, points=gate.points, relative=gate.relative)
    assert found is not None
    margins = f"{gate.points * 100:g} points and {gate.relative * 100:g} %"
    short = found.shortfall
    common: dict[str, Any] = {"name": "observed hits against the replay",
                              "kind": CheckKind.DIAGNOSIS,
              "path": "prefix_reuse.observed_over_time.shortfall", "resolved_path": None,
              "op": ">=", "threshold": f"{margins} below the replay"}
    if short is None:
        worst = max(found.windows, key=lambda w: w.gap_points)
        return CheckResult(status=CheckStatus.PASSED, value=round(worst.gap_points, 6),
                           message=f"the engine's hits agree with the {name} replay: no stretch "
                           f"of time falls short by {margins}", **common)
    reason = found.reasons[0].text if found.reasons else "no likely reason found"
    share = (f"observed {short.observed_hit_tokens / short.prompt_tokens:.1%}, replayed "
             f"{short.replayed_hit_tokens / short.prompt_tokens:.1%} of "
             f"{short.prompt_tokens:,} prompt tokens over {short.requests} requests")
    return CheckResult(status=CheckStatus.FAILED, value=round(short.gap_points, 6),
                       message=f"the engine's hits fall short of the {name} replay from "
                       f"{short.start_s:.1f} s to {short.end_s:.1f} s: {share} (margins "
                       f"{margins}); likely: {reason}", **common)


def _changes(earlier: Trace, loaded: Trace, gates: frozenset[DiffGate],
             progress: Progress | None, **diff_options: Any) -> list[CheckResult]:
    """One check per condition of the comparison with the run before and per axis change."""
    from yaotu_trace.commands.diff import diff
    from yaotu_trace.gate.change import change_results

    tell(progress, "comparing with the run before", 0.6)
    judged = diff(earlier, loaded, **diff_options).sections
    return change_results(judged["conditions"], judged["axes"], judged["fairness"], gates)


def _report(loaded: Trace, doc: dict[str, Any], asked: _Asked, changes: list[CheckResult], *,
            before_path: str | None, matched_only: bool, diagnosed: bool) -> Report:
    """Run the checks on `doc`, then the change checks; the report says what was judged."""
    from yaotu_trace.gate.check import run_checks

    gates = asked.gates
    section = run_checks(doc, asked.config, asked.baseline, baseline_path=asked.baseline_path,
                         fail_on=gates.level, changes=changes, before_path=before_path,
                         fail_on_diff=gates.diff)
    base = asked.baseline
    return Report(
        command="check",
        input=input_summary(loaded),
        config={"check_file": asked.config.path, "baseline": asked.baseline_path,
                "baseline_command": None if base is None else base.get("command"),
                "before": before_path, "fail_on": gates.level,
                "fail_on_diff": section.fail_on_diff, "matched_only": matched_only,
                "on_missing": asked.config.on_missing, "diagnosed": diagnosed},
        sections={"checks": section},
    )


def _gates(fail_on: str | None, cfg: CheckConfig, has_before: bool) -> Gates:
    """`--fail-on` (else the check file's), with both change gates when a run before is given
    and none is named."""
    from yaotu_trace.gate.fail_on import DEFAULT_DIFF_GATES, Gates, parse_fail_on

    gates = (parse_fail_on(fail_on) if fail_on is not None
             else Gates(level=cfg.fail_on, diff=cfg.fail_on_diff))
    if gates.diff and not has_before:
        named = ",".join(sorted(gates.diff))
        raise ConfigError(f"--fail-on {named} judges a change: give the run before it with "
                          "--before BEFORE (see docs/ci.md)")
    if has_before and not gates.diff:
        return Gates(level=gates.level, diff=DEFAULT_DIFF_GATES)
    return gates
