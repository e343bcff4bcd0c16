"""SGLang's request log: `--log-requests --log-requests-level 2|3` (text, or JSON with
`--log-requests-format json`), the lines of `RequestLogger` (`sglang/srt/utils/
request_logger.py`).

A request is its `Finish: obj=GenerateReqInput(...), out={...}` line (JSON: the
`request.finished` event); its `Receive:` line (`request.received`) dates it when the output
carries no `request_received_ts`. Mapping:

- `request_id` = `rid`; `tenant` = `cache_salt` (SGLang keeps salted prefixes apart);
- `arrival_s` = `meta_info.request_received_ts` (with `--enable-metrics`), else the `Receive`
  line's time, else the `Finish` line's time less `e2e_latency`; seconds since the first;
- `prompt_len` = `prompt_tokens`, `output_len` = `completion_tokens`, `cached_tokens` =
  `cached_tokens` (the engine's own prefix hits), `num_preemptions` = `num_retractions`;
- `prompt_tokens` = `obj.input_ids` and `output_tokens` = `out.output_ids` when the log holds
  them whole (level 2 cuts a list of more than 2048 ids to its ends: such a request keeps its
  lengths but no ids, and a note counts it; levels 0 and 1 log no ids at all);
- `first_token_s` = arrival + `first_token_latency`, `finish_s` = arrival + `e2e_latency`;
- `status` = `aborted` when `finish_reason.type` is `abort`, else `ok`.

Keys of `meta_info` the trace does not use are counted and named in a note.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import count_keys, number, text_lines, unused_note, whole

if TYPE_CHECKING:
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace

FIX: Final = "pass the log SGLang wrote with --log-requests --log-requests-level 2 or 3"
_TIME = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d+))?[^\]]*\]")
_RECEIVE = re.compile(r"\bReceive: obj=\w+\(rid='([^']*)'")
_FINISH = re.compile(r"\bFinish: obj=\w+\(rid='([^']*)'")
_IDS = re.compile(r"\binput_ids=(\[[^\]]*\])( \.\.\. \[)?")
_OUT = ", out={"
USED_META: Final = frozenset({
    "id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
    "e2e_latency", "request_received_ts", "first_token_latency", "num_retractions",
    "request_finished_ts"})


@dataclass(slots=True)
class Requests:
    """Rows gathered from SGLang records, and what the notes say of them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unused: Counter[str] = field(default_factory=Counter)
    cut_ids: int = 0
    no_ids: int = 0
    line_dated: int = 0


def row_of(obj: dict[str, Any], out: dict[str, Any], where: tuple[Path, str, int],
           received_s: float | None, finished_s: float | None, into: Requests) -> None:
    """One canonical row from a request object and its output (`where`: file, label, row);
    times are unix seconds, made relative by `table`."""
    path, label, line = where
    meta = out.get("meta_info", out)
    if not isinstance(meta, dict):
        raise TraceSchemaError(f"{path}: {label} {line}, field 'meta_info': not an object; {FIX}")
    count_keys(into.unused, meta, USED_META, "meta_info.")
    count_keys(into.unused, obj, ("rid", "input_ids", "cache_salt"), "request.")

    def get(key: str) -> int:
        return whole(meta.get(key), path, label, line, key, FIX)

    e2e = meta.get("e2e_latency")
    e2e_s = None if e2e is None else number(e2e, path, label, line, "e2e_latency", FIX)
    arrival = meta.get("request_received_ts")
    if arrival is not None:
        arrival_s = number(arrival, path, label, line, "request_received_ts", FIX)
    elif received_s is not None:
        arrival_s = received_s
        into.line_dated += 1
    elif finished_s is not None and e2e_s is not None:
        arrival_s = finished_s - e2e_s
        into.line_dated += 1
    else:
        raise TraceSchemaError(f"{path}: {label} {line}: no arrival time (no "
                               "request_received_ts, no Receive line, no time stamp); start "
                               "SGLang with --enable-metrics so each request carries "
                               "request_received_ts")
    reason = meta.get("finish_reason")
    row: dict[str, Any] = {
        "request_id": str(obj.get("rid") or meta.get("id")),
        "arrival_s": arrival_s,
        "prompt_len": get("prompt_tokens"),
        "output_len": get("completion_tokens"),
        "status": "aborted" if isinstance(reason, dict) and reason.get("type") == "abort"
        else "ok",
        "_line": line,
    }
    if meta.get("cached_tokens") is not None:
        row["cached_tokens"] = get("cached_tokens")
    if meta.get("num_retractions") is not None:
        row["num_preemptions"] = get("num_retractions")
    if obj.get("cache_salt"):
        row["tenant"] = str(obj["cache_salt"])
    if meta.get("first_token_latency") is not None:
        row["first_token_s"] = arrival_s + number(meta["first_token_latency"], path, label, line,
                                                  "first_token_latency", FIX)
    if e2e_s is not None:
        row["finish_s"] = arrival_s + e2e_s
    ids = _whole_ids(obj.get("input_ids"), row["prompt_len"], into)
    if ids is not None:
        row["prompt_tokens"] = ids
    outs = out.get("output_ids")
    if isinstance(outs, list) and len(outs) == row["output_len"] and "..." not in outs:
        row["output_tokens"] = outs
    into.rows.append(row)


def _whole_ids(ids: Any, prompt_len: int, into: Requests) -> list[int] | None:
    if not isinstance(ids, list):
        into.no_ids += 1
        return None
    if "..." in ids or len(ids) != prompt_len:
        into.cut_ids += 1
        return None
    return ids


