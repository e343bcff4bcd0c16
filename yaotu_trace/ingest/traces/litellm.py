"""LiteLLM proxy spend logs: rows of its `LiteLLM_SpendLogs` table (`SpendLogsPayload`, built
by `litellm/proxy/spend_tracking/spend_tracking_utils.py:get_logging_payload`), exported as
JSON Lines or as the JSON array `/spend/logs` returns; with the `prefix_block_hashes` callback
(LiteLLM ≥ 1.111) each row carries its prompt's chained block hashes.

Mapping: `request_id`; `arrival_s` = `startTime`, seconds since the first; `first_token_s` =
`completionStartTime`; `finish_s` = `endTime`; `prompt_len` = `prompt_tokens`, `output_len` =
`completion_tokens`; `model`; `session_id`; `tenant` = `team_id`, else `user`, else the hashed
`api_key` (the first of the three any row has, the same for all rows, named in a note);
`cached_tokens` = the provider's `prompt_tokens_details.cached_tokens` (Anthropic:
`cache_read_input_tokens`) from `metadata.additional_usage_values`; `status` = `error` where
`status` (or `metadata.status`) is `failure`; `prompt_block_ids` = `prefix_block_hashes` (16
hex characters each, chained, the final partial block included; at the row's top level or in
`metadata`), with the block size from `prefix_block_size` beside them, else from
`--source-block-size`. Other columns are counted in a note.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.data.compressed import format_suffix, read_text
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import (
    count_keys,
    fail,
    hex_id,
    json_record,
    text_lines,
    unix_seconds,
    unused_note,
    whole,
)

if TYPE_CHECKING:
    from yaotu_trace.data.schema import RawTrace

FIX: Final = "pass LiteLLM_SpendLogs rows as JSON Lines or the /spend/logs JSON array"
TENANTS: Final = ("team_id", "user", "api_key")
USED: Final = frozenset({"request_id", "startTime", "endTime", "completionStartTime",
                         "prompt_tokens", "completion_tokens", "model", "session_id", "status",
                         "metadata", "prefix_block_hashes", "prefix_block_size", *TENANTS})


def read_litellm(path: Path) -> RawTrace:
    """Every spend-log row (see the module docstring)."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    records = list(_records(path))
    if not records:
        raise TraceSchemaError(f"{path}: no spend-log row; {FIX}")
    unused: Counter[str] = Counter()
    tenant_key = next((k for k in TENANTS if any(r.get(k) for _, r in records)), None)
    sizes: set[int] = set()
    rows = []
    for line, record in records:
        count_keys(unused, {k: v for k, v in record.items() if v not in ("", [], {})}, USED)
        rows.append(_row(record, path, line, tenant_key, sizes))
    if len(sizes) > 1:
        raise TraceSchemaError(f"{path}: prefix_block_size differs between rows "
                               f"({sorted(sizes)}); give the spend logs of one configuration")
    df = pd.DataFrame.from_records(rows).rename(columns={"_line": SOURCE_ROW})
    origin = float(df["arrival_s"].min())
    for column in ("arrival_s", "first_token_s", "finish_s"):
        if column in df:
            df[column] = df[column] - origin
    notes = ["arrival_s is seconds since the first request's startTime"]
    if tenant_key is not None:
        notes.append(f"tenant is the spend log's {tenant_key}")
    if "cached_tokens" in df:
        notes.append("cached_tokens are the provider's own prompt_tokens_details.cached_tokens "
                     "(or cache_read_input_tokens): the replay is compared with them")
    if "prompt_block_ids" in df:
        notes.append("prompt_block_ids are the prefix_block_hashes callback's chained ids (the "
                     "final partial block included)")
    return RawTrace(requests=df, format_name="litellm", row_label="line",
                    source_block_size=next(iter(sizes), None),
                    notes=tuple(notes) + unused_note(unused, len(rows), "columns"),
                    source_names={"arrival_s": "startTime", "prompt_len": "prompt_tokens",
                                  "output_len": "completion_tokens",
                                  "prompt_block_ids": "prefix_block_hashes"})


