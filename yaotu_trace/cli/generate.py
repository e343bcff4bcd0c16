"""`trace generate`: write a deterministic synthetic trace of a named scenario."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from yaotu_trace._visible import visible
from yaotu_trace.cli.app import command
from yaotu_trace.cli.options import MetricsOutOpt
from yaotu_trace.cli.progress import QuietOpt
from yaotu_trace.files import STDOUT
from yaotu_trace.sim.workloads import DEFAULT_MODEL, WorkloadKind

if TYPE_CHECKING:
    from yaotu_trace.commands.generate import GeneratedTrace


ScenarioArg = Annotated[
    WorkloadKind,
    typer.Argument(help="Workload to generate (listed above).", metavar="SCENARIO",
                   case_sensitive=False, show_default=False),
]
OutOpt = Annotated[
    Path,
    typer.Option("--out", "-o", help="Output file; the extension picks the format: .parquet, "
                 ".jsonl or .csv. '-' writes JSONL to stdout.", show_default=False),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed.", min=0)]
RequestsOpt = Annotated[
    int | None,
    typer.Option("--requests", "-n", help="Number of requests [default: per scenario].", min=1),
]
RateOpt = Annotated[
    float | None,
    typer.Option("--rate", help="Mean arrival rate in requests/s [default: per scenario]."),
]
TenantsOpt = Annotated[
    int | None,
    typer.Option("--tenants", help="Number of tenants [default: per scenario].", min=1),
]
ModelColumnOpt = Annotated[str, typer.Option("--model", help="Value of the model column.")]
StepsOutOpt = Annotated[
    Path | None,
    typer.Option("--steps-out", help="Step log of a diag-* scenario's simulated run (.parquet, "
                 ".jsonl or .csv).", show_default=False),
]


@command()
def generate(
    scenario: ScenarioArg,
    out: OutOpt,
    seed: SeedOpt = 0,
    requests: RequestsOpt = None,
    rate: RateOpt = None,
    tenants: TenantsOpt = None,
    model: ModelColumnOpt = DEFAULT_MODEL,
    steps_out: StepsOutOpt = None,
    metrics_out: MetricsOutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write a synthetic trace: token-level prompts, lengths, arrivals, tenants and sessions.

    The same scenario, options and seed always give a byte-identical file.

    \b
    Scenarios:
      chat          multi-turn sessions; each prompt extends the previous prompt and output
      multi-tenant  system prompts shared across tenants plus tenant-specific ones
      rag           shared documents in varied order: reuse that is not a prefix
      bursty        on/off arrivals (interarrival CV ~5, like Azure 2023 code)
      agentic       tool loops whose contexts grow to tens of thousands of tokens
      long-prefill  long-document prompts mixed with short prompts and long decodes

    \b
    Diagnosis fixtures (run through `trace simulate` on Llama-3.1-8B / H100: engine timing,
    and the step log with --steps-out):
      diag-healthy           moderate load on a roomy engine: no bottleneck
      diag-burst             a burst far above the engine's seats: queueing, arrival_burst
      diag-dispatch          host gaps idle the GPU between steps: queueing, dispatch_overhead
      diag-kv-churn          a KV pool too small: preemption churn (kv_memory)
      diag-long-prefill      long prompts without chunking stall decodes (pd_interference)
      diag-prefix-recompute  one system prompt prefilled again and again (prefix_reuse)
      diag-minute-burst      one minute at twice the engine's rate in ten quiet ones:
                             queueing, arrival_burst

    Examples:

      trace generate chat --out chat.parquet --seed 1

      trace generate bursty --requests 500 --rate 2 --out bursty.jsonl

      trace generate multi-tenant --tenants 8 --out - | head -n 1

      trace generate diag-kv-churn --out churn.parquet --steps-out churn.steps.parquet
    """
    from yaotu_trace.commands import generate as generate_command
    from yaotu_trace.sim.generate import GenerateOptions

    options = GenerateOptions(scenario=scenario, seed=seed, requests=requests, rate_per_s=rate,
                              tenants=tenants, model=model)
    report = generate_command.generate(options, out=out, steps_out=steps_out,
                                       metrics_out=metrics_out)
    if not quiet:
        sys.stderr.write(visible(summary_line(report.sections["generated"]), one_line=True)
                         + "\n")


def summary_line(done: GeneratedTrace) -> str:
    """What was generated, for stderr: the population, the span and rate, where it went."""
    return (
        f"generated {done.requests} {done.scenario} request{'' if done.requests == 1 else 's'} "
        f"(seed {done.seed}): "
        f"{done.tenants} tenant{'' if done.tenants == 1 else 's'}, "
        f"{done.sessions} session{'' if done.sessions == 1 else 's'}, "
        f"{done.prompt_tokens:,} prompt tokens, {done.span_s:,.1f} s"
        # One request (or all at one instant) has no rate.
        + (f" at {done.rate_per_s:.2f} req/s" if math.isfinite(done.rate_per_s) else "")
        + f" -> {'stdout' if done.out == str(STDOUT) else done.out}"
        + (f", step log -> {done.steps_out}" if done.steps_out is not None else "")
    )
