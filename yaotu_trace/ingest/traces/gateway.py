"""An OpenAI-compatible gateway's request log: one JSON object per request holding the request
and response bodies as a proxy stores them (`request`/`response`, or `request_body`/
`response_body`), with the times it saw (`start_time`/`end_time`, else `timestamp`; ISO text or
Unix seconds).

The log holds text, not token ids: the trace has the lengths the server counted and its
cached tokens, and no prompt content, so the prefix replay has nothing to match (the notes say
so). Token ids are never guessed from the text: with `--tokenizer tokenizer.json` (the model's
tokenizer, `ingest/text_tokens.py`) each request's text is tokenized as the server did, and a
request whose ids do not number the server's `usage.prompt_tokens` is refused.

Mapping: `request_id` = the response's `id`; `model`; `tenant` = the request's `user`;
`arrival_s` = `start_time`, seconds since the first; `finish_s` = `end_time`; `prompt_len` =
`usage.prompt_tokens` (Anthropic: `input_tokens` + `cache_creation_input_tokens` +
`cache_read_input_tokens`); `output_len` = `usage.completion_tokens` (`output_tokens`);
`cached_tokens` = `usage.prompt_tokens_details.cached_tokens` (Anthropic:
`cache_read_input_tokens`); `status` = `error` for an HTTP status of 400 or more or an `error`
body. Other fields are counted in a note.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.text_tokens import TextTokenizer
from yaotu_trace.ingest.traces.common import (
    count_keys,
    fail,
    json_record,
    text_lines,
    unix_seconds,
    unused_note,
    whole,
)

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

FIX: Final = "pass the gateway's log of request and response bodies, one JSON object per line"
USED: Final = frozenset({"request", "response", "request_body", "response_body", "start_time",
                         "end_time", "timestamp", "status", "status_code"})
TEXT_ONLY: Final = ("the gateway log holds message text, not token ids: lengths and cached "
                    "tokens are the server's counts, and there is no prompt content to replay "
                    "(token ids are never guessed from text)")


def read_gateway(path: Path) -> RawTrace:
    """Every logged request (see the module docstring), without prompt content."""
    return read_tokenized(path, None)


def read_tokenized(path: Path, tokenizer: TextTokenizer | None) -> RawTrace:
    """Every logged request, its prompt tokenized with `tokenizer` when given."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    rows: list[dict[str, Any]] = []
    unused: Counter[str] = Counter()
    for line, text in text_lines(path):
        if text.strip():
            record = json_record(text, path, "line", line)
            count_keys(unused, record, USED)
            rows.append(_row(record, path, line, unused, tokenizer))
    if not rows:
        raise TraceSchemaError(f"{path}: no request; {FIX}")
    df = pd.DataFrame.from_records(rows).rename(columns={"_line": SOURCE_ROW})
    origin = float(df["arrival_s"].min())
    for column in ("arrival_s", "finish_s"):
        if column in df:
            df[column] = df[column] - origin
    notes: tuple[str, ...] = ("arrival_s is seconds since the first request reached the gateway",
                              TEXT_ONLY if tokenizer is None else
                              f"{tokenizer.describe()}; every request's ids number the "
                              "server's usage.prompt_tokens")
    if "cached_tokens" in df:
        notes += ("cached_tokens are the server's usage.prompt_tokens_details.cached_tokens "
                  "(Anthropic: cache_read_input_tokens)",)
    return RawTrace(requests=df, format_name="gateway", row_label="line",
                    notes=notes + unused_note(unused, len(rows), "fields"))


def bodies(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request and response bodies of a log record."""
    request = record.get("request", record.get("request_body"))
    response = record.get("response", record.get("response_body"))
    return (request if isinstance(request, dict) else {},
            response if isinstance(response, dict) else {})


def _seconds(value: Any, path: Path, line: int, column: str) -> float:
    return unix_seconds(value, path, "line", line, column, FIX)


def _row(record: dict[str, Any], path: Path, line: int, unused: Counter[str],
         tokenizer: TextTokenizer | None) -> dict[str, Any]:
    request, response = bodies(record)
    count_keys(unused, request, ("model", "user", "messages", "prompt"), "request.")
    usage: dict[str, Any] = response["usage"] if isinstance(response.get("usage"), dict) else {}
    start = record.get("start_time", record.get("timestamp"))
    if start is None:
        raise fail(path, "line", line, "start_time", "missing", FIX)
    row: dict[str, Any] = {"request_id": str(response.get("id") or f"line{line}"),
                           "arrival_s": _seconds(start, path, line, "start_time"), "_line": line}
    if record.get("end_time") is not None:
        row["finish_s"] = _seconds(record["end_time"], path, line, "end_time")
    status = record.get("status_code", record.get("status"))
    failed = (isinstance(status, int) and status >= 400) or "error" in response
    row["status"] = "error" if failed else "ok"

    def count(key: str) -> int:
        return whole(usage.get(key, 0), path, "line", line, f"response.usage.{key}", FIX)

    if "input_tokens" in usage and "prompt_tokens" not in usage:  # Anthropic's Messages API
        read = count("cache_read_input_tokens")
        row["prompt_len"] = count("input_tokens") + count("cache_creation_input_tokens") + read
        row["output_len"] = count("output_tokens")
        row["cached_tokens"] = read
    else:
        row["prompt_len"] = count("prompt_tokens")
        row["output_len"] = count("completion_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            row["cached_tokens"] = whole(details["cached_tokens"], path, "line", line,
                                         "response.usage.prompt_tokens_details.cached_tokens",
                                         FIX)
    if failed and not usage:
        row["prompt_len"] = row["output_len"] = 0
    if tokenizer is not None:
        row["prompt_tokens"] = _ids(request, row, tokenizer, path, line)
    model = response.get("model") or request.get("model")
    if model:
        row["model"] = str(model)
    if request.get("user"):
        row["tenant"] = str(request["user"])
    return row


def _ids(request: dict[str, Any], row: dict[str, Any], tokenizer: TextTokenizer, path: Path,
         line: int) -> list[int]:
    """The prompt's token ids, refused unless they number the server's count (a request the
    server refused without a count keeps none: the engine never saw it)."""
    if row["prompt_len"] == 0:
        return []
    ids = tokenizer.prompt_ids(request)
    column = "request.prompt" if isinstance(request.get("prompt"), str) else "request.messages"
    if isinstance(ids, str):
        raise fail(path, "line", line, column, ids, "give the model's tokenizer.json with its "
                   "tokenizer_config.json beside it")
    if len(ids) != row["prompt_len"]:
        raise fail(path, "line", line, column,
                   f"{tokenizer.path} gives {len(ids)} tokens and the server counted "
                   f"{row['prompt_len']} (usage.prompt_tokens)",
                   "give the tokenizer.json (and chat template) of the model the server ran")
    return ids


def _is_gateway_record(keys: set[str]) -> bool:
    return ({"request", "response"} <= keys or {"request_body", "response_body"} <= keys) and (
        "start_time" in keys or "timestamp" in keys)


FORMAT = TraceFormatSpec(
    name=TraceFormat.GATEWAY,
    description="OpenAI-compatible gateway log: request and response bodies (text only, no "
                "token ids)",
    reader=read_gateway,
    row_label="line",
    json_keys=_is_gateway_record,
    text_reader=read_tokenized,
)
