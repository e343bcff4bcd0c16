"""The command-line options shared by several commands, each defined once.

An option that two commands take means the same in both: the same name, help, type and default
(`tests/cli/test_one_cli.py` checks it). Options of one command only live with that command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from yaotu_trace.catalog.gpus import DEFAULT_LINK_GBPS
from yaotu_trace.catalog.units import MAX_BLOCK_TOKENS, MAX_COUNT
from yaotu_trace.cli.progress import QuietOpt
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.prefix.rules import Accounting, Preset, Route, Scope, TouchOrder
from yaotu_trace.render import OutputFormat

if TYPE_CHECKING:
    from yaotu_trace.prefix.options import ReplayOptions

__all__ = ["QuietOpt"]

TraceArg = Annotated[
    Path,
    typer.Argument(
        help="Trace file (.parquet, .jsonl, .csv, .json) or a folder of WEKA conversation files.",
        show_default=False,
        metavar="TRACE"),
]
# `trace diagnose` only: without a trace it judges the telemetry (--metrics, --steps) alone.
OptionalTraceArg = Annotated[
    Path | None,
    typer.Argument(
        help="Trace file (.parquet, .jsonl, .csv, .json) or a folder of WEKA conversation files; "
        "leave it out to judge --metrics (or --steps) alone.",
        show_default=False,
        metavar="TRACE"),
]
InputFormatOpt = Annotated[
    TraceFormat | None,
    typer.Option(
        "--input-format",
        "-i",
        help="Input format; detected from the extension and fields when omitted.",
        case_sensitive=False,
    ),
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        help="Rename a source column to a canonical one: --map arrival_s=ts (repeatable).",
        metavar="CANONICAL=SOURCE"),
]
SourceBlockOpt = Annotated[
    int | None,
    typer.Option(
        "--source-block-size",
        help="Tokens per id when the trace's prompts are block ids (overrides the format's).",
        min=1,
    ),
]
TokenizerOpt = Annotated[
    Path | None,
    typer.Option("--tokenizer", help="The model's tokenizer.json, to read a log that holds "
                 "text (a gateway log) as token ids; a chat request is rendered through the "
                 "chat_template of the tokenizer_config.json beside it. Needs the optional "
                 "extra: pip install 'yaotu-trace[tokenizer]'.", show_default=False),
]
MetricsOutOpt = Annotated[Path | None, typer.Option(
    "--metrics-out", help="The simulated engine's Prometheus export (vLLM metric names, one "
    "series per instance) as the CSV --metrics reads.", show_default=False)]
StepsOpt = Annotated[
    Path | None,
    typer.Option("--steps", help="Per-step engine log (.parquet, .jsonl or .csv)."),
]
FormatOpt = Annotated[
    OutputFormat | None,
    typer.Option("--format", "-f", help="Report format [default: from the extension of -o "
                 "(.json, .md, .html, .txt), else table].", case_sensitive=False,
                 show_default=False),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to this file instead of stdout ('-' is stdout; a FIFO or "
        "/dev/fd/N is written directly, a file atomically)."),
]
JobsOpt = Annotated[
    int,
    typer.Option("--jobs", "-j", min=1, help="Run independent caches and passes side by side "
                 "in this many workers: processes for replays, threads for the points of a "
                 "sweep's tier curve (results are identical to one)."),
]
DaskOpt = Annotated[
    str | None,
    typer.Option("--dask", metavar="ADDRESS", help="Run them on a Dask cluster instead: "
                 "tcp://scheduler:8786, or 'local' for a local cluster of 2 workers (needs "
                 "pip install 'yaotu-trace[dask]')."),
]


KvBytesOpt = Annotated[
    int | None,
    typer.Option("--kv-bytes-per-token", min=1, max=MAX_COUNT,
                 help="KV bytes per token (overrides --model's)."),
]
KvDtypeOpt = Annotated[
    str | None,
    typer.Option("--kv-dtype", metavar="DTYPE", help="KV cache data type of --model: bf16, "
                 "fp16, fp8 (e4m3 or e5m2) or fp4 (NVFP4, with its scales) [default: the "
                 "model's, bf16 for most]."),
]
# Options of the diagnosis, shared by `trace diagnose`, `trace check` and `trace report`.
MetricsOpt = Annotated[
    Path | None,
    typer.Option("--metrics", help="Engine telemetry: a Prometheus range-query export (JSON "
                 "or CSV), /metrics text (one snapshot, a file or folder of scrapes), or a vLLM "
                 "or SGLang server log (found by its content); see docs/formats.md."),
]
# The run before a change, for `trace check` and `trace report` (`trace diff` takes it as its
# first argument): the same deployment's telemetry options, of that run.
BeforeOpt = Annotated[
    Path | None,
    typer.Option("--before", help="The trace of the run before the change, to judge this one "
                 "against on the same requests (docs/diff.md); --input-format and --map apply "
                 "to both.", dir_okay=True, show_default=False),
]
# Two runs compared (`trace diff`, `trace check --before`): each run's step log and telemetry.
StepsBeforeOpt = Annotated[
    Path | None,
    typer.Option("--steps-before", help="Per-step engine log of the BEFORE run."),
]
StepsAfterOpt = Annotated[
    Path | None,
    typer.Option("--steps-after", help="Per-step engine log of the AFTER run."),
]
MetricsBeforeOpt = Annotated[
    Path | None,
    typer.Option("--metrics-before", help="Engine telemetry of the BEFORE run (as --metrics)."),
]
MetricsAfterOpt = Annotated[
    Path | None,
    typer.Option("--metrics-after", help="Engine telemetry of the AFTER run (as --metrics)."),
]
MatchedOnlyOpt = Annotated[
    bool,
    typer.Option("--matched-only", help="Judge every condition and axis on the requests both "
                 "runs served only (the request chain is then the matched subset)."),
]


def _log_zone(value: str | None) -> str | None:
    """Refuse a zone `--log-tz` cannot name before anything is read (a usage error)."""
    if value is not None:
        from yaotu_trace.errors import ConfigError
        from yaotu_trace.ingest.telemetry.serverlog import log_zone

        try:
            log_zone(value)
        except ConfigError as err:
            raise typer.BadParameter(str(err).removeprefix("--log-tz ")) from None
    return value


LogTzOpt = Annotated[
    str | None,
    typer.Option("--log-tz", metavar="ZONE", callback=_log_zone,
                 help="Zone of a server log's times, which carry none: an IANA name "
                 "(Asia/Shanghai) or a UTC offset (+08:00) [default: UTC]."),
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Model from the catalog (`trace models`, case-insensitive, "
                 "aliases accepted): its KV bytes per token, parameters and FLOPs."),
]
GpuOpt = Annotated[
    str | None,
    typer.Option("--gpu", help="GPU from the catalog (e.g. H100-SXM, A100-80GB, MI300X, or an "
                 "alias such as H100): compute, memory and bandwidth."),
]
GpuPriceOpt = Annotated[
    str | None,
    typer.Option("--gpu-price", metavar="DOLLARS", help="$ per GPU-hour: GPU-hours saved or "
                 "added are also priced in money per day of the trace's traffic (no default)."),
]
MemoryPriceOpt = Annotated[
    str | None,
    typer.Option("--memory-price", metavar="DOLLARS", help="$ per GiB-month of host memory or "
                 "storage: a tier's size priced per day; NAME=DOLLARS prices one tier, e.g. "
                 "3,disk=0.08 (no default)."),
]
LinkOpt = Annotated[
    list[str] | None,
    typer.Option("--link", metavar="NAME=BANDWIDTH[,LATENCY]", help="A tier path's link (pcie, "
                 "nvme, nic), e.g. pcie=32GB/s or nic=200Gb/s,0.5ms; defaults and their "
                 "sources in docs/tiers.md (repeatable)."),
]
TpOpt = Annotated[int | None, typer.Option("--tp", help="Tensor-parallel GPUs per instance [1].",
                                           min=1)]
LinkGbpsOpt = Annotated[
    float | None,
    typer.Option("--link-gbps", min=0.001, help="Network link for KV transfer between prefill "
                 f"and decode instances, Gb/s [default: {DEFAULT_LINK_GBPS:g}, one 400G NIC "
                 "per GPU]."),
]
KvCapacityOpt = Annotated[
    str | None,
    typer.Option("--kv-capacity", help="KV pool of one instance: blocks (20000), tokens "
                 "(3.2Mtok) or bytes (40GiB, needs --model)."),
]
BlockSizeOpt = Annotated[
    int | None,
    typer.Option("--block-size", min=1, max=MAX_BLOCK_TOKENS, help="KV block size in tokens of "
                 "the diagnosis [default: "
                 "16; the prefix replay uses its preset's]."),
]
MaxNumSeqsOpt = Annotated[
    int | None,
    typer.Option("--max-num-seqs", min=1, help="Engine cap on running requests (else the "
                 "largest batch seen)."),
]
MaxBatchedTokensOpt = Annotated[
    int | None,
    typer.Option("--max-batched-tokens", min=1, help="Engine token budget per step (else the "
                 "largest step seen)."),
]

# The prefix-cache rules, shared by `trace replay` and `trace sweep`: each overrides --preset.
RuleBlockSizeOpt = Annotated[
    int | None,
    typer.Option("--block-size", min=1, max=MAX_BLOCK_TOKENS, help="Tokens per cache block (a "
                 "multiple of the trace's "
                 "block-id size) [default: the preset's]."),
]
LastTokenRuleOpt = Annotated[
    bool | None,
    typer.Option("--last-token-rule/--no-last-token-rule", show_default=False,
                 help="At least one prompt token is always computed [default: the preset's]."),
]
TenantIsolationOpt = Annotated[
    bool | None,
    typer.Option("--tenant-isolation/--no-tenant-isolation", show_default=False,
                 help="Tenants never share cache blocks (needs a tenant column)."),
]
TouchOrderOpt = Annotated[
    TouchOrder | None,
    typer.Option("--touch-order", case_sensitive=False, help="Order a request touches its "
                 "blocks after lookup: tail-first (the last block most recent, as vLLM) or "
                 "head-first (flat LRU, as Mooncake's figure)."),
]
CachePartialOpt = Annotated[
    bool | None,
    typer.Option("--cache-partial-blocks/--no-cache-partial-blocks", show_default=False,
                 help="Cache a prompt's trailing partial block (worth its length)."),
]
CacheOutputsOpt = Annotated[
    bool | None,
    typer.Option("--cache-outputs/--no-cache-outputs", show_default=False,
                 help="Also cache the full blocks of prompt + output (needs output token ids)."),
]
ScopeOpt = Annotated[
    Scope | None,
    typer.Option("--scope", case_sensitive=False,
                 help="One global cache, or one cache per instance."),
]
RouteOpt = Annotated[
    Route | None,
    typer.Option("--route", case_sensitive=False, help="Assign requests to instances (implies "
                 "--scope instance) [default: the trace's instance column, else round-robin]."),
]
InstancesOpt = Annotated[
    int | None,
    typer.Option("--instances", min=1, help="Number of instances when requests are routed."),
]
WarmupOpt = Annotated[
    str | None,
    typer.Option("--warmup", metavar="W", show_default=False,
                 help="Count hits only after a warm-up window: a share of requests (0.5, "
                 "50%), a number of requests (1000, 1000req) or trace time (600s, 10min); "
                 "every request still warms the cache [default: none]."),
]
AccountingOpt = Annotated[
    Accounting | None,
    typer.Option("--accounting", case_sensitive=False, help="Whose bookkeeping a finite cache "
                 "follows: vllm (its block pool, --capacity = num_gpu_blocks), sglang (its radix "
                 "tree, --capacity = token-pool pages) or clean (one LRU list of full blocks, "
                 "the model the waterfall and the curve explain) [default: the preset's]."),
]
TierOpt = Annotated[
    list[str] | None,
    typer.Option("--tier", metavar="NAME=SIZE", show_default=False,
                 help="A tier below the GPU pool (repeatable, top down): NAME cpu, disk or "
                 "remote; SIZE in GiB/GB (needs --model), tokens (64Mtok) or blocks (20000), "
                 "or unlimited below the first (vLLM's fs tier) [default: none].",
                 rich_help_panel="Tiers below the GPU"),
]
TierChunkOpt = Annotated[
    int | None,
    typer.Option("--tier-chunk", metavar="TOKENS", show_default=False,
                 help="Tokens per tier chunk, a multiple of the block size [default: the "
                 "engine's: vLLM one block, LMCache 256, SGLang one page].",
                 rich_help_panel="Tiers below the GPU"),
]
TierPolicyOpt = Annotated[
    str | None,
    typer.Option("--tier-policy", metavar="POLICY", show_default=False,
                 help="Whose rules move KV between the tiers: vllm-native (LRU; "
                 "vllm-native-arc with vLLM's eviction_policy arc), lmcache, write_through, "
                 "write_through_selective or write_back [default: the --preset engine's "
                 "own].", rich_help_panel="Tiers below the GPU"),
]


TierStoreThresholdOpt = Annotated[
    int | None,
    typer.Option("--tier-store-threshold", metavar="N", show_default=False, min=0, max=1_000_000,
                 help="vLLM's store_threshold for its CPU tier: a chunk is stored from its "
                 "N-th offer on (N >= 2; vllm-native and vllm-native-arc policies, one CPU "
                 "tier) [default: 0, every offer stored].",
                 rich_help_panel="Tiers below the GPU"),
]


def tier_options_of(tiers: list[str] | None, chunk_tokens: int | None,
                    policy: str | None, store_threshold: int | None = None
                    ) -> ReplayOptions | None:
    """`--tier`, `--tier-chunk`, `--tier-policy` and `--tier-store-threshold` of a command
    that judges a deployment (diagnose, check, report), or None when none is given."""
    if not tiers and chunk_tokens is None and policy is None and store_threshold is None:
        return None
    from yaotu_trace.prefix.options import ReplayOptions

    return ReplayOptions(tiers=tuple(tiers or ()), tier_chunk_tokens=chunk_tokens,
                         tier_policy=policy, tier_store_threshold=store_threshold)


CapacityOpt = Annotated[
    str | None,
    typer.Option("--capacity", show_default=False,
                 help="Prefix cache capacity per cache, the GPU tier any --tier sits below: "
                 "blocks (20000), tokens (3.2Mtok) or bytes (40GiB, needs --model) "
                 "[default: unlimited]."),
]
PresetOpt = Annotated[
    Preset | None,
    typer.Option("--preset", help="Prefix-replay engine rules [default: mooncake for Mooncake "
                 "traces, else vllm]; the rule options override them.", case_sensitive=False),
]
ThresholdOpt = Annotated[
    list[str] | None,
    typer.Option("--threshold", "-t", metavar="NAME=VALUE",
                 help="Override a diagnosis threshold (repeatable); see docs/rules.md."),
]

ScenarioOpt = Annotated[
    Path | None,
    typer.Option("--scenario", help="TOML file of the engine options (those of trace "
                 "simulate); command-line options override it.", dir_okay=False),
]
