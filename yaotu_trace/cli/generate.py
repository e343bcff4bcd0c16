"""`trace generate`: write a deterministic synthetic trace of a named scenario."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from yaotu_trace.cli.app import command, write_atomically
from yaotu_trace.cli.progress import QuietOpt
from yaotu_trace.errors import ConfigError
from yaotu_trace.files import STDOUT
from yaotu_trace.sim.workloads import DEFAULT_MODEL, Scenario

WRITABLE_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


@command()
def generate(
    scenario: Annotated[
        Scenario,
        typer.Argument(
            help="Workload to generate (listed above).",
            metavar="SCENARIO",
            case_sensitive=False,
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output file; the extension picks the format: .parquet, .jsonl or .csv. "
            "'-' writes JSONL to stdout.",
            show_default=False,
        ),
    ],
    seed: Annotated[int, typer.Option("--seed", help="Random seed.", min=0)] = 0,
    requests: Annotated[
        int | None,
        typer.Option("--requests", "-n", help="Number of requests [default: per scenario].", min=1),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Mean arrival rate in requests/s [default: per scenario]."),
    ] = None,
    tenants: Annotated[
        int | None,
        typer.Option("--tenants", help="Number of tenants [default: per scenario].", min=1),
    ] = None,
    model: Annotated[str, typer.Option("--model", help="Value of the model column.")] = (
        DEFAULT_MODEL
    ),
    steps_out: Annotated[
        Path | None,
        typer.Option(
            "--steps-out",
            help="Step log of a diag-* scenario's simulated run (.parquet, .jsonl or .csv).",
            show_default=False,
        ),
    ] = None,
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

    Examples:

      trace generate chat --out chat.parquet --seed 1

      trace generate bursty --requests 500 --rate 2 --out bursty.jsonl

      trace generate multi-tenant --tenants 8 --out - | head -n 1

      trace generate diag-kv-churn --out churn.parquet --steps-out churn.steps.parquet
    """
    from yaotu_trace.data.canonical import write_trace
    from yaotu_trace.sim.generate import ENGINES, GenerateOptions
    from yaotu_trace.sim.generate import generate_with_steps as build

    if out != STDOUT and out.suffix.lower() not in WRITABLE_SUFFIXES:
        raise ConfigError(
            f"--out {out}: cannot tell the format from '{out.suffix or '(no extension)'}'; "
            "end the name with .parquet, .jsonl or .csv (or pass '-' for JSONL on stdout)"
        )
    if steps_out is not None:
        if scenario not in ENGINES:
            raise ConfigError(
                f"--steps-out: scenario {scenario.value} has no engine run; only the diag-* "
                "scenarios are simulated"
            )
        if steps_out.suffix.lower() not in WRITABLE_SUFFIXES:
            raise ConfigError(
                f"--steps-out {steps_out}: end the name with .parquet, .jsonl or .csv"
            )
    options = GenerateOptions(
        scenario=scenario,
        seed=seed,
        requests=requests,
        rate_per_s=rate,
        tenants=tenants,
        model=model,
    )
    table, steps = build(options)
    if out == STDOUT:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "trace.jsonl"
            write_trace(table, path)
            write_atomically(STDOUT, path.read_text(encoding="utf-8"))
    else:
        write_trace(table, out)
    if steps_out is not None and steps is not None:
        write_trace(steps, steps_out)
    if quiet:
        return
    span_s = float(table["arrival_s"].iloc[-1])
    rate_per_s = (len(table) - 1) / span_s if span_s > 0 else float("nan")
    sys.stderr.write(
        f"generated {len(table)} {scenario.value} requests (seed {seed}): "
        f"{table['tenant'].nunique()} tenants, {table['session_id'].nunique()} sessions, "
        f"{int(table['prompt_len'].sum()):,} prompt tokens, {span_s:,.1f} s at "
        f"{rate_per_s:.2f} req/s -> {'stdout' if out == STDOUT else out}"
        + (f", step log -> {steps_out}" if steps_out is not None and steps is not None else "")
        + "\n"
    )