def _records(path: Path) -> Any:
    if format_suffix(path) == ".json":
        try:
            doc = json.loads(read_text(path, FIX))
        except (ValueError, RecursionError) as exc:
            raise TraceReadError(f"{path}: invalid JSON ({str(exc)[:80]}); {FIX}") from exc
        items = doc.get("data", doc.get("logs")) if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise TraceSchemaError(f"{path}: expected a JSON array of spend-log rows; {FIX}")
        for n, item in enumerate(items, start=1):
            if not isinstance(item, dict):
                raise TraceSchemaError(f"{path}: row {n}: not an object; {FIX}")
            yield n, item
        return
    for line, text in text_lines(path):
        if text.strip():
            yield line, json_record(text, path, "line", line)


def _seconds(value: Any, path: Path, line: int, column: str) -> float:
    return unix_seconds(value, path, "line", line, column, FIX)


def _metadata(record: dict[str, Any]) -> dict[str, Any]:
    meta = record.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return {}
    return meta if isinstance(meta, dict) else {}


def _row(record: dict[str, Any], path: Path, line: int, tenant_key: str | None,
         sizes: set[int]) -> dict[str, Any]:
    meta = _metadata(record)
    row: dict[str, Any] = {
        "request_id": str(record.get("request_id") or f"line{line}"),
        "arrival_s": _seconds(record.get("startTime"), path, line, "startTime"),
        "prompt_len": whole(record.get("prompt_tokens"), path, "line", line, "prompt_tokens",
                            FIX),
        "output_len": whole(record.get("completion_tokens"), path, "line", line,
                            "completion_tokens", FIX),
        "_line": line,
    }
    for column, key in (("first_token_s", "completionStartTime"), ("finish_s", "endTime")):
        if record.get(key):
            row[column] = _seconds(record[key], path, line, key)
    for column in ("model", "session_id"):
        if record.get(column):
            row[column] = str(record[column])
    if tenant_key is not None and record.get(tenant_key):
        row["tenant"] = str(record[tenant_key])
    status = record.get("status") or meta.get("status")
    row["status"] = "error" if status == "failure" else "ok"
    usage = meta.get("additional_usage_values") or {}
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = usage.get("cache_read_input_tokens") if cached is None else cached
    if cached is not None:
        row["cached_tokens"] = whole(cached, path, "line", line,
                                     "metadata.additional_usage_values.cached_tokens", FIX)
    holder = record if record.get("prefix_block_hashes") is not None else meta
    hashes = holder.get("prefix_block_hashes")
    if isinstance(hashes, list):
        ids = [hex_id(h) if isinstance(h, str) else None for h in hashes]
        if any(i is None for i in ids):
            raise fail(path, "line", line, "prefix_block_hashes", "holds a value that is not "
                       "a hex id", FIX)
        row["prompt_block_ids"] = ids
        if holder.get("prefix_block_size") is not None:
            sizes.add(whole(holder["prefix_block_size"], path, "line", line,
                            "prefix_block_size", FIX))
    return row


def _is_spend_log_row(keys: set[str]) -> bool:
    return {"request_id", "startTime", "prompt_tokens", "completion_tokens", "call_type"} <= keys


def _is_spend_log_array(head: str) -> bool:
    return all(f'"{k}"' in head for k in ("request_id", "startTime", "call_type",
                                          "completion_tokens"))


FORMAT = TraceFormatSpec(
    name=TraceFormat.LITELLM,
    description="LiteLLM proxy spend logs (JSON Lines or `/spend/logs`), with "
                "`prefix_block_hashes`",
    reader=read_litellm,
    row_label="line",
    json_keys=_is_spend_log_row,
    json_document=_is_spend_log_array,
)
