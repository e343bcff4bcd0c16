"""`trace diff`: two runs of a change, judged on one request chain under the same conditions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from yaotu_trace.cli.app import command, emit, trace_input
from yaotu_trace.cli.options import (
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
    MetricsAfterOpt,
    MetricsBeforeOpt,
    ModelOpt,
    OutputOpt,
    PresetOpt,
    SourceBlockOpt,
    StepsAfterOpt,
    StepsBeforeOpt,
    ThresholdOpt,
    TpOpt,
)
from yaotu_trace.cli.progress import QuietOpt, progress
from yaotu_trace.errors import ConfigError
from yaotu_trace.render import OutputFormat

BeforeArg = Annotated[Path, typer.Argument(help="Trace of the run before the change.",
                                           show_default=False, metavar="BEFORE")]
AfterArg = Annotated[Path, typer.Argument(help="Trace of the run after the change (the same "
                                          "file as BEFORE compares a run against itself).",
                                          show_default=False, metavar="AFTER")]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="The matched requests side by side (TTFT, latency, hits, "
                 "status of each run) to .parquet or .csv."),
]


@command(arguments={"before": "BEFORE", "after": "AFTER"})
def diff(
    before: BeforeArg,
    after: AfterArg,
    steps_before: StepsBeforeOpt = None,
    steps_after: StepsAfterOpt = None,
    metrics_before: MetricsBeforeOpt = None,
    metrics_after: MetricsAfterOpt = None,
    log_tz: LogTzOpt = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    tp: TpOpt = None,
    kv_capacity: KvCapacityOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    kv_dtype: KvDtypeOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_batched_tokens: MaxBatchedTokensOpt = None,
    link_gbps: LinkGbpsOpt = None,
    preset: PresetOpt = None,
    threshold: ThresholdOpt = None,
    jobs: JobsOpt = 1,
    dask: DaskOpt = None,
    matched_only: MatchedOnlyOpt = False,
    out: OutOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
    input_format: InputFormatOpt = None,
    map: MapOpt = None,
    source_block_size: SourceBlockOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Compare two runs of a change: is the comparison fair, and what changed on each axis?

    The conditions come first, each same, differs or unknown with its evidence: the request
    chain (matched by request id, else by prompt content and arrival), the prompt and output
    lengths (a two-sample KS test), the model and hardware, the cache warmth at the start and
    the success rate. The diff is comparable only when none differs; the report says what would
    make it fair. Then each axis before and after (status, cause, score) with its key measures
    judged against run-to-run noise (bootstrap over requests), and the ledger of the change:
    work saved and work added, each with how it was computed. --model, --gpu and the other
    diagnosis options mean what they mean to trace diagnose and describe both runs;
    --input-format, --map and --source-block-size read both.

    Examples:

      trace diff small-pool.parquet large-pool.parquet --steps-before small.steps.parquet
      --steps-after large.steps.parquet --model Llama-3.1-8B

      trace diff before.jsonl after.jsonl --format json -o diff.json

      trace diff before.parquet after.parquet --matched-only --out matched.parquet

      trace diff run.parquet run.parquet
    """
    from yaotu_trace.commands import diff as diff_command

    if format is OutputFormat.HTML or (format is None and output is not None
                                       and output.suffix.lower() in (".html", ".htm")):
        raise ConfigError("trace diff writes table, markdown or json; give --format table, "
                          "markdown or json (or -o FILE.md / .json / .txt)")
    from yaotu_trace.diagnosis.options import DiagnosisOptions

    options = DiagnosisOptions(
        metrics=metrics_after, log_tz=log_tz, model=model, gpu=gpu, tp=tp,
        kv_bytes_per_token=kv_bytes_per_token, kv_dtype=kv_dtype, kv_capacity=kv_capacity,
        block_size_tokens=block_size, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, link_gbps=link_gbps, preset=preset,
        thresholds=tuple(threshold or ()), jobs=jobs, dask=dask)
    with progress("diff", quiet) as update:
        report = diff_command.diff(
            trace_input(before, input_format, map, source_block_size, steps_before),
            trace_input(after, input_format, map, source_block_size, steps_after),
            options, metrics_before=metrics_before, matched_only=matched_only, out=out,
            progress=update)
    emit(report, format, output)
