"""The files a command writes besides its report: per-request tables (`replay --out`, `diff
--out`) and a simulated run's Prometheus export (`simulate` and `generate --metrics-out`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from yaotu_trace.errors import ConfigError
from yaotu_trace.files import replace_atomically
from yaotu_trace.sim.metrics_export import SCRAPE_INTERVAL_S, metrics_export

# Per-request output (`--out` of replay and diff): the formats it is written in.
OUT_SUFFIXES = (".parquet", ".csv")


def check_out(path: Path) -> str:
    """The extension of a per-request `--out`, checked before any work (its folder and
    writability are checked for every command by `cli.app.command`)."""
    suffix = path.suffix.lower()
    if suffix not in OUT_SUFFIXES:
        raise ConfigError(f"--out {path}: per-request output is .parquet or .csv, not "
                          f"'{suffix or '(no extension)'}'")
    return suffix


def write_requests(path: Path, columns: Mapping[str, object]) -> None:
    """Write per-request columns as Parquet or CSV (by extension), atomically."""
    suffix = check_out(path)
    table = pa.table({name: pa.array(values) for name, values in columns.items()})

    def write(tmp: Path) -> None:
        if suffix == ".parquet":
            pq.write_table(table, tmp)
        else:
            pcsv.write_csv(table, tmp)

    replace_atomically(path, write)


def write_metrics_csv(requests: pd.DataFrame, steps: pd.DataFrame, path: Path,
                      scrape_interval_s: float | None = None, *,
                      block_size_tokens: int | None = None, run: str | None = None) -> None:
    """The run's Prometheus export (`sim.metrics_export`) as CSV, written atomically; with
    the engine's block size it carries the pool size as vLLM does (`cache_config_info`), with
    the run's id (`data/run_id.py`) that id."""
    table = metrics_export(requests, steps, scrape_interval_s=scrape_interval_s
                           or SCRAPE_INTERVAL_S, block_size_tokens=block_size_tokens, run=run)
    replace_atomically(path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.17g"))
