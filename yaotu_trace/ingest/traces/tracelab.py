"""TraceLab agentic coding traces (uw-syfi/TraceLab): one JSON line per LLM round of Claude Code
or Codex, the example `round_trace.jsonl` and the release `syfi_coding_trace.jsonl.gz`.

Mapping and decisions:

- `arrival_s`: the round's submission, its latest `user_message` or `tool_result` event (a
  request cannot leave before its last input landed), else its first model output
  (`reasoning`, `text`, `tool_call`); the rule of TraceLab's own "observable generation time"
  and of AIPerf's TraceLab loader. Seconds since the earliest round, on the one UTC clock
  the events were written in (sessions keep the times they ran at; the notes say so). A round
  with no timed event is skipped, counted and named in a note.
- `prompt_len` = `input_tokens_total`; `output_len` = `output_tokens`, which holds Codex's
  reasoning already (TraceLab's cost analysis bills `output_tokens` "reasoning included";
  `reasoning_output_tokens` is a part of it, not more).
- `cached_tokens` = `prefix_tokens`: the provider's own prompt-cache hit (Claude's
  `cache_read_input_tokens`, Codex's cached input in 128-token steps), shown beside the
  replay's. A prefix longer than the input is refused; an input that is not prefix + append
  is counted in a note.
- `session_id`, `model`; `tenant` = `user` (the release's pseudonymous user, one prompt cache
  each at the provider); `request_id` = `trace_key` (else `round_id`).
- There is no prompt content, hash or token id: prefix reuse cannot be replayed from these
  files (AIPerf mints block ids from `prefix_tokens`, which would only echo the provider's
  hits back). Every other field is counted and named in a note.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import (
    count_keys,
    fail,
    iso_moment,
    json_record,
    text_lines,
    unused_note,
    whole,
)

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

DETECT_KEYS: Final = frozenset({"session_id", "round_index", "input_tokens_total",
                                "prefix_tokens", "newly_append_tokens", "timing_events"})
INPUT_EVENTS: Final = frozenset({"user_message", "tool_result"})
OUTPUT_EVENTS: Final = frozenset({"reasoning", "text", "tool_call"})
USED: Final = frozenset({"session_id", "input_tokens_total", "prefix_tokens",
                         "newly_append_tokens", "output_tokens", "timing_events", "model",
                         "user", "trace_key", "round_id"})
FIX: Final = "pass the round trace as TraceLab publishes it (llm round JSON lines)"
_US: Final = 1_000_000


def read_tracelab(path: Path) -> RawTrace:
    """Every timed round of the file (see the module docstring)."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    rows: list[dict[str, Any]] = []
    unused: Counter[str] = Counter()
    untimed: list[int] = []
    unbalanced: list[int] = []
    records = 0
    for line, text in text_lines(path):
        if not text.strip():
            continue
        records += 1
        record = json_record(text, path, "line", line)
        count_keys(unused, record, USED)
        row = _row(record, path, line, unbalanced)
        if row is None:
            untimed.append(line)
        else:
            rows.append(row)
    if not rows:
        what = (f"no round has a timed event ({len(untimed):,} in the file)" if untimed
                else "no round in the file")
        raise TraceSchemaError(f"{path}: {what}; {FIX}")
    df = pd.DataFrame.from_records(rows).rename(columns={"_line": SOURCE_ROW})
    first_us = int(df["_submitted_us"].min())
    df["arrival_s"] = (df.pop("_submitted_us") - first_us) / _US
    start = datetime.fromtimestamp(first_us / _US, tz=UTC).isoformat(timespec="milliseconds")
    notes: tuple[str, ...] = (
        f"arrival_s is each round's submission (its latest user_message or tool_result event, "
        f"else its first model output), seconds since the earliest, {start}; every session "
        "keeps the UTC time it ran at",
        "cached_tokens are the provider's own prompt-cache hits (prefix_tokens); the file has "
        "no prompt content or hashes, so prefix reuse cannot be replayed from it",
    )
    if unused["reasoning_output_tokens"]:
        notes += ("output_len is output_tokens, which holds Codex's reasoning already "
                  "(reasoning_output_tokens is a part of it, as TraceLab bills it): not added",)
    if untimed:
        notes += (f"rounds without a timed event, skipped: {len(untimed):,} (first: line "
                  f"{untimed[0]})",)
    if unbalanced:
        notes += (f"rounds whose input_tokens_total is not prefix_tokens + newly_append_tokens, "
                  f"read as given: {len(unbalanced):,} (first: line {unbalanced[0]})",)
    return RawTrace(requests=df, format_name="tracelab", row_label="line",
                    notes=notes + unused_note(unused, records, "fields"),
                    source_names={"arrival_s": "timing_events", "prompt_len":
                                  "input_tokens_total", "output_len": "output_tokens",
                                  "cached_tokens": "prefix_tokens", "tenant": "user",
                                  "request_id": "trace_key"})


