"""`trace check`: a CI gate on a trace's metrics: thresholds, a baseline, the diagnosis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.gate.check import CheckConfig, FailOn


def check(
    trace: TraceSource,
    *,
    config: Path | CheckConfig | None = None,
    baseline: Path | None = None,
    fail_on: FailOn | None = None,
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
    parsed `CheckConfig`), of the comparison with `baseline` (a JSON report the tool wrote) and
    of the diagnosis gate `fail_on`. The trace is analyzed, and diagnosed with the diagnosis
    options only when a check needs an axis, the verdict or the ledger.

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
    base = load_baseline(baseline) if baseline is not None else None
    if not cfg.checks and base is None and (fail_on or cfg.fail_on) is None:
        raise ConfigError("nothing to check: give --config with [[check]] entries, "
                          "--baseline, or --fail-on (see docs/ci.md)")
    loaded = open_trace(trace, lazy_content=True, progress=progress)
    diagnosis = diagnosis_of(loaded, metrics=metrics, model=model, kv_capacity=kv_capacity,
                             block_size_tokens=block_size_tokens, preset=preset,
                             threshold=threshold, kv_dtype=kv_dtype, log_tz=log_tz)
    tell(progress, "analyzing", 0.3)
    doc: dict[str, Any] = report_view(analyze(loaded))
    gate = fail_on or cfg.fail_on
    diagnosed = wants_diagnosis(doc, cfg, base is not None, gate)
    if diagnosed:
        doc = report_view(diagnosis(), under=doc)
    baseline_path = None if baseline is None else str(baseline)
    section = run_checks(doc, cfg, base, baseline_path=baseline_path, fail_on=gate)
    return Report(
        command="check",
        input=input_summary(loaded),
        config={"check_file": cfg.path, "baseline": baseline_path,
                "baseline_command": None if base is None else base.get("command"),
                "fail_on": gate, "on_missing": cfg.on_missing, "diagnosed": diagnosed},
        sections={"checks": section},
    )
