"""What the capture readers share: numbered lines of a plain or compressed file, hash ids as
int64, JSON values checked with one-line errors, and the note that names what a file holds but
the reader does not use."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from yaotu_trace.data.compressed import open_compressed
from yaotu_trace.errors import TraceReadError, TraceSchemaError

INT64_SPAN = 1 << 64
INT64_MAX = (1 << 63) - 1


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a plain or compressed text file with 1-based numbers, read as a stream."""
    try:
        with open_compressed(path) as fh:
            for number, raw in enumerate(fh, start=1):
                yield number, raw.decode("utf-8", errors="replace")
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc}); check the file") \
            from exc


def as_int64(value: int) -> int:
    """An unsigned 64-bit hash as the signed int64 with the same bits (equal stays equal)."""
    value %= INT64_SPAN
    return value - INT64_SPAN if value > INT64_MAX else value


def hex_id(text: str) -> int | None:
    """A hex hash (`0xab…`, `ab…`, any length) as int64: its last 16 hex digits, so hashes
    longer than 64 bits keep 64 of their bits (two distinct hashes collide with probability
    2**-64). None when the text is not hex."""
    digits = text[2:] if text[:2].lower() == "0x" else text
    try:
        return as_int64(int(digits[-16:], 16)) if digits else None
    except ValueError:
        return None


def fail(path: Path, label: str, row: int, column: str, problem: str, fix: str) -> TraceSchemaError:
    """The one-line error of a bad value: file, row, column, what is wrong and the fix."""
    return TraceSchemaError(f"{path}: {label} {row}, field '{column}': {problem}; {fix}")


def whole(value: Any, path: Path, label: str, row: int, column: str, fix: str) -> int:
    """A whole number >= 0 (an integral float is read as its integer)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
        raise fail(path, label, row, column, f"{str(value)[:40]!r} is not a whole number", fix)
    if value < 0:
        raise fail(path, label, row, column, f"{value} is negative", fix)
    return int(value)


def number(value: Any, path: Path, label: str, row: int, column: str, fix: str) -> float:
    """A finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(path, label, row, column, f"{str(value)[:40]!r} is not a number", fix)
    return float(value)


def iso_moment(value: Any, path: Path, label: str, row: int, column: str,
               fix: str) -> datetime:
    """An ISO-8601 time (`2026-06-01T05:40:20.151Z`, `…+08:00`); one without a zone is UTC."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        raise fail(path, label, row, column, f"{str(value)[:40]!r} is not an ISO-8601 time",
                   fix) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def unix_seconds(value: Any, path: Path, label: str, row: int, column: str, fix: str) -> float:
    """A time as Unix seconds: a number as it is, else an ISO-8601 time (`iso_moment`)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return iso_moment(value, path, label, row, column, fix).timestamp()


def id_list(text: str, path: Path, label: str, row: int, column: str, fix: str) -> list[int]:
    """`[1, 2, 3]` written by Python or JSON as a list of whole numbers."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise fail(path, label, row, column, f"{body[:40]!r} is not a list of ids", fix)
    inner = body[1:-1].strip()
    if not inner:
        return []
    try:
        return [int(part) for part in inner.split(",")]
    except ValueError:
        bad = next(p for p in inner.split(",") if not p.strip().lstrip("-").isdigit())
        raise fail(path, label, row, column, f"{bad.strip()[:40]!r} is not a token id",
                   fix) from None


def json_record(line: str, path: Path, label: str, row: int) -> dict[str, Any]:
    """One JSON object; anything else is an error naming the line."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise TraceReadError(f"{path}: {label} {row}: invalid JSON ({str(exc)[:80]}); fix or "
                             "remove the line") from exc
    if not isinstance(record, dict):
        raise TraceReadError(f"{path}: {label} {row}: expected a JSON object, got "
                             f"{type(record).__name__}")
    return record


def unused_note(counts: Counter[str], total: int, what: str) -> tuple[str, ...]:
    """The note naming the fields (or lines) of the file the reader leaves unused."""
    if not counts:
        return ()
    names = sorted(counts, key=lambda k: (-counts[k], k))
    shown = ", ".join(f"{k} ({counts[k]})" for k in names)
    return (f"{what} in the file that the trace does not use, with the number of {total} "
            f"records holding each: {shown}",)


def count_keys(counts: Counter[str], record: dict[str, Any], used: Iterable[str],
               prefix: str = "") -> None:
    """Count the keys of `record` not in `used` (as `prefix.key`)."""
    keep = set(used)
    for key, value in record.items():
        if key not in keep and value is not None:
            counts[f"{prefix}{key}"] += 1
