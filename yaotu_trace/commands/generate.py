"""`trace generate`: write a deterministic synthetic trace of a named scenario."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from yaotu_trace.commands.shared.outputs import write_metrics_csv
from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.report import InputSummary, Report
from yaotu_trace.data.run_id import run_id
from yaotu_trace.errors import ConfigError
from yaotu_trace.files import STDOUT, replace_atomically, scratch_folder
from yaotu_trace.sim.generate import (
    ENGINE_BLOCK_SIZE_TOKENS,
    ENGINES,
    GenerateOptions,
    generate_with_steps,
)
from yaotu_trace.sim.workloads import WorkloadKind

# The tables `--out` and `--steps-out` are written as ('-' for `--out`: JSONL on stdout).
WRITABLE_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratedTrace:
    """What was written: the requests' population, span and rate, and where they went."""

    scenario: str
    seed: int
    requests: int
    tenants: int
    sessions: int
    prompt_tokens: int
    span_s: float
    rate_per_s: float
    out: str
    steps_out: str | None


def generate(
    options: GenerateOptions | WorkloadKind,
    *,
    out: Path,
    steps_out: Path | None = None,
    metrics_out: Path | None = None,
) -> Report:
    """`trace generate`: the trace `options` describe (`sim.generate.GenerateOptions`: the
    scenario, the seed and the counts, None taking the scenario's default; a bare `WorkloadKind`
    takes every default) written to `out` (and, for a diag-* scenario, its simulated step log
    to `steps_out` and its Prometheus export to `metrics_out`); the same options and seed give
    the same bytes.
    """
    if isinstance(options, WorkloadKind):
        options = GenerateOptions(scenario=options)
    scenario, seed = options.scenario, options.seed
    _check_outputs(scenario, out, steps_out)
    _check_metrics_out(scenario, metrics_out)
    table, steps = generate_with_steps(options)
    # A simulated run's tables share its id (`run_id.py`); a trace without a run has none.
    run = None if steps is None else run_id(table, steps)
    _write(table, out, run)
    if steps_out is not None and steps is not None:
        _write(steps, steps_out, run)
    if metrics_out is not None and steps is not None:
        write_metrics_csv(table, steps, metrics_out,
                          block_size_tokens=ENGINE_BLOCK_SIZE_TOKENS, run=run)
    span_s = float(table["arrival_s"].iloc[-1])
    section = GeneratedTrace(
        scenario=scenario.value, seed=seed, requests=len(table),
        tenants=int(table["tenant"].nunique()), sessions=int(table["session_id"].nunique()),
        prompt_tokens=int(table["prompt_len"].sum()), span_s=span_s,
        rate_per_s=(len(table) - 1) / span_s if span_s > 0 else float("nan"),
        out=str(out), steps_out=None if steps is None or steps_out is None else str(steps_out),
    )
    summary = InputSummary(path=f"scenario {scenario.value}", format="synthetic",
                           rows_read=len(table), requests=len(table), source_block_size=None,
                           content="prompt_tokens" if "prompt_tokens" in table else None,
                           columns=tuple(str(c) for c in table.columns))
    return Report(command="generate", input=summary, config={"options": options},
                  sections={"generated": section})


def _check_outputs(scenario: WorkloadKind, out: Path, steps_out: Path | None) -> None:
    """Refuse, before any work, an output whose extension names no table format."""
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


def _check_metrics_out(scenario: WorkloadKind, metrics_out: Path | None) -> None:
    """`--metrics-out` needs a simulated run and writes CSV."""
    if metrics_out is None:
        return
    if scenario not in ENGINES:
        raise ConfigError(f"--metrics-out: scenario {scenario.value} has no engine run; only "
                          "the diag-* scenarios are simulated")
    if metrics_out.suffix.lower() != ".csv":
        raise ConfigError(f"--metrics-out {metrics_out}: end the name with .csv (timestamp, "
                          "metric, labels, value)")


def _write(table: pd.DataFrame, out: Path, run: str | None) -> None:
    """A canonical table at `out` (by extension; '-': JSONL on stdout), atomically; `run`
    is the id of the simulated run it is from (None: none)."""
    if out != STDOUT:
        write_trace(table, out, run=run)
        return
    with scratch_folder() as folder:
        path = folder / "trace.jsonl"
        write_trace(table, path)
        text = path.read_text(encoding="utf-8")

    def fill(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    replace_atomically(STDOUT, fill)
