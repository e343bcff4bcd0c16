"""`trace simulate`: replay a trace through a modelled serving engine; write timing + step log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    from yaotu_trace.commands.load import TraceSource
    from yaotu_trace.sim.scenario import Scenario

# The tables `--out` and `--steps-out` are written as.
OUT_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


def simulate(
    trace: TraceSource,
    *,
    out: Path,
    scenario: Scenario | None = None,
    scenario_file: Path | None = None,
    steps_out: Path | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace simulate`: per-request timing written to `out`, the step log to `steps_out`.

    `scenario` holds the engine options (`yaotu_trace.sim.scenario.Scenario`, None: every
    default); those it sets override the ones of `scenario_file` (TOML), as command-line
    options override `--scenario`. Both tables are written through the atomic writers.
    """
    from yaotu_trace.data.canonical import write_trace
    from yaotu_trace.sim.scenario import Scenario, load_scenario, run_scenario

    check_out(out, "--out")
    if steps_out is not None:
        check_out(steps_out, "--steps-out")
    given = scenario or Scenario()
    chosen = load_scenario(scenario_file).merged(given) if scenario_file is not None else given
    loaded = open_trace(trace, lazy_content=False, progress=progress, steps=False)
    tell(progress, "simulating", 0.3)
    run = run_scenario(loaded, chosen)
    tell(progress, "writing the timed trace", 0.9)
    write_trace(run.requests, out, source_block_size=loaded.source_block_size)
    if steps_out is not None:
        write_trace(run.steps, steps_out)
    return Report(
        command="simulate",
        input=input_summary(loaded),
        config={"scenario": chosen, "engine": run.resolved.config.to_dict()},
        sections={"simulation": run.summary},
    )


def check_out(path: Path, option: str) -> None:
    """A table's extension, checked before any work."""
    if path.suffix.lower() not in OUT_SUFFIXES:
        raise ConfigError(f"{option} {path}: write .parquet, .jsonl or .csv, not "
                          f"'{path.suffix or '(no extension)'}'")
