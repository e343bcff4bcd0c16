"""WEKA / Claude Code agentic traces (callanjfox/kv-cache-tester): one JSON file per conversation.

A folder of `trace_NNNN.json` files is read as one trace; a single file is a one-conversation
trace. Mapping and decisions:

- `t` → `arrival_s`, `in` → `prompt_len`, `out` → `output_len`, `model` → `model`, the file stem
  (without a compression extension) → `session_id`. `t + ttft` → `first_token_s` and
  `t + api_time` → `finish_s` where present: they are the original API's observed times, kept
  so latency views can show them.
- `hash_ids` → `prompt_block_ids` with `source_block_size` = the files' `block_size` (64). The
  floor rule holds: there is no id for a trailing partial block, which the schema accepts.
- Namespaces: with `hash_id_scope: "local"` (or no scope field, as in older traces) ids are
  numbered per file from 1, so the same integer means unrelated content in two files. Each local
  id becomes `((file number + 1) << 40) | id`, with files numbered in name order, so no hit can
  cross conversations; `id >> 40` names the file. Files with `hash_id_scope: "global"` keep
  their ids (all below 2**40), so their cross-file sharing stays visible.
- Clocks: every conversation's `t` starts at 0 on its own clock and there is no global time. By
  default all conversations start together at 0 s, the most concurrent (and cache-hungry)
  reading; `stagger_s` starts conversation k (name order) at `k * stagger_s` instead. Rows are
  ordered by arrival, ties in file order then request order, and a note states the choice.
- Entries of type `"subagent"` (nested sub-agent markers) carry no request of their own here and
  are skipped with a note.
- Hidden files (names starting with '.') are not conversations: a folder copied from a Mac holds
  `._trace_0001.json` AppleDouble metadata and `.DS_Store`. They are skipped, counted in a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa

from yaotu_trace.data.compressed import format_suffix, plain_stem, read_text
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_WHERE
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

WEKA_BLOCK_TOKENS: Final = 64
NAMESPACE_SHIFT: Final = 40  # local ids must stay below 2**40; file number lives above


@dataclass(slots=True)
class _Conversations:
    """The requests of every conversation file, and what the notes and checks need to know."""

    frames: list[pd.DataFrame] = field(default_factory=list)
    block_ids: list[list[np.ndarray]] = field(default_factory=list)
    block_sizes: dict[int, str] = field(default_factory=dict)  # size → first file with it
    scopes: dict[str, int] = field(default_factory=dict)  # hash_id_scope → files
    subagents: int = 0
    backwards: list[str] = field(default_factory=list)  # files whose 't' goes back
    hidden: int = 0  # hidden files of the folder, skipped


def read_weka(path: Path, *, stagger_s: float = 0.0) -> RawTrace:
    """Read a folder of WEKA conversation files (or one file) as one canonical trace."""
    files = sorted(conversation_files(path)) if path.is_dir() else [path]
    if not files:
        raise TraceReadError(f"{path}: no .json conversation files in this folder")
    read = _read_conversations(files, stagger_s)
    read.hidden = len(hidden_files(path)) if path.is_dir() else 0
    if len(read.block_sizes) > 1:
        found = ", ".join(f"{size} ({name})" for size, name in read.block_sizes.items())
        raise TraceSchemaError(
            f"{path}: conversation files use different block sizes: {found}; one trace needs one "
            "source block size, so read the groups separately"
        )
    source_block_size = next(iter(read.block_sizes), WEKA_BLOCK_TOKENS)

    if not read.frames:
        raise TraceSchemaError(f"{path}: the trace has no requests; check the files' 'requests'")
    table = pd.concat(read.frames, ignore_index=True)
    flat = [ids for per_file in read.block_ids for ids in per_file]
    table["prompt_block_ids"] = _list_column(flat)
    # Stable sort: ties (every conversation starts at 0) keep file order, then request order.
    order = np.argsort(table["arrival_s"].to_numpy(dtype=np.float64), kind="stable")
    table = table.iloc[order].reset_index(drop=True)
    return RawTrace(
        requests=table,
        format_name="weka",
        source_block_size=source_block_size,
        row_label="request",
        notes=tuple(_notes(read, len(files), stagger_s)),
    )


def _read_conversations(files: list[Path], stagger_s: float) -> _Conversations:
    """Each file's requests, its ids namespaced by file number, its clock staggered."""
    read = _Conversations()
    for number, file in enumerate(files):
        document = _load_document(file)
        size = document.get("block_size", WEKA_BLOCK_TOKENS)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise TraceSchemaError(
                f"{file}: 'block_size' is {size!r}; it must be a whole number of tokens per id"
            )
        read.block_sizes.setdefault(size, file.name)
        scope = document.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise TraceSchemaError(
                f"{file}: 'hash_id_scope' is {scope!r}; expected \"local\" or \"global\""
            )
        read.scopes[scope] = read.scopes.get(scope, 0) + 1
        namespace = (number + 1) << NAMESPACE_SHIFT if scope == "local" else 0
        frame, ids, subagents = _conversation(file, document["requests"], namespace)
        read.subagents += subagents
        if frame.empty:
            continue
        frame["arrival_s"] = frame["arrival_s"] + number * stagger_s
        if _goes_backwards(frame["arrival_s"]):
            read.backwards.append(file.name)
        read.frames.append(frame)
        read.block_ids.append(ids)
    return read