def _row(record: dict[str, Any], path: Path, line: int,
         unbalanced: list[int]) -> dict[str, Any] | None:
    """One round as canonical columns (and its submission in µs), None when nothing in it is
    timed."""
    submitted = _submitted_us(record.get("timing_events"), path, line)
    if submitted is None:
        return None
    total = whole(record.get("input_tokens_total"), path, "line", line, "input_tokens_total",
                  FIX)
    prefix = whole(record.get("prefix_tokens"), path, "line", line, "prefix_tokens", FIX)
    if prefix > total:
        raise fail(path, "line", line, "prefix_tokens",
                   f"{prefix:,} cached tokens in a {total:,}-token input", FIX)
    append = record.get("newly_append_tokens")
    if append is not None and whole(append, path, "line", line, "newly_append_tokens",
                                    FIX) + prefix != total:
        unbalanced.append(line)
    row: dict[str, Any] = {
        "_submitted_us": submitted, "prompt_len": total, "cached_tokens": prefix,
        "output_len": whole(record.get("output_tokens"), path, "line", line, "output_tokens",
                            FIX),
        "_line": line,
    }
    for column, key in (("session_id", "session_id"), ("model", "model"), ("tenant", "user")):
        if record.get(key) is not None:
            row[column] = str(record[key])
    request_id = record.get("trace_key") or record.get("round_id")
    if request_id is not None:
        row["request_id"] = str(request_id)
    return row


def _submitted_us(events: Any, path: Path, line: int) -> int | None:
    """The round's submission in µs since 1970 (UTC): its latest input event, else its first
    model output; None when no event is timed."""
    if events is None:
        return None
    if not isinstance(events, list):
        raise fail(path, "line", line, "timing_events", "not a list of events", FIX)
    inputs: list[int] = []
    outputs: list[int] = []
    for i, event in enumerate(events):
        if not isinstance(event, dict) or not event.get("timestamp"):
            continue
        kind = event.get("event_type")
        if kind in INPUT_EVENTS or kind in OUTPUT_EVENTS:
            stamp = _utc_us(event["timestamp"], path, line, f"timing_events[{i}].timestamp")
            (inputs if kind in INPUT_EVENTS else outputs).append(stamp)
    if inputs:
        return max(inputs)
    return min(outputs) if outputs else None


def _utc_us(value: Any, path: Path, line: int, field: str) -> int:
    """An ISO-8601 time (`2026-06-01T05:40:20.151Z`; no zone is UTC) in µs since 1970, exact
    (a float of seconds would round the microseconds of today's times)."""
    delta = iso_moment(value, path, "line", line, field, FIX) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * _US + delta.microseconds


def _is_round(keys: set[str]) -> bool:
    return keys >= DETECT_KEYS


FORMAT = TraceFormatSpec(
    name=TraceFormat.TRACELAB,
    description="TraceLab agentic coding rounds (Claude Code, Codex): lengths, submission "
                "times, the provider's cached tokens",
    reader=read_tracelab,
    row_label="line",
    json_keys=_is_round,
)
