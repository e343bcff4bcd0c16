"""Shared JSON Lines reading with line-numbered errors (plain or compressed files)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaotu_trace.data.compressed import is_compressed, open_compressed
from yaotu_trace.errors import TraceReadError

if TYPE_CHECKING:
    import pyarrow as pa

PART_BYTES = 32 << 20  # text per part when a file is read in parts (about 0.2 GB parsed)
BOM = b"\xef\xbb\xbf"
# What json.loads raises on a bad line: JSONDecodeError and UnicodeDecodeError are ValueErrors,
# as is an integer of more than 4300 digits; deep nesting exhausts the recursion limit.
JSON_ERRORS = (ValueError, RecursionError)


def read_json_lines(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """Parse a JSONL file into records and their 1-based line numbers; blank lines are skipped."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    for part_records, part_lines in iter_json_lines(path, part_bytes=None):
        records += part_records
        lines += part_lines
    if not records:
        raise TraceReadError(f"{path}: no JSON records found; check the file is not empty")
    return records, lines


# Up to this size a plain JSONL file may be parsed whole by pyarrow (`read_json_table`): it holds
# the file's bytes and the table at once.
TABLE_BYTES = 1 << 30


def read_json_table(path: Path) -> pa.Table | None:
    """The JSONL file parsed by pyarrow in one go (several times faster than line by line, and
    no Python object per value), when the table is provably what `read_json_lines` reads: a
    plain file, one JSON object on every line (no blank line, no byte-order mark), every key
    of every row present and not null, and none named twice in an object. None otherwise, and
    on anything pyarrow refuses: the caller reads the file line by line, which names the line
    at fault. The caller checks the column types it takes."""
    if is_compressed(path):
        return None
    try:
        size = path.stat().st_size
        if not 0 < size <= TABLE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None  # the line-by-line reader names the problem
    if data.startswith(BOM):
        return None
    import pyarrow as pa
    import pyarrow.json as pa_json

    try:
        table = pa_json.read_json(pa.BufferReader(data))
    except (pa.ArrowException, ValueError):
        return None
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    if table.num_rows != lines or any(column.null_count for column in table.columns):
        return None
    # Every row has every key (no nulls), so as many key ends as cells means no key twice;
    # a `":` inside a string value only adds to the count (and sends the file line by line).
    ends = (len(_KEY_END.findall(data)) if _BLANK_AFTER_QUOTE.search(data)
            else data.count(b'":'))
    if ends != table.num_rows * table.num_columns:
        return None
    return table


def iter_json_lines(path: Path, *, part_bytes: int | None = PART_BYTES
                    ) -> Iterator[tuple[list[dict[str, Any]], list[int]]]:
    """The records of a JSONL file and their line numbers, in parts of about `part_bytes` of
    text (one part when None), so a large file is parsed without holding all of it."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    size = 0
    try:
        with open_compressed(path) as fh:
            for number, line in enumerate(fh, start=1):
                if number == 1 and line.startswith(BOM):
                    line = line[len(BOM):]
                if not line.strip():
                    continue
                records.append(parse_object(line, path, number))
                lines.append(number)
                size += len(line)
                if part_bytes is not None and size >= part_bytes:
                    yield records, lines
                    records, lines, size = [], [], 0
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror}); check permissions") from exc
    if records:
        yield records, lines


def parse_object(line: bytes, path: Path, number: int) -> dict[str, Any]:
    """One line of a JSONL file as a JSON object; anything else is an error naming the line."""
    try:
        record = json.loads(line)
    except JSON_ERRORS as exc:
        if number == 1 and line.lstrip().startswith(b"["):
            raise _array_error(path) from exc
        raise TraceReadError(
            f"{path}: line {number}: invalid JSON ({_reason(exc)}); fix or remove the line"
        ) from exc
    if not isinstance(record, dict):
        if isinstance(record, list) and number == 1:
            raise _array_error(path)
        raise TraceReadError(
            f"{path}: line {number}: expected a JSON object, got "
            f"{type(record).__name__}; each line must be one request object"
        )
    # Every key ends in `"`, maybe blanks, then `:`, so a line with no more of those than the
    # object has keys repeats none (the common case, counted at C speed; the regex only when a
    # blank follows a quote); else it is parsed again to see.
    ends = (len(_KEY_END.findall(line)) if _BLANK_AFTER_QUOTE.search(line)
            else line.count(b'":'))
    if ends > len(record):
        _no_repeated_key(line, path, number)
    return record


_KEY_END = re.compile(rb'"\s*:')
_BLANK_AFTER_QUOTE = re.compile(rb'"\s')


def _no_repeated_key(line: bytes, path: Path, number: int) -> None:
    """Refuse a line whose object names a key twice (json keeps the last value, other readers
    the first); keys of nested objects are the source's business."""
    seen: list[list[tuple[str, Any]]] = []

    def keep(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen.append(pairs)
        return dict(pairs)

    json.loads(line, object_pairs_hook=keep)
    keys = [k for k, _ in seen[-1]]  # the outermost object closes last
    twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if twice is not None:
        raise TraceReadError(
            f"{path}: line {number}, column {twice!r}: the key appears more than once in the "
            "object, and which value is meant would be a guess (Python's json keeps the last, "
            "other readers the first); keep one"
        )


def _array_error(path: Path) -> TraceReadError:
    return TraceReadError(
        f"{path}: line 1 is a JSON array, not one request object per line; write it as JSON "
        "Lines (e.g. jq -c '.[]' in.json > out.jsonl)"
    )


def first_record(path: Path) -> dict[str, Any] | None:
    """The first JSON object of a JSONL file, or None when the file holds no line; a first
    line that is not a JSON object is an error naming it."""
    with open_compressed(path) as fh:
        for number, line in enumerate(fh, start=1):
            if number == 1 and line.startswith(BOM):
                line = line[len(BOM):]
            if line.strip():
                return parse_object(line, path, number)
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).splitlines()[0][:120]
