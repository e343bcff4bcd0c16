"""`trace check`: a CI gate on a trace's metrics: thresholds, a baseline, the diagnosis, and the
change against a run before."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from yaotu_trace.cli.app import (
    before_input,
    command,
    emit,
    report_format,
    trace_input,
    write_atomically,
)
from yaotu_trace.cli.options import (
    BeforeOpt,
    BlockSizeOpt,
    DaskOpt,
    FormatOpt,
    GpuOpt,
    InputFormatOpt,
    JobsOpt,
    KvBytesOpt,
    KvCapacityOpt,
    KvDtypeOpt,
    LinkGbpsOpt,
    LogTzOpt,
    MapOpt,
    MatchedOnlyOpt,
    MaxBatchedTokensOpt,
    MaxNumSeqsOpt,
    MetricsBeforeOpt,
    MetricsOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    SourceBlockOpt,
    StepsBeforeOpt,
    StepsOpt,
    ThresholdOpt,
    TierChunkOpt,
    TierOpt,
    TierPolicyOpt,
    TierStoreThresholdOpt,
    TokenizerOpt,
    TpOpt,
    TraceArg,
    tier_options_of,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.errors import ConfigError, ExitCode
from yaotu_trace.render import OutputFormat

if TYPE_CHECKING:
    from yaotu_trace.data.report import Report
    from yaotu_trace.gate.check import CheckSection

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Check file (TOML): thresholds by JSON path and "
                 "baseline tolerances; see docs/ci.md.", dir_okay=False),
]
BaselineOpt = Annotated[
    Path | None,
    typer.Option("--baseline", "-b", help="A JSON report the tool wrote earlier (e.g. `trace "
                 "diagnose -f json`); regressions beyond the tolerances fail.", dir_okay=False),
]


def _fail_on(value: str | None) -> str | None:
    """Refuse a `--fail-on` word before anything is read (a usage error)."""
    from yaotu_trace.gate.fail_on import parse_fail_on

    if value is not None:
        try:
            parse_fail_on(value)
        except ConfigError as err:
            raise typer.BadParameter(str(err).removeprefix("--fail-on: ")) from None
    return value


FailOnOpt = Annotated[
    str | None,
    typer.Option("--fail-on", metavar="[warning|bottleneck][,regressed][,not-comparable]"
                 "[,observed-shortfall[:POINTS:PERCENT]]",
                 callback=_fail_on,
                 help="Comma-separated: fail when a diagnosis axis is at or above warning or "
                 "bottleneck; with --before, when an axis regressed or a condition of the "
                 "comparison differs (not-comparable) [default with --before: "
                 "regressed,not-comparable]; observed-shortfall: when the engine's own "
                 "cached tokens fall below the exact replay over a stretch of time by 2 "
                 "points and 10 % (or POINTS and PERCENT)."),
]
JunitOpt = Annotated[
    Path | None,
    typer.Option("--junit", help="Also write JUnit XML (one test case per check)."),
]
MarkdownOpt = Annotated[
    Path | None,
    typer.Option("--markdown", help="Also write Markdown (CI step summary, PR comment)."),
]


@command()
def check(
    trace: TraceArg,
    config: ConfigOpt = None,
    baseline: BaselineOpt = None,
    fail_on: FailOnOpt = None,
    before: BeforeOpt = None,
    steps_before: StepsBeforeOpt = None,
    metrics_before: MetricsBeforeOpt = None,
    matched_only: MatchedOnlyOpt = False,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    junit: JunitOpt = None,
    markdown: MarkdownOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    steps: StepsOpt = None,
    metrics: MetricsOpt = None,
    log_tz: LogTzOpt = None,
    model: ModelOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    kv_capacity: KvCapacityOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    link_gbps: LinkGbpsOpt = None,
    preset: PresetOpt = None,
    threshold: ThresholdOpt = None,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    tiers: TierOpt = None,
    tier_chunk_tokens: TierChunkOpt = None,
    tier_store_threshold: TierStoreThresholdOpt = None,
    tier_policy: TierPolicyOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    tokenizer: TokenizerOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Gate CI on a trace: thresholds on any reported metric, a baseline, the diagnosis, the
    change since a run before.

    A check names a metric by its JSON path in the reports (docs/json.md), e.g.
    prefix_reuse.hit_ratio >= 0.4 or queueing.queue_time_s.p99 <= 2. With --baseline alone,
    the headline metrics (hit ratio, queue-time, TTFT and inter-token percentiles, preempted
    share) are compared with default tolerances. With --before, each condition of a fair
    comparison (same requests, lengths, model, hardware, cache warmth, success rate) and each
    axis' change is a check. The diagnosis options (--model, --gpu, --kv-capacity, ...) mean
    what they mean to trace diagnose; they describe both runs of a change. Exit 0 when every
    check passes, 1 when one fails, 3 for an unreadable trace (or BEFORE), check file or
    baseline, or an unknown metric path.

    Examples:

      trace check prod.jsonl --config checks.toml --junit checks.xml

      trace check prod.jsonl --baseline last-week.json --markdown "$GITHUB_STEP_SUMMARY"

      trace check sim.parquet --steps steps.parquet --fail-on bottleneck

      trace check after.parquet --before before.parquet --fail-on regressed,not-comparable

      trace check captures/sglang-metrics/ --fail-on observed-shortfall
    """
    from yaotu_trace.commands import check as check_command

    earlier = before_input(before, steps_before, metrics_before, matched_only, input_format,
                           map, source_block_size)
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    options = DiagnosisOptions(
        metrics=metrics, log_tz=log_tz, model=model, gpu=gpu, tp=tp,
        kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, kv_capacity=kv_capacity,
        block_size_tokens=block_size, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, link_gbps=link_gbps, preset=preset,
        thresholds=tuple(threshold or ()), jobs=jobs, dask=dask)
    tier_options = tier_options_of(tiers, tier_chunk_tokens, tier_policy,
                                   tier_store_threshold)
    with progress("check", quiet) as update:
        report = check_command.check(
            trace_input(trace, input_format, map, source_block_size, steps, tokenizer=tokenizer),
            options,
            config=config, baseline=baseline, fail_on=fail_on, before=earlier,
            progress=update, tiers=tier_options)
    _write_ci_files(report, junit, markdown)
    emit(report, format, output)
    section = report.sections["checks"]
    if output is not None or report_format(format, output) is not OutputFormat.TABLE:
        # The table ends with this line; other outputs get it on stderr for the CI log.
        _summary_to_stderr(section)
    failed = section.failed
    return int(ExitCode.FINDINGS if failed else ExitCode.OK)


def _write_ci_files(report: Report, junit: Path | None, markdown: Path | None) -> None:
    """The `--junit` and `--markdown` files a CI job shows besides the report."""
    if junit is not None:
        from yaotu_trace.render.junit import render_junit

        write_atomically(junit, render_junit(report))
    if markdown is not None:
        from yaotu_trace.render import render

        write_atomically(markdown, render(report, OutputFormat.MARKDOWN))


def _summary_to_stderr(section: CheckSection) -> None:
    """The table's last line (`PASSED: 3 passed, ...`), for the CI log."""
    from yaotu_trace.data.report import to_builtins
    from yaotu_trace.render.views.checks import summary_line

    sys.stderr.write(f"trace check: {summary_line(to_builtins(section))}\n")