def table(into: Requests, path: Path, fmt: str) -> RawTrace:
    """The canonical table of the gathered rows, arrivals from the earliest."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    if not into.rows:
        raise TraceSchemaError(f"{path}: no finished request found; {FIX}")
    df = pd.DataFrame.from_records(into.rows).rename(columns={"_line": SOURCE_ROW})
    origin = float(df["arrival_s"].min())
    for column in ("arrival_s", "first_token_s", "finish_s"):
        if column in df:
            df[column] = df[column] - origin
    return RawTrace(requests=df, format_name=fmt, row_label="line", notes=notes(into, df))


def notes(into: Requests, df: pd.DataFrame) -> tuple[str, ...]:
    out = ["arrival_s is seconds since the first request arrived (SGLang's clock)"]
    if "cached_tokens" in df:
        out.append("cached_tokens are SGLang's own prefix-cache hits per request "
                   "(meta_info.cached_tokens): the replay is compared with them")
    if into.cut_ids:
        out.append(f"{into.cut_ids} request(s) have their input_ids cut by the log (level 2 "
                   "keeps 2048 ids) or not matching prompt_tokens: they keep their lengths "
                   "but no token ids (log at level 3 for every id)")
    if into.no_ids:
        out.append(f"{into.no_ids} request(s) have no input_ids in the log (levels 0 and 1 "
                   "leave them out): lengths only, no prefix replay for them")
    if into.line_dated:
        out.append(f"{into.line_dated} request(s) are dated by the log line (whole seconds): "
                   "start SGLang with --enable-metrics for request_received_ts")
    return tuple(out) + unused_note(into.unused, len(into.rows), "fields")


def read_sglang_log(path: Path) -> RawTrace:
    """The finished requests of an SGLang request log (see the module docstring)."""
    into = Requests()
    received: dict[str, float] = {}
    for number_, line in text_lines(path):
        stamp = _TIME.search(line)
        when = _seconds(stamp)
        brace = line.find("{")
        if brace >= 0 and '"event": "request.' in line:
            _json_line(line[brace:], path, number_, when, received, into)
            continue
        if (m := _RECEIVE.search(line)) is not None:
            if when is not None:
                received.setdefault(m.group(1), when)
        elif (m := _FINISH.search(line)) is not None:
            obj, out = _text_finish(line, path, number_)
            row_of(obj, out, (path, "line", number_), received.get(m.group(1)), when, into)
    return table(into, path, "sglang-log")


def _json_line(text: str, path: Path, line: int, when: float | None,
               received: dict[str, float], into: Requests) -> None:
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TraceSchemaError(f"{path}: line {line}: the JSON after the time stamp does not "
                               f"parse ({str(exc)[:60]}); {FIX}") from exc
    event = record.get("event")
    stamp = _iso_seconds(record.get("timestamp")) or when
    rid = str(record.get("rid"))
    if event == "request.received" and stamp is not None:
        received.setdefault(rid, stamp)
    elif event == "request.finished":
        obj = record.get("obj") if isinstance(record.get("obj"), dict) else {}
        out = record.get("out") if isinstance(record.get("out"), dict) else {}
        row_of(obj, out, (path, "line", line), received.get(rid), stamp, into)


def _text_finish(line: str, path: Path, number_: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parts of a text `Finish:` line the reader needs: rid, cache_salt, input_ids and
    the `out` dict (a Python literal)."""
    obj: dict[str, Any] = {}
    if (m := _FINISH.search(line)) is not None:
        obj["rid"] = m.group(1)
    if (salt := re.search(r"\bcache_salt='([^']*)'", line)) is not None:
        obj["cache_salt"] = salt.group(1)
    if (ids := _IDS.search(line)) is not None:
        obj["input_ids"] = (["..."] if ids.group(2) else _literal(ids.group(1), path, number_,
                                                                   "input_ids"))
    start = line.rfind(_OUT)
    if start < 0:
        raise TraceSchemaError(f"{path}: line {number_}: a Finish line without 'out={{…}}'; "
                               f"{FIX}")
    text = line[start + len(_OUT) - 1:].rstrip()
    text = re.sub(r"(\[[^\[\]]*\]) \.\.\. \[[^\[\]]*\]", "['...']", text)
    out = _literal(text, path, number_, "out")
    return obj, out if isinstance(out, dict) else {}


def _literal(text: str, path: Path, line: int, field_: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise TraceSchemaError(f"{path}: line {line}, field '{field_}': cannot be read as the "
                               f"Python literal SGLang prints; {FIX}") from exc


def _seconds(m: re.Match[str] | None) -> float | None:
    if m is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    return moment.timestamp() + (float(f"0.{m.group(7)}") if m.group(7) else 0.0)


def _iso_seconds(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def is_sglang_request_log(head: str) -> bool:
    """Whether a log's head holds SGLang request lines."""
    return ("Finish: obj=" in head or "Receive: obj=" in head
            or '"event": "request.finished"' in head or '"event": "request.received"' in head)


FORMAT = TraceFormatSpec(
    name=TraceFormat.SGLANG_LOG,
    description="SGLang request log (`--log-requests`, level 2 or 3; text or JSON): ids, "
                "lengths, cached tokens",
    reader=read_sglang_log,
    row_label="line",
    text_head=is_sglang_request_log,
)
