"""LMCache's lookup-hash log: `lmcache server --lookup-hash-log-dir DIR`, written by
`LookupHashLoggingSubscriber` (`lmcache/v1/mp_observability/subscribers/logging/
lookup_hash.py`): one JSON object per lookup, in rotating files `lookup_hashes_*.jsonl`.

Give the folder (every `lookup_hashes_*.jsonl` file, plain or compressed, in name order) or one
file. A record maps to:

- `request_id`; `model` = `model_name`; `arrival_s` = `timestamp` (Unix s), since the first;
- `prompt_len` = `seq_len`;
- `prompt_block_ids` = `chunk_hashes` (LMCache's rolling prefix hashes of the full chunks, hex;
  each kept as the int64 of its last 64 bits), `source_block_size` = `chunk_size` (one value
  per trace): LMCache hashes complete chunks only, so a prompt has `floor(seq_len / chunk_size)`
  ids;
- `output_len` = 0: the log records lookups, not generations; the notes say so.

`dtypes` and `shapes` (the KV layout) are counted and named in a note.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.data.compressed import format_suffix
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import (
    count_keys,
    fail,
    hex_id,
    json_record,
    number,
    text_lines,
    unused_note,
    whole,
)

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

FILE_PREFIX: Final = "lookup_hashes_"
FIX: Final = "pass the files LMCache wrote with --lookup-hash-log-dir"
USED: Final = frozenset({"timestamp", "request_id", "model_name", "chunk_size", "seq_len",
                         "chunk_hashes"})


def log_files(folder: Path) -> list[Path]:
    """The log's files in a folder, in name (time) order."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.startswith(FILE_PREFIX)
                  and format_suffix(p) in (".jsonl", ".ndjson"))


def read_lmcache(path: Path) -> RawTrace:
    """Every lookup of the log's files (see the module docstring)."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    files = log_files(path) if path.is_dir() else [path]
    if not files:
        raise TraceReadError(f"{path}: no {FILE_PREFIX}*.jsonl file in this folder; {FIX}")
    rows: list[dict[str, Any]] = []
    unused: Counter[str] = Counter()
    sizes: set[int] = set()
    for file in files:
        for line, text in text_lines(file):
            if text.strip():
                record = json_record(text, file, "line", line)
                count_keys(unused, record, USED)
                rows.append(_row(record, file, line, sizes))
    if not rows:
        raise TraceSchemaError(f"{path}: no lookup record; {FIX}")
    if len(sizes) > 1:
        raise TraceSchemaError(f"{path}: chunk_size differs between records ({sorted(sizes)}); "
                               "give the log of one LMCache configuration")
    df = pd.DataFrame.from_records(rows).rename(columns={"_line": SOURCE_ROW})
    df["arrival_s"] = df["arrival_s"] - float(df["arrival_s"].min())
    notes: tuple[str, ...] = ("arrival_s is seconds since the first lookup (LMCache's timestamp)",
             "output_len is 0: LMCache's lookup log records each prompt's chunks, not what was "
             "generated, so decode figures do not apply",
             f"prompt_block_ids are LMCache's chunk hashes ({next(iter(sizes))} tokens each, "
             "complete chunks only), kept as 64 of their bits")
    if len(files) > 1:
        notes += (f"{len(files)} log files read as one trace, in name order",)
    return RawTrace(requests=df, format_name="lmcache", row_label="line",
                    source_block_size=next(iter(sizes)),
                    notes=notes + unused_note(unused, len(rows), "fields"),
                    source_names={"prompt_block_ids": "chunk_hashes", "prompt_len": "seq_len",
                                  "arrival_s": "timestamp"})


def _row(record: dict[str, Any], file: Path, line: int, sizes: set[int]) -> dict[str, Any]:
    hashes = record.get("chunk_hashes")
    if not isinstance(hashes, list):
        raise fail(file, "line", line, "chunk_hashes", "missing or not a list", FIX)
    ids = [hex_id(h) if isinstance(h, str) else None for h in hashes]
    if any(i is None for i in ids):
        bad = next(h for h, i in zip(hashes, ids, strict=True) if i is None)
        raise fail(file, "line", line, "chunk_hashes", f"{str(bad)[:40]!r} is not a hex hash",
                   FIX)
    sizes.add(whole(record.get("chunk_size"), file, "line", line, "chunk_size", FIX))
    row = {"request_id": str(record.get("request_id") or f"line{line}"),
           "arrival_s": number(record.get("timestamp"), file, "line", line, "timestamp", FIX),
           "prompt_len": whole(record.get("seq_len"), file, "line", line, "seq_len", FIX),
           "output_len": 0, "prompt_block_ids": ids, "_line": line}
    if record.get("model_name"):
        row["model"] = str(record["model_name"])
    return row


def _is_lookup_record(keys: set[str]) -> bool:
    return {"chunk_hashes", "chunk_size", "seq_len"} <= keys


def _is_lookup_folder(path: Path) -> bool:
    return bool(log_files(path))


FORMAT = TraceFormatSpec(
    name=TraceFormat.LMCACHE,
    description="LMCache lookup-hash log (`--lookup-hash-log-dir`): chunk hashes per prompt, "
                "a file or its folder",
    reader=read_lmcache,
    row_label="line",
    json_keys=_is_lookup_record,
    folder=_is_lookup_folder,
)
