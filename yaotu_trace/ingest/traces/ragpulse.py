"""RAGPulse (flashserve/RAGPulse): `0_trace.jsonl` plus five chunk tables, mapped to canonical rows.

One row of `0_trace.jsonl` is one request. `input_length`, `output_length` and `session_id` map
directly. The rest needs decisions, made here once:

Prompt content (`prompt_tokens`, no `source_block_size`)
    RAGPulse `hash_ids` are *content* ids of variable-length chunks (1-512 tokens), listed per
    component. They are not fixed-size blocks, so they cannot become `prompt_block_ids`: a block
    id must stand for exactly `S` tokens, and no `S` fits every chunk boundary. Instead each
    chunk is expanded into deterministic pseudo-tokens of its `token_length` (read from the
    component tables), so the same chunk always yields the same tokens and two chunks never share
    a token. Token ids are dense: chunk `c` owns ids `[start(c), start(c) + len(c))` in id order
    of the tables. Components follow JSON key order, as the publisher's replay example does:
    sys_prompt, passages, history, web_search, user_input. The 6-12 tokens of template overhead
    that no chunk covers (`input_length` minus the chunks' total) end the prompt as template
    tokens shared by every request (ids after the last chunk token). This keeps the replay exact
    at every block size (`--block-size 1` included): a prefix hit needs the same chunks in the
    same order from the start, as in a real engine, while a chunk reused at another position
    stays visible to non-prefix (chunk) reuse analysis, since its tokens are the same. The
    whole file is about 21M tokens (170 MB as int64); when the tables are absent, lengths,
    timestamps and sessions are still read and prefix reuse is reported as not available.

Arrival (`arrival_s`)
    `timestamp` is a string of integer seconds from each run's start (12:00 local). The file is
    two sorted runs, one week each, both starting near 0. A plain sort would interleave the two
    weeks and double the rate, so the reader splits runs at each backwards jump and puts every
    run on the first run's clock. The offset comes from the data: the 13-digit epoch (ms) that
    prefixes standard `session_id`s minus `timestamp` is nearly constant within a run, and its
    median per run gives the run's origin; the difference to run 1 is rounded to whole minutes
    (origins are round clock times; the estimate is good to about a second). For the public
    file this is +604,800 s (7 days). A run whose origin cannot be estimated (too few standard
    session ids) keeps its raw timestamps; `normalize` then sorts stably and notes it. Pass
    `stitch_runs=False` for that behaviour on every run. Either way a note says what was done.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa

from yaotu_trace.data.compressed import find_file
from yaotu_trace.data.jsonl import read_json_lines
from yaotu_trace.data.order_stats import median_of
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

TRACE_FILE: Final = "0_trace.jsonl"
# Component key in a trace row → (table file, id key in that table), in prompt order.
COMPONENTS: Final = (
    ("sys_prompt", "1_sys_prompt.jsonl", "sys_prompt_id"),
    ("passages_ids", "2_passages.jsonl", "passage_id"),
    ("history", "3_history.jsonl", "history_id"),
    ("web_search", "5_web_search.jsonl", "web_search_id"),
    ("user_input", "4_user_input.jsonl", "user_input_id"),
)
# A standard session id: a 13-digit ms epoch, a dash, 12 lowercase letters or digits.
SESSION_EPOCH: Final = re.compile(r"^(\d{13})-[a-z0-9]{12}$")
MIN_EPOCH_SESSIONS: Final = 10  # fewer standard ids than this in a run: no origin estimate
ORIGIN_ROUNDING_S: Final = 60.0
MAX_ID: Final = 1 << 62  # chunk ids and lengths: well inside int64, so sums cannot overflow


def read_ragpulse(path: Path, *, stitch_runs: bool = True) -> RawTrace:
    """Read `0_trace.jsonl` (or the folder holding it) and the chunk tables beside it."""
    trace_path = (find_file(path, TRACE_FILE) or path / TRACE_FILE) if path.is_dir() else path
    if not trace_path.exists():
        raise TraceReadError(
            f"{path}: no {TRACE_FILE} in this folder; pass the RAGPulse trace file or its folder"
        )
    records, lines = read_json_lines(trace_path)
    notes: list[str] = []

    timestamps = [r.get("timestamp") for r in records]
    arrival = pd.to_numeric(pd.Series(timestamps, dtype=object), errors="coerce")
    sessions = [r.get("session_id") for r in records]
    arrival_s, run_notes = _align_runs(
        arrival.to_numpy(dtype=np.float64), sessions, lines, stitch_runs
    )
    notes.extend(run_notes)
    # Keep non-numeric raw values so validation names the line and the bad value.
    bad = arrival.isna().to_numpy()
    arrival_col = pd.Series([timestamps[pos] if bad[pos] else arrival_s[pos]
                             for pos in range(len(timestamps))], dtype=object)

    out = pd.DataFrame(
        {
            "request_id": [f"line{n}" for n in lines],
            "arrival_s": arrival_col,
            "session_id": [None if s is None else str(s) for s in sessions],
            "prompt_len": [r.get("input_length") for r in records],
            "output_len": [r.get("output_length") for r in records],
            SOURCE_ROW: lines,
        }
    )
    odd = sorted({str(s) for s in sessions if s is not None and not SESSION_EPOCH.match(str(s))})
    if odd:
        n_rows = sum(1 for s in sessions if s is not None and not SESSION_EPOCH.match(str(s)))
        notes.append(
            f"{n_rows} request(s) carry {len(odd)} session id(s) not of the form "
            f"<epoch ms>-<12 chars> (e.g. {', '.join(repr(s) for s in odd[:3])}); they look like "
            "test traffic and were kept"
        )

    folder = trace_path.parent
    tables = [find_file(folder, table) or folder / table for _, table, _ in COMPONENTS]
    present = [t.exists() for t in tables]
    if not any(present):
        notes.append(
            f"no RAGPulse chunk tables next to {trace_path.name}; prompts carry lengths only, so "
            "prefix reuse is not available (put 1_sys_prompt.jsonl ... 5_web_search.jsonl "
            "beside it)"
        )
    elif not all(present):
        missing = [t.name for t, ok in zip(tables, present, strict=True) if not ok]
        raise TraceReadError(
            f"{folder}: RAGPulse chunk table(s) {', '.join(missing)} missing; the trace needs all "
            "five tables beside 0_trace.jsonl (or none, to read lengths only)"
        )
    else:
        tokens, n_template = _expand_chunks(trace_path, records, lines, out["prompt_len"], tables)
        out["prompt_tokens"] = tokens
        notes.append(
            "RAGPulse chunk ids were expanded to pseudo-tokens (each chunk its token_length of "
            "tokens unique to it; order sys_prompt, passages, history, web_search, user_input; "
            f"then up to {n_template} template tokens shared by all requests), so prefix reuse "
            "needs the same chunks in the same order from the start; a chunk reused at another "
            "position is not a prefix hit"
        )
    return RawTrace(requests=out, format_name="ragpulse", row_label="line", notes=tuple(notes))


def _align_runs(
    arrival: np.ndarray, sessions: Sequence[object], lines: Sequence[int], stitch_runs: bool
) -> tuple[np.ndarray, list[str]]:
    """Put every sorted run of timestamps on the first run's clock, using session-id epochs."""
    finite = np.isfinite(arrival)
    values = arrival[finite]
    starts = np.flatnonzero(np.diff(values) < 0) + 1
    if starts.size == 0:
        return arrival, []
    positions = np.flatnonzero(finite)
    bounds = [0, *positions[starts].tolist(), len(arrival)]
    runs = list(itertools.pairwise(bounds))
    described = ", ".join(f"lines {lines[a]}-{lines[b - 1]}" for a, b in runs)
    if not stitch_runs:
        return arrival, [
            f"timestamps restart {len(runs) - 1} time(s) ({len(runs)} sorted runs: {described}); "
            "runs were left on their own clocks and are interleaved by the stable sort"
        ]
    origins = [_run_origin_s(arrival[a:b], sessions[a:b]) for a, b in runs]
    out = arrival.copy()
    shifted: list[str] = []
    unplaced: list[str] = []
    base = origins[0]
    for (a, b), origin in zip(runs[1:], origins[1:], strict=True):
        if base is None or origin is None:
            unplaced.append(f"lines {lines[a]}-{lines[b - 1]}")
            continue
        offset_s = round((origin - base) / ORIGIN_ROUNDING_S) * ORIGIN_ROUNDING_S
        out[a:b] = arrival[a:b] + offset_s
        shifted.append(f"lines {lines[a]}-{lines[b - 1]} by {offset_s:+,.0f} s")
    notes = [
        f"timestamps restart {len(runs) - 1} time(s) ({len(runs)} sorted runs: {described}), "
        "each timed from its own start"
    ]
    if shifted:
        notes.append(
            "runs were put on the first run's clock using the epoch prefix of session_id "
            f"(median epoch - timestamp per run, rounded to minutes): {'; '.join(shifted)}"
        )
    if unplaced:
        notes.append(
            f"no run origin could be estimated for {', '.join(unplaced)} (fewer than "
            f"{MIN_EPOCH_SESSIONS} <epoch ms>-<id> session ids); those runs keep their own clock "
            "and are interleaved by the stable sort"
        )
    return out, notes


