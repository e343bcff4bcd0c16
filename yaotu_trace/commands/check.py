"""`trace check`: a CI gate on a trace's metrics: thresholds, a baseline, the diagnosis, and the
change against a run before."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.gate.check import CheckConfig
    from yaotu_trace.gate.fail_on import Gates


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
    from yaotu_trace.commands.analyze import analyze
    from yaotu_trace.commands.diagnose import diagnosis_of
    from yaotu_trace.gate.check import (
        CheckConfig,
        load_baseline,
        load_config,
        report_view,
        run_checks,
        wants_diagnosis,
    )

    cfg = load_config(config) if isinstance(config, Path) else config or CheckConfig()
    gates = _gates(fail_on, cfg, before is not None)
    if before is None and metrics_before is not None:
        raise ConfigError("--metrics-before is the telemetry of the run before: give --before "
                          "BEFORE too")
    base = load_baseline(baseline) if baseline is not None else None
    if not cfg.checks and base is None and gates.level is None and before is None:
        raise ConfigError("nothing to check: give --config with [[check]] entries, "
                          "--baseline, --fail-on or --before (see docs/ci.md)")
    # The diff judges subsets of the requests, so it needs the token columns in memory.
    loaded = open_trace(trace, lazy_content=before is None, progress=progress)
    options: dict[str, Any] = {"model": model, "kv_capacity": kv_capacity,
                               "block_size_tokens": block_size_tokens, "preset": preset,
                               "threshold": threshold, "kv_dtype": kv_dtype, "log_tz": log_tz}
    diagnosis = diagnosis_of(loaded, metrics=metrics, **options)
    earlier = None if before is None else open_trace(before, lazy_content=False)
    tell(progress, "analyzing", 0.3)
    doc: dict[str, Any] = report_view(analyze(loaded))
    diagnosed = wants_diagnosis(doc, cfg, base is not None, gates.level)
    if diagnosed:
        doc = report_view(diagnosis(), under=doc)
    changes = []
    if earlier is not None:
        from yaotu_trace.commands.diff import diff
        from yaotu_trace.gate.change import change_results

        tell(progress, "comparing with the run before", 0.6)
        judged = diff(earlier, loaded, metrics_before=metrics_before, metrics_after=metrics,
                      matched_only=matched_only, gpu=gpu, **options).sections
        changes = change_results(judged["conditions"], judged["axes"], judged["fairness"],
                                 gates.diff)
    baseline_path = None if baseline is None else str(baseline)
    before_path = None if earlier is None else earlier.path
    section = run_checks(doc, cfg, base, baseline_path=baseline_path, fail_on=gates.level,
                         changes=changes, before_path=before_path, fail_on_diff=gates.diff)
    return Report(
        command="check",
        input=input_summary(loaded),
        config={"check_file": cfg.path, "baseline": baseline_path,
                "baseline_command": None if base is None else base.get("command"),
                "before": before_path, "fail_on": gates.level,
                "fail_on_diff": section.fail_on_diff, "matched_only": matched_only,
                "on_missing": cfg.on_missing, "diagnosed": diagnosed},
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
