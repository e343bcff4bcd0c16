"""Alibaba Qwen/Bailian usage traces (USENIX ATC '25) JSONL: a chat tree with 16-token block ids.

Mapping:

- `chat_id` → `request_id`; `timestamp` (s, trace-relative) → `arrival_s`;
- `input_length` / `output_length` → `prompt_len` / `output_len`;
- `hash_ids` (one id per 16-token block, the trailing partial block has one) →
  `prompt_block_ids` with `source_block_size` 16. The ids are per-block content hashes, not
  chained: the replay re-chains them;
- `parent_chat_id` → `session_id`: the `chat_id` of the root of the request's chain (`-1`
  marks a root). A parent absent from the file (the window started mid-conversation) makes
  the request the root of its own session, and a note counts those.

`type` (text, search, image, file, api) is deliberately **not** mapped to `tenant`: tenant is
a cache namespace, and these requests all hit one serving instance whose cache is shared across
types, so the publisher's trace is a single namespace. The per-type counts become a note.
`turn` is implied by the chain and not kept.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Final

import pandas as pd

from yaotu_trace.data.jsonl import read_json_lines
from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

BAILIAN_BLOCK_TOKENS: Final = 16
ROOT_PARENT: Final = -1


def read_bailian(path: Path) -> RawTrace:
    """Read the JSONL, map fields and derive a session per chat tree."""
    records, lines = read_json_lines(path)
    df = pd.DataFrame.from_records(records)
    if "chat_id" not in df.columns:
        raise TraceSchemaError(
            f"{path}: line {lines[0]}: no 'chat_id' key; a Qwen/Bailian trace line has chat_id, "
            "parent_chat_id, timestamp, input_length, output_length, type, turn, hash_ids"
        )
    chat_ids = [_chat_key(v) for v in df["chat_id"].tolist()]
    parents: list[int | str | None] = (
        [_chat_key(v) for v in df["parent_chat_id"].tolist()]
        if "parent_chat_id" in df.columns
        else [None] * len(df)
    )
    sessions, orphans = _session_roots(chat_ids, parents, lines, path)
    out = pd.DataFrame(
        {
            "request_id": [None if c is None else str(c) for c in chat_ids],
            "arrival_s": df.get("timestamp"),
            "prompt_len": df.get("input_length"),
            "output_len": df.get("output_length"),
            "prompt_block_ids": df.get("hash_ids"),
            "session_id": sessions,
            SOURCE_ROW: lines,
        }
    )
    notes: list[str] = []
    if orphans:
        notes.append(
            f"{orphans} request(s) name a parent_chat_id that is not in the file (the trace "
            "window starts mid-conversation); each starts its own session"
        )
    if "type" in df.columns:
        counts = Counter(str(t) for t in df["type"].dropna().tolist())
        if counts:
            listed = ", ".join(f"{name} {n}" for name, n in counts.most_common())
            notes.append(f"request types (not used as tenants; one shared cache): {listed}")
    return RawTrace(
        requests=out.dropna(axis=1, how="all"),
        format_name="bailian",
        source_block_size=BAILIAN_BLOCK_TOKENS,
        row_label="line",
        notes=tuple(notes),
        source_names={"arrival_s": "timestamp", "prompt_len": "input_length",
                      "output_len": "output_length", "prompt_block_ids": "hash_ids"},
    )


def _chat_key(value: object) -> int | str | None:
    """Chat ids are ints in the file; compare them as ints even when written as 12.0 or "12"."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        return text


def _session_roots(
    chat_ids: list[int | str | None],
    parents: list[int | str | None],
    lines: list[int],
    path: Path,
) -> tuple[list[str | None], int]:
    """The root chat id of every request's parent chain, and how many parents were absent."""
    parent_of: dict[int | str, int | str | None] = {}
    line_of: dict[int | str, int] = {}
    for chat, parent, line in zip(chat_ids, parents, lines, strict=True):
        if chat is not None and chat not in parent_of:
            parent_of[chat] = None if parent == ROOT_PARENT else parent
            line_of[chat] = line
    root_of: dict[int | str, int | str] = {}
    orphan_chats: set[int | str] = set()
    for start in parent_of:
        if start in root_of:
            continue
        chain: list[int | str] = []
        on_chain: set[int | str] = set()
        node: int | str = start
        while node not in root_of:
            if node in on_chain:
                raise TraceSchemaError(
                    f"{path}: line {line_of[start]}, column 'parent_chat_id': the parent chain "
                    f"of chat {start} loops back to chat {node}; a chat tree cannot have cycles"
                )
            chain.append(node)
            on_chain.add(node)
            parent = parent_of[node]
            if parent is None:
                root_of[node] = node
                break
            if parent not in parent_of:
                orphan_chats.add(node)
                root_of[node] = node
                break
            node = parent
        root = root_of[node]  # the chain's last node, or an already resolved ancestor
        for member in chain:
            root_of[member] = root
    sessions = [None if c is None else str(root_of[c]) for c in chat_ids]
    return sessions, len(orphan_chats)


def _is_bailian_record(keys: set[str]) -> bool:
    # Bailian rows also carry Mooncake's four keys; the chat tree tells them apart.
    return {"chat_id", "parent_chat_id"} <= keys


FORMAT = TraceFormatSpec(
    name=TraceFormat.BAILIAN,
    description="Alibaba Qwen/Bailian JSONL (ATC '25): chat trees and 16-token block ids",
    reader=read_bailian,
    row_label="line",
    json_keys=_is_bailian_record,
)
