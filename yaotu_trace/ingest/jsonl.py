"""Shared JSON Lines reading with line-numbered errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from yaotu_trace.errors import TraceReadError

PART_BYTES = 32 << 20  # text per part when a file is read in parts (about 0.2 GB parsed)


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


def iter_json_lines(path: Path, *, part_bytes: int | None = PART_BYTES
                    ) -> Iterator[tuple[list[dict[str, Any]], list[int]]]:
    """The records of a JSONL file and their line numbers, in parts of about `part_bytes` of
    text (one part when None), so a large file is parsed without holding all of it."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    size = 0
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise TraceReadError(
                        f"{path}: line {number}: invalid JSON ({_reason(exc)}); "
                        "fix or remove the line"
                    ) from exc
                if not isinstance(record, dict):
                    raise TraceReadError(
                        f"{path}: line {number}: expected a JSON object, got "
                        f"{type(record).__name__}; each line must be one request object"
                    )
                records.append(record)
                lines.append(number)
                size += len(line)
                if part_bytes is not None and size >= part_bytes:
                    yield records, lines
                    records, lines, size = [], [], 0
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror}); check permissions") from exc
    if records:
        yield records, lines


def first_record(path: Path) -> dict[str, Any] | None:
    """The first JSON object of a JSONL file, or None if the first line is not one."""
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    record = json.loads(line)
                    return record if isinstance(record, dict) else None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    return None


def _reason(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]