def _notes(read: _Conversations, n_conv: int, stagger_s: float) -> list[str]:
    """What the reader decided: the clocks, the id namespaces, what it skipped."""
    notes: list[str] = []
    if n_conv > 1:
        start = (
            f"all start at 0 s (replayed as concurrent: the burst of {n_conv} first requests at "
            "0 s is an artifact of this choice)"
            if stagger_s == 0
            else f"conversation k (name order) starts at k x {stagger_s:g} s"
        )
        notes.append(
            f"{n_conv} WEKA conversations, each timed from its own start; {start}; "
            "session_id is the file name"
        )
    if read.scopes.get("local"):
        notes.append(
            f"block ids are local to each file in {read.scopes['local']} file(s) and were "
            "namespaced per file ((file number + 1) << 40 | id), so no hit crosses "
            "conversations; the tools + system prefix that production would share across "
            "conversations is not visible"
        )
    if read.subagents:
        notes.append(f"{read.subagents} sub-agent marker(s) were skipped; they carry no request")
    if read.hidden:
        notes.append(f"{read.hidden} hidden file(s) of the folder were skipped (names starting "
                     "with '.', such as a Mac's ._* and .DS_Store)")
    if read.backwards:
        notes.append(
            f"'t' goes backwards within {', '.join(read.backwards[:5])}; requests were sorted "
            "stably by arrival"
        )
    return notes


def conversation_files(folder: Path) -> list[Path]:
    """The conversation files of a folder: `*.json`, plain or compressed (`*.json.gz`, ...),
    hidden files left out."""
    return [p for p in folder.iterdir()
            if p.is_file() and not p.name.startswith(".") and format_suffix(p) == ".json"]


def hidden_files(folder: Path) -> list[Path]:
    """The hidden files of a folder (a Mac's `._*` AppleDouble files, `.DS_Store`), which a
    copy carries along and which are never conversations."""
    return [p for p in folder.iterdir() if p.is_file() and p.name.startswith(".")]


def _load_document(file: Path) -> dict[str, Any]:
    """Parse one conversation file and check it has a list of requests."""
    text = read_text(file, "a WEKA trace file is one JSON object in UTF-8")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = ("nested too deeply" if isinstance(exc, RecursionError)
                  else str(exc).splitlines()[0][:120])
        raise TraceReadError(
            f"{file}: invalid JSON ({reason}); a WEKA trace file is one JSON object"
        ) from exc
    if not isinstance(document, dict) or not isinstance(document.get("requests"), list):
        raise TraceReadError(
            f"{file}: not a WEKA conversation (expected an object with a 'requests' list); "
            "pass --input-format for another format"
        )
    return document


