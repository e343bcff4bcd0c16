"""Converting a trace of any supported format into the canonical table.

Canonical Parquet in arrival order is what every command streams out of core, so this is the
one step a trace in another format needs before it outgrows memory. A JSONL or CSV file whose
lines stand alone (canonical, Mooncake) is converted in parts of about 32 MB of text: each part
is mapped and validated like a whole file (errors name the file's own lines) and written to a
temporary Parquet part; request ids are checked for duplicates, and the times for one clock
(`schema.check_one_clock`), over every part, and the parts are joined into the output. The
result is the same table as converting the file whole, which is what happens when the format's
rows depend on each other, when the output is JSONL or CSV, or when arrivals go back in time
across two parts (sorting them needs the whole file).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from yaotu_trace.data.canonical import join_parquet_parts, write_trace
from yaotu_trace.data.jsonl import PART_BYTES
from yaotu_trace.data.schema import CLOCK_COLUMNS, check_one_clock, normalize
from yaotu_trace.data.steplog import STEP_COLUMNS
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.errors import ConfigError, TraceSchemaError, WriteError
from yaotu_trace.files import scratch_folder, write_error
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.parts import apply_options, can_read_in_parts, read_parts


@dataclass(frozen=True, slots=True, kw_only=True)
class Converted:
    """What was written: requests, the source format, how many parts it was read in."""

    requests: int
    format_name: str
    parts: int
    notes: tuple[str, ...]


def convert_trace(path: Path, out: Path, *, fmt: TraceFormat | None = None,
                  column_map: Mapping[str, str] | None = None,
                  source_block_size: int | None = None,
                  part_bytes: int | None = None, tokenizer: Path | None = None,
                  steps_out: Path | None = None) -> Converted:
    """Write `path` as a canonical table at `out` (format by extension), atomically; with
    `tokenizer`, a log of text is written with its token ids (`ingest/text_tokens.py`); with
    `steps_out`, the engine steps the capture records itself (vllm-vcr's) as a step log."""
    fmt = fmt or detect_format(path, column_map)
    notes: tuple[str, ...] = ()
    if (can_read_in_parts(fmt) and out.suffix.lower() == ".parquet" and tokenizer is None
            and steps_out is None):
        done = _convert_in_parts(path, out, fmt, column_map, source_block_size,
                                 part_bytes or PART_BYTES)
        if done is not None:
            return done
        notes = ("arrivals go back in time between parts of the file: it was read whole to "
                 "sort them",)
    trace = read_trace(path, fmt=fmt, column_map=column_map,
                       source_block_size=source_block_size, tokenizer=tokenizer)
    if steps_out is not None and trace.steps is None:
        raise ConfigError(f"--steps-out {steps_out}: {path} does not record the engine's "
                          "steps (a vllm-vcr trace does when its tap wrote itl_ctx and every "
                          "gap; its notes say why not); drop --steps-out")
    write_trace(trace.requests, out, source_block_size=trace.source_block_size)
    if steps_out is not None and trace.steps is not None:
        write_trace(pd.concat(list(trace.steps.batches(STEP_COLUMNS)), ignore_index=True),
                    steps_out)
        notes += (f"the engine steps {path.name} records ({trace.steps.num_rows:,}) written to "
                  f"{steps_out}: give it as --steps with the table",)
    elif trace.steps is not None:  # the capture's own steps: the request table has no place
        notes += (f"the engine steps {path.name} records ({trace.steps.num_rows:,}) are not in "
                  "the table written: add --steps-out FILE to keep them as a step log",)
    limits = trace.engine_limits
    if limits is not None:  # the table has no place for them: say how to give them back
        given = [f"{option} {value}" for option, value in (
            ("--max-num-seqs", limits.max_num_seqs),
            ("--max-batched-tokens", limits.max_batched_tokens),
            ("--kv-capacity", None if limits.kv_capacity_tokens is None
             else f"{limits.kv_capacity_tokens}tok")) if value is not None]
        notes += (f"the engine's limits {path.name} states are not in the table written: give "
                  f"{' '.join(given)} with it to judge against them",)
    return Converted(requests=len(trace.requests), format_name=trace.format_name, parts=1,
                     notes=notes + trace.notes)


def _convert_in_parts(path: Path, out: Path, fmt: TraceFormat,
                      column_map: Mapping[str, str] | None, source_block_size: int | None,
                      part_bytes: int) -> Converted | None:
    """The parts route; None when arrivals are not in order across parts."""
    notes: list[str] = []
    ids: list[pd.Series] = []
    lines: list[np.ndarray] = []
    files: list[Path] = []
    rows = 0
    latest = -np.inf
    block: int | None = None
    has_ids: bool | None = None
    format_name = fmt.value
    # Every part's times and lines, for the one-clock rule over the whole file.
    times: dict[str, list[np.ndarray]] = {c: [] for c in CLOCK_COLUMNS}
    rows_at: list[np.ndarray] = []
    label = "line"
    with scratch_folder(out.parent, prefix=f".{out.name}.") as folder:
        for k, raw in enumerate(read_parts(path, fmt, part_bytes=part_bytes)):
            raw = apply_options(raw, path, column_map, source_block_size)
            part = normalize(raw, str(path), whole=False)
            table = part.requests
            arrival = table["arrival_s"].to_numpy(dtype=np.float64)
            if arrival.min() < latest:
                return None
            latest = float(arrival.max())
            named = "request_id" in raw.requests.columns
            if has_ids is not None and named != has_ids:
                at = int(raw.requests[SOURCE_ROW].iloc[0])
                raise TraceSchemaError(
                    f"{path}: line {at}, column 'request_id': "
                    + ("value is missing" if has_ids else "ids start here but earlier lines "
                       "have none") + "; give every request an id or drop the column")
            has_ids = named
            if named:
                ids.append(raw.requests["request_id"].astype("string"))
                lines.append(raw.requests[SOURCE_ROW].to_numpy(dtype=np.int64))
            else:  # generated ids number the file's rows: r0, r1, ... across parts
                number = table["request_id"].str.slice(1).astype(np.int64) + rows
                table = table.assign(request_id=("r" + number.astype(str)).astype("string"))
            if block is not None and part.source_block_size not in (None, block):
                raise TraceSchemaError(
                    f"{path}: line {int(raw.requests[SOURCE_ROW].iloc[0])}: source_block_size "
                    f"{part.source_block_size} differs from {block} earlier in the file; one "
                    "trace has one block size")
            block = block if block is not None else part.source_block_size
            label = raw.row_label
            rows_at.append(raw.requests[SOURCE_ROW].to_numpy(dtype=np.int64))
            for column, parts in times.items():
                parts.append(_seconds(raw.requests, column))
            first, last = raw.requests[SOURCE_ROW].iloc[[0, -1]].tolist()
            notes += [f"lines {first}–{last}: {note}" for note in part.notes]
            files.append(folder / f"{k:06d}.parquet")
            _write_part(table, files, out)
            rows += len(table)
            format_name = part.format_name
        if ids:
            _no_duplicates(path, pd.concat(ids, ignore_index=True), np.concatenate(lines))
        source_rows = np.concatenate(rows_at)
        check_one_clock({c: np.concatenate(v) for c, v in times.items()}, str(path),
                        lambda pos: f"{label} {source_rows[pos]}")
        join_parquet_parts(files, out, source_block_size=block)
    return Converted(requests=rows, format_name=format_name, parts=len(files),
                     notes=tuple(notes))


def _write_part(table: pd.DataFrame, files: list[Path], out: Path) -> None:
    """Write the last of `files`; a full disk is named as the output's, whose folder they share
    (the parts are scratch files the user never named)."""
    try:
        write_trace(table, files[-1])
    except WriteError as err:
        if not isinstance(err.__cause__, OSError):
            raise
        written_bytes = sum(f.stat().st_size for f in files[:-1])
        raise write_error(str(out), err.__cause__, folder=out.parent,
                          written_bytes=written_bytes) from err.__cause__


def _seconds(requests: pd.DataFrame, column: str) -> np.ndarray:
    """A time column of a part as validated (NaN where missing, or everywhere when absent)."""
    if column not in requests.columns:
        return np.full(len(requests), np.nan)
    return pd.to_numeric(requests[column], errors="coerce").to_numpy(dtype=np.float64,
                                                                     na_value=np.nan)


def _no_duplicates(path: Path, ids: pd.Series, lines: np.ndarray) -> None:
    """The duplicate check of a whole file, over the ids of every part (each part checked
    its own already)."""
    dup = ids.duplicated(keep=False).to_numpy()
    if not dup.any():
        return
    first = int(np.flatnonzero(dup)[0])
    again = int(np.flatnonzero(dup & (ids.to_numpy() == ids.iloc[first]))[1])
    raise TraceSchemaError(
        f"{path}: line {lines[again]}, column 'request_id': duplicate id {ids.iloc[first]!r} "
        f"(also at line {lines[first]}); request ids must be unique")
