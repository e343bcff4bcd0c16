"""`trace simulate`: replay a trace through a modelled serving engine; write timing + step log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from yaotu_trace.commands.load import Progress, open_trace, tell
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

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
    metrics_out: Path | None = None,
    scrape_interval_s: float | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace simulate`: per-request timing written to `out`, the step log to `steps_out`.

    `scenario` holds the engine options (`yaotu_trace.sim.scenario.Scenario`, None: every
    default); those it sets override the ones of `scenario_file` (TOML), as command-line
    options override `--scenario`. `metrics_out` receives the run's Prometheus export
    (`yaotu_trace.sim.metrics_export`, scraped every `scrape_interval_s`) as the CSV `--metrics`
    reads. Every output is written through the atomic writers.
    """
    from yaotu_trace.data.canonical import write_trace
    from yaotu_trace.ingest.load import read_step_logs
    from yaotu_trace.sim.run import simulate_stage
    from yaotu_trace.sim.scenario import Scenario, load_scenario
    from yaotu_trace.sim.summary import run_scenario

    check_out(out, "--out")
    if steps_out is not None:
        check_out(steps_out, "--steps-out")
    if metrics_out is not None and metrics_out.suffix.lower() != ".csv":
        raise ConfigError(f"--metrics-out {metrics_out}: the export is written as .csv "
                          f"(timestamp, metric, labels, value), not "
                          f"'{metrics_out.suffix or '(no extension)'}'")
    if scrape_interval_s is not None and not scrape_interval_s > 0:
        raise ConfigError(f"--scrape-interval-s {scrape_interval_s}: give a positive number "
                          "of seconds, e.g. 1 or 5")
    given = scenario or Scenario()
    chosen = load_scenario(scenario_file).merged(given) if scenario_file is not None else given
    loaded = open_trace(trace, lazy_content=False, progress=progress, steps=False)
    tell(progress, simulate_stage(), 0.3)
    run = run_scenario(loaded, chosen, read_step_logs([chosen.calibrate], "--calibrate"))
    tell(progress, "writing the timed trace", 0.9)
    write_trace(run.requests, out, source_block_size=loaded.source_block_size)
    if steps_out is not None:
        write_trace(run.steps, steps_out)
    if metrics_out is not None:
        write_metrics_csv(run.requests, run.steps, metrics_out, scrape_interval_s,
                          block_size_tokens=run.resolved.config.block_size_tokens)
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


def write_metrics_csv(requests: pd.DataFrame, steps: pd.DataFrame, path: Path,
                      scrape_interval_s: float | None = None, *,
                      block_size_tokens: int | None = None) -> None:
    """The run's Prometheus export (`sim.metrics_export`) as CSV, written atomically; with
    the engine's block size it carries the pool size as vLLM does (`cache_config_info`)."""
    from yaotu_trace.files import replace_atomically
    from yaotu_trace.sim.metrics_export import SCRAPE_INTERVAL_S, metrics_export

    table = metrics_export(requests, steps, scrape_interval_s=scrape_interval_s
                           or SCRAPE_INTERVAL_S, block_size_tokens=block_size_tokens)
    replace_atomically(path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.17g"))