def _conversation(
    file: Path, requests: list[Any], namespace: int
) -> tuple[pd.DataFrame, list[np.ndarray], int]:
    """One file's requests as canonical columns plus their namespaced block ids."""
    rows: dict[str, list[Any]] = {
        "request_id": [],
        "arrival_s": [],
        "session_id": [],
        "model": [],
        "prompt_len": [],
        "output_len": [],
        "first_token_s": [],
        "finish_s": [],
        SOURCE_WHERE: [],
    }
    ids: list[np.ndarray] = []
    subagents = 0
    for index, request in enumerate(requests, start=1):
        where = f"{file.name}, request {index}"
        if not isinstance(request, dict):
            raise TraceSchemaError(
                f"{file}: request {index}: expected a JSON object, got {type(request).__name__}"
            )
        if request.get("type") == "subagent":
            subagents += 1
            continue
        t = request.get("t")
        rows["request_id"].append(f"{plain_stem(file)}#{index}")
        rows["arrival_s"].append(t)
        rows["session_id"].append(plain_stem(file))
        rows["model"].append(request.get("model"))
        rows["prompt_len"].append(request.get("in"))
        rows["output_len"].append(request.get("out"))
        rows["first_token_s"].append(_after(t, request.get("ttft")))
        rows["finish_s"].append(_after(t, request.get("api_time")))
        rows[SOURCE_WHERE].append(where)
        ids.append(_block_ids(file, index, request.get("hash_ids"), namespace))
    frame = pd.DataFrame(rows)
    arrival = pd.to_numeric(frame["arrival_s"], errors="coerce")
    bad = arrival.isna() & frame["arrival_s"].notna()
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        raise TraceSchemaError(
            f"{file}: request {pos + 1}, column 't': {frame['arrival_s'].iloc[pos]!r} is not a "
            "number; give seconds from the conversation start"
        )
    frame["arrival_s"] = arrival.astype("float64")
    for column in ("first_token_s", "finish_s"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    empty = [c for c in ("model", "first_token_s", "finish_s") if frame[c].isna().all()]
    return frame.drop(columns=empty), ids, subagents


def _after(t: object, delay: object) -> float | None:
    """`t + delay` in seconds when both are numbers, else missing."""
    numbers = (int, float)
    if isinstance(t, numbers) and isinstance(delay, numbers) and not isinstance(delay, bool):
        return float(t) + float(delay)
    return None


def _block_ids(file: Path, index: int, hash_ids: object, namespace: int) -> np.ndarray:
    """Validate one request's ids and move them into the file's namespace."""
    if not isinstance(hash_ids, list):
        raise TraceSchemaError(
            f"{file}: request {index}, column 'hash_ids': expected a list of block ids, got "
            f"{type(hash_ids).__name__}"
        )
    try:
        ids = np.asarray(hash_ids, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceSchemaError(
            f"{file}: request {index}, column 'hash_ids': ids must be whole numbers"
        ) from exc
    if ids.ndim != 1 or (ids.size and not np.array_equal(ids, np.asarray(hash_ids, dtype=float))):
        raise TraceSchemaError(
            f"{file}: request {index}, column 'hash_ids': ids must be a flat list of whole numbers"
        )
    if ids.size and (ids.min() < 0 or ids.max() >= 1 << NAMESPACE_SHIFT):
        raise TraceSchemaError(
            f"{file}: request {index}, column 'hash_ids': ids must lie in 0 .. 2**40 - 1 to be "
            "namespaced per file"
        )
    return ids | namespace


def _goes_backwards(arrival: pd.Series) -> bool:
    values = arrival.to_numpy(dtype=np.float64)
    return bool(np.any(np.diff(values) < 0))


def _list_column(lists: list[np.ndarray]) -> pd.Series:
    """An Arrow-backed large_list<int64> column built from per-row arrays without Python ints."""
    lengths = np.fromiter((a.size for a in lists), dtype=np.int64, count=len(lists))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    values = np.concatenate(lists) if lists else np.empty(0, dtype=np.int64)
    array = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(values))
    return pd.Series(pd.arrays.ArrowExtensionArray(array), name="prompt_block_ids")


def _is_weka_document(head: str) -> bool:
    return '"requests"' in head and ('"hash_ids"' in head or '"input_tokens"' in head)


def _is_weka_folder(folder: Path) -> bool:
    return bool(conversation_files(folder))


FORMAT = TraceFormatSpec(
    name=TraceFormat.WEKA,
    description="WEKA / Claude Code agentic traces: a folder of one JSON per conversation",
    reader=read_weka,
    row_label="request",
    json_document=_is_weka_document,
    folder=_is_weka_folder,
)