def _run_origin_s(arrival: np.ndarray, sessions: Sequence[object]) -> float | None:
    """Median of (session epoch − timestamp) over standard session ids: the run's start, epoch s."""
    deltas = []
    for ts, session in zip(arrival, sessions, strict=True):
        match = SESSION_EPOCH.match(str(session)) if session is not None else None
        if match and np.isfinite(ts):
            deltas.append(int(match.group(1)) / 1000.0 - ts)
    if len(deltas) < MIN_EPOCH_SESSIONS:
        return None
    return median_of(np.asarray(deltas, dtype=np.float64))


def _read_table(path: Path, id_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One chunk table as (ids, token lengths), validated."""
    records, lines = read_json_lines(path)
    ids = np.empty(len(records), dtype=np.int64)
    lengths = np.empty(len(records), dtype=np.int64)
    for i, (record, line) in enumerate(zip(records, lines, strict=True)):
        chunk_id, length = record.get(id_key), record.get("token_length")
        for key, value in ((id_key, chunk_id), ("token_length", length)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_ID:
                raise TraceSchemaError(
                    f"{path}: line {line}, column '{key}': {str(value)[:40]!r} is not a whole "
                    f"number in 0 .. 2**62; each line must be "
                    f"{{\"{id_key}\": int, \"token_length\": int}}"
                )
        ids[i], lengths[i] = int(chunk_id), int(length)  # type: ignore[arg-type]  # checked above
    return ids, lengths


@dataclass(frozen=True, slots=True)
class _Chunks:
    """The chunks of the five tables, numbered densely in id order (`dense[id]`)."""

    dense: dict[int, int]  # chunk id → its number
    owner: np.ndarray  # number → index in COMPONENTS of the table that defines the chunk
    length_of: np.ndarray  # number → token_length
    start_of: np.ndarray  # number → the chunk's first pseudo-token id
    template_start: int  # the first template token id, after every chunk's tokens


def _expand_chunks(
    trace_path: Path,
    records: list[dict[str, Any]],
    lines: list[int],
    prompt_len: pd.Series,
    tables: list[Path],
) -> tuple[pd.Series, int]:
    """Build the `prompt_tokens` column: chunk pseudo-tokens, then shared template tokens."""
    chunks = _index_chunks(tables)
    seg_start: list[int] = []
    seg_length: list[int] = []
    lengths_by_row = pd.to_numeric(prompt_len, errors="coerce").to_numpy(dtype=np.float64)
    row_tokens = np.zeros(len(records), dtype=np.int64)
    max_template = 0
    for i, (record, line) in enumerate(zip(records, lines, strict=True)):
        starts, lengths = _row_chunks(trace_path, record, line, chunks)
        seg_start += starts
        seg_length += lengths
        total = sum(lengths)
        n = lengths_by_row[i]
        if not (np.isfinite(n) and 0 <= n < MAX_ID and n == int(n)):
            row_tokens[i] = total  # normalize reports the bad or missing input_length
            continue
        template = int(n) - total
        if template < 0:
            raise TraceSchemaError(
                f"{trace_path}: line {line}, column 'prompt_len': input_length {int(n)} is less "
                f"than the {total} tokens of its chunks; check the chunk tables or the row"
            )
        seg_start.append(chunks.template_start)
        seg_length.append(template)
        max_template = max(max_template, template)
        row_tokens[i] = total + template
    return _token_column(seg_start, seg_length, row_tokens), max_template


def _index_chunks(tables: list[Path]) -> _Chunks:
    """Read the five tables; chunk ids must be unique across them."""
    table_ids: list[np.ndarray] = []
    table_lengths: list[np.ndarray] = []
    for (_, _, id_key), table in zip(COMPONENTS, tables, strict=True):
        ids, lengths = _read_table(table, id_key)
        table_ids.append(ids)
        table_lengths.append(lengths)
    # Chunk ids may be sparse: they are numbered densely in id order.
    distinct = np.unique(np.concatenate(table_ids))
    dense = dict(zip(distinct.tolist(), range(distinct.size), strict=True))
    table_ids = [np.searchsorted(distinct, ids) for ids in table_ids]
    all_ids = np.concatenate(table_ids)
    all_lengths = np.concatenate(table_lengths)
    size = distinct.size
    length_of = np.full(size, -1, dtype=np.int64)
    owner = np.full(size, -1, dtype=np.int64)
    for k, ids in enumerate(table_ids):
        clash = ids[owner[ids] >= 0]
        if clash.size:
            raise TraceSchemaError(
                f"{tables[k]}: chunk id {int(distinct[clash[0]])} is also defined in "
                f"{tables[int(owner[clash[0]])].name}; chunk ids must be unique across tables"
            )
        owner[ids] = k
    length_of[all_ids] = all_lengths
    order = np.argsort(all_ids, kind="stable")
    start_of = np.zeros(size, dtype=np.int64)
    start_of[all_ids[order]] = np.cumsum(all_lengths[order]) - all_lengths[order]
    return _Chunks(dense=dense, owner=owner, length_of=length_of, start_of=start_of,
                   template_start=int(all_lengths.sum()))


def _row_chunks(trace_path: Path, record: dict[str, Any], line: int, chunks: _Chunks
                ) -> tuple[list[int], list[int]]:
    """The (first token, length) of each chunk of one request, in prompt order."""
    hash_ids = record.get("hash_ids")
    if not isinstance(hash_ids, dict):
        raise TraceSchemaError(
            f"{trace_path}: line {line}, column 'hash_ids': expected an object of chunk-id "
            f"lists ({', '.join(c for c, _, _ in COMPONENTS)}), got {type(hash_ids).__name__}"
        )
    starts: list[int] = []
    lengths: list[int] = []
    for k, (component, table_name, _) in enumerate(COMPONENTS):
        chunk_ids = hash_ids.get(component, [])
        if not isinstance(chunk_ids, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in chunk_ids
        ):
            raise TraceSchemaError(
                f"{trace_path}: line {line}, column 'hash_ids.{component}': expected a list "
                "of integer chunk ids"
            )
        for chunk_id in chunk_ids:
            chunk = chunks.dense.get(chunk_id, -1)
            if chunk < 0 or chunks.owner[chunk] != k:
                raise TraceSchemaError(
                    f"{trace_path}: line {line}, column 'hash_ids.{component}': chunk id "
                    f"{str(chunk_id)[:40]} is not in {table_name}; check the tables belong "
                    "to this trace"
                )
            starts.append(int(chunks.start_of[chunk]))
            lengths.append(int(chunks.length_of[chunk]))
    return starts, lengths


def _token_column(seg_start: list[int], seg_length: list[int], row_tokens: np.ndarray
                  ) -> pd.Series:
    """Segments of consecutive token ids, concatenated per row into a large_list column."""
    starts = np.asarray(seg_start, dtype=np.int64)
    lengths = np.asarray(seg_length, dtype=np.int64)
    n_tokens = int(lengths.sum())
    seg_offset = np.cumsum(lengths) - lengths
    values = np.repeat(starts - seg_offset, lengths) + np.arange(n_tokens, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(row_tokens)))
    array = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(values))
    return pd.Series(pd.arrays.ArrowExtensionArray(array), name="prompt_tokens")


def _is_ragpulse_record(keys: set[str]) -> bool:
    return {"timestamp", "input_length", "output_length"} <= keys and bool(
        {"session_id", "hash_ids"} & keys or "query_id" in keys or "sys_prompt_id" in keys
    )


def _is_ragpulse_folder(folder: Path) -> bool:
    return find_file(folder, TRACE_FILE) is not None


FORMAT = TraceFormatSpec(
    name=TraceFormat.RAGPULSE,
    description="RAGPulse: `0_trace.jsonl` (or its folder) and its five chunk tables",
    reader=read_ragpulse,
    row_label="line",
    json_keys=_is_ragpulse_record,
    folder=_is_ragpulse_folder,
)
