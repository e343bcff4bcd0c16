"""`trace simulate`: replay a trace through a modelled serving engine; write timing + step log."""

from __future__ import annotations

from pathlib import Path

from yaotu_trace.commands.load import Progress, TraceSource, open_trace, tell
from yaotu_trace.commands.shared.outputs import write_metrics_csv
from yaotu_trace.data.canonical import write_trace
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.data.run_id import run_id
from yaotu_trace.errors import ConfigError
from yaotu_trace.ingest.load import read_step_logs
from yaotu_trace.sim.options import EngineOptions
from yaotu_trace.sim.run import simulate_stage
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import run_scenario

# The tables `--out` and `--steps-out` are written as.
OUT_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".csv")


def simulate(
    trace: TraceSource,
    engine: EngineOptions | Scenario | None = None,
    *,
    out: Path,
    steps_out: Path | None = None,
    metrics_out: Path | None = None,
    scrape_interval_s: float | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace simulate`: per-request timing written to `out`, the step log to `steps_out`.

    `engine` is the engine to model: a `Scenario` of engine options (None: every default), or
    `EngineOptions`, whose scenario overrides the options of its scenario file (TOML), as
    command-line options override `--scenario`. `metrics_out` receives the run's Prometheus
    export (`yaotu_trace.sim.metrics_export`, scraped every `scrape_interval_s`) as the CSV
    `--metrics` reads. Every output is written through the atomic writers.
    """
    check_table_out(out, "--out")
    if steps_out is not None:
        check_table_out(steps_out, "--steps-out")
    if metrics_out is not None and metrics_out.suffix.lower() != ".csv":
        raise ConfigError(f"--metrics-out {metrics_out}: the export is written as .csv "
                          f"(timestamp, metric, labels, value), not "
                          f"'{metrics_out.suffix or '(no extension)'}'")
    if scrape_interval_s is not None and not scrape_interval_s > 0:
        raise ConfigError(f"--scrape-interval-s {scrape_interval_s}: give a positive number "
                          "of seconds, e.g. 1 or 5")
    given = engine if isinstance(engine, EngineOptions) else EngineOptions(
        scenario=engine or Scenario())
    chosen = given.resolved()
    loaded = open_trace(trace, lazy_content=False, progress=progress, steps=False)
    tell(progress, simulate_stage(), 0.3)
    run = run_scenario(loaded, chosen, read_step_logs([chosen.calibrate], "--calibrate"))
    tell(progress, "writing the timed trace", 0.9)
    # One id in both tables, so a step log is never read with another run's trace.
    run_stamp = run_id(run.requests, run.steps)
    write_trace(run.requests, out, source_block_size=loaded.source_block_size, run=run_stamp)
    if steps_out is not None:
        write_trace(run.steps, steps_out, run=run_stamp)
    if metrics_out is not None:
        write_metrics_csv(run.requests, run.steps, metrics_out, scrape_interval_s,
                          block_size_tokens=run.resolved.config.block_size_tokens,
                          run=run_stamp)
    return Report(
        command="simulate",
        input=input_summary(loaded),
        config={"scenario": chosen, "engine": run.resolved.config.to_dict()},
        sections={"simulation": run.summary},
    )


def check_table_out(path: Path, option: str) -> None:
    """A table's extension, checked before any work."""
    if path.suffix.lower() not in OUT_SUFFIXES:
        raise ConfigError(f"{option} {path}: write .parquet, .jsonl or .csv, not "
                          f"'{path.suffix or '(no extension)'}'")
