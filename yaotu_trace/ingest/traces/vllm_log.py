"""vLLM's request log: `vllm serve --enable-log-requests [--enable-log-outputs]` with
`--log-level DEBUG`, the lines of `RequestLogger` (`vllm/entrypoints/.../request_logger.py`).

Lines read (anywhere in a line, so process and Docker prefixes are fine; plain or compressed):

- `Request ID details: prompt: '…', prompt_token_ids: [...], prompt_embeds shape: …` (DEBUG,
  vLLM ≥ 0.11) or `Received request ID: prompt: '…', params: …, prompt_token_ids: [...], …`
  (one INFO line, older releases): the prompt's token ids → `prompt_tokens`, `prompt_len`;
- `Received request ID: …` (INFO): the arrival → `arrival_s`;
- `Generated response ID[ (streaming delta)] details: output_token_ids: [...]` (DEBUG): the
  output ids → `output_tokens`, `output_len` (a streamed request's deltas are joined);
- `Generated response ID[ (streaming complete)]: output: …, finish_reason: R` (INFO): the
  end → `finish_s`; R `abort` → `status` aborted.

Times are the log's, `MM-DD hh:mm:ss` without year or zone and in whole seconds (vLLM's
`%m-%d %H:%M:%S`): `arrival_s` is seconds since the first request arrived, a month that goes
back starts the next year. vLLM's per-step lines (`--enable-logging-iteration-details`) in the
same log are the trace's step log (`serverlog.server_log_steps`, on the same clock); every other
line (stats, start-up, access log) is counted in a note.
A log written at INFO has no token ids: the reader refuses it, naming `--log-level DEBUG`. A
request with no output line gets `output_len` 0 and the notes count such requests.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import id_list, text_lines

if TYPE_CHECKING:
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace

FIX: Final = "pass the log vLLM wrote with --enable-log-requests --log-level DEBUG"
_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) "
                   r"(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_DETAILS = re.compile(r"\bRequest (\S+) details: prompt: ")
_RECEIVED = re.compile(r"\bReceived request (\S+?): ")
_OUT_IDS = re.compile(r"\bGenerated response (\S+?)( \(streaming (?:delta|complete)\))? "
                      r"details: output_token_ids: (.*)$")
_OUT_END = re.compile(r"\bGenerated response (\S+?)( \(streaming (?:delta|complete)\))?: "
                      r"output: .*, finish_reason: (\S+)\s*$")
_IDS_KEY = ", prompt_token_ids: ["
_RECEIVED_HEAD = re.compile(r"\bReceived request \S+: (?:prompt|params): ")
YEAR: Final = 2004  # a leap year: vLLM's lines carry none, only the times between them count
# vLLM's per-step lines (`--enable-logging-iteration-details`): the trace's step log.
ITERATION_LINES: Final = "engine step lines (read as the step log)"


@dataclass(slots=True)
class _Request:
    line: int
    arrival: float | None = None
    prompt: list[int] | None = None
    output: list[int] | None = None
    finish: float | None = None
    reason: str | None = None


@dataclass(slots=True)
class _Clock:
    """`MM-DD hh:mm:ss` to seconds, a month that goes back starting the next year."""

    year: int = YEAR
    last_month: int = 0

    def seconds(self, m: re.Match[str]) -> float | None:
        month, day = int(m.group(1)), int(m.group(2))
        if month < self.last_month:
            self.year += 1
        self.last_month = month
        try:
            moment = datetime(self.year, month, day, int(m.group(3)), int(m.group(4)),
                              int(m.group(5)), tzinfo=UTC)
        except ValueError:
            return None
        fraction = m.group(6)
        return moment.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


@dataclass(slots=True)
class _Read:
    requests: dict[str, _Request] = field(default_factory=dict)
    other: Counter[str] = field(default_factory=Counter)

    def get(self, rid: str, line: int) -> _Request:
        req = self.requests.get(rid)
        if req is None:
            req = self.requests[rid] = _Request(line=line)
        return req


def read_vllm_log(path: Path) -> RawTrace:
    """Join each request's lines into one canonical row (see the module docstring)."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    read = _read(path)
    rows = [r for r in read.requests.values() if r.prompt is not None]
    if not rows:
        what = ("'Received request' lines but no prompt_token_ids: vLLM writes them at DEBUG"
                if read.requests else "no 'Received request' or 'Request … details' line")
        raise TraceSchemaError(f"{path}: {what}; {FIX}")
    times = [r.arrival for r in rows if r.arrival is not None]
    origin = min(times) if times else 0.0
    table = pd.DataFrame({
        "request_id": [k for k, r in read.requests.items() if r.prompt is not None],
        "arrival_s": [(r.arrival if r.arrival is not None else origin) - origin for r in rows],
        "prompt_len": [len(r.prompt or ()) for r in rows],
        "prompt_tokens": [r.prompt for r in rows],
        "output_len": [len(r.output or ()) for r in rows],
        "output_tokens": [r.output if r.output else None for r in rows],
        "finish_s": [None if r.finish is None else r.finish - origin for r in rows],
        "status": ["aborted" if r.reason == "abort" else "ok" for r in rows],
        SOURCE_ROW: [r.line for r in rows],
    })
    steps, steps_note = _steps(path, read, origin)
    return RawTrace(requests=table.dropna(axis=1, how="all"), format_name="vllm-log",
                    row_label="line", notes=_notes(read, rows), steps=steps,
                    steps_note=steps_note)


def _steps(path: Path, read: _Read, origin: float) -> tuple[pd.DataFrame | None, str | None]:
    """The engine's steps when the same log holds vLLM's iteration lines
    (`--enable-logging-iteration-details`; `serverlog.server_log_steps`), on the trace's clock
    (seconds since the first arrival)."""
    import pandas as pd

    from yaotu_trace.ingest.telemetry.serverlog import server_log_steps

    if not read.other.get(ITERATION_LINES):
        return None, None
    columns, notes = server_log_steps(path, year=YEAR)
    frame = pd.DataFrame(columns)
    frame["start_s"] -= origin
    frame["end_s"] -= origin
    return frame, "; ".join(notes) + "; on the trace's clock; --steps replaces them"


def _read(path: Path) -> _Read:
    read, clock = _Read(), _Clock()
    for line_no, line in text_lines(path):
        stamp = _TIME.search(line)
        kind = _line(line, line_no, path, read, clock, stamp)
        if kind is None:
            read.other[_other_kind(line)] += 1
    return read


def _line(line: str, number: int, path: Path, read: _Read, clock: _Clock,
          stamp: re.Match[str] | None) -> str | None:
    """Take one request line into `read`; None when the line is not one."""
    details = _DETAILS.search(line)
    received = _RECEIVED.search(line) if details is None else None
    if details is not None or (received is not None and _IDS_KEY in line):
        m = details or received
        assert m is not None
        req = read.get(m.group(1), number)
        start = line.rfind(_IDS_KEY)
        end = line.find("]", start + len(_IDS_KEY))
        if start < 0 or end < 0:
            raise TraceSchemaError(f"{path}: line {number}, field 'prompt_token_ids': the list "
                                   f"is cut or missing; {FIX}")
        req.prompt = id_list(line[start + len(_IDS_KEY) - 1:end + 1], path, "line", number,
                             "prompt_token_ids", FIX)
        if stamp is not None and (received is not None or req.arrival is None):
            req.arrival = clock.seconds(stamp)
        return "prompt"
    if received is not None:
        req = read.get(received.group(1), number)
        if stamp is not None:
            req.arrival = clock.seconds(stamp)
        return "arrival"
    out = _OUT_IDS.search(line)
    if out is not None:
        req = read.get(out.group(1), number)
        if out.group(3).strip() != "None":
            ids = id_list(out.group(3), path, "line", number, "output_token_ids", FIX)
            req.output = ids if out.group(2) is None else (req.output or []) + ids
        return "output"
    done = _OUT_END.search(line)
    if done is not None:
        if done.group(2) is None or "complete" in done.group(2):
            req = read.get(done.group(1), number)
            if stamp is not None:
                req.finish = clock.seconds(stamp)
            req.reason = done.group(3).rstrip(".")
        return "end"
    return None


def _other_kind(line: str) -> str:
    if "Iteration(" in line and "iteration elapsed time" in line:
        return ITERATION_LINES
    if "Avg prompt throughput" in line:
        return "engine stats lines"
    if '" 200' in line or "HTTP/1.1" in line:
        return "HTTP access lines"
    return "other lines"


def _notes(read: _Read, rows: list[_Request]) -> tuple[str, ...]:
    notes = ["arrival_s is seconds since the first request arrived: vLLM's log times are whole "
             "seconds without year or zone, so arrivals within a second keep the log's order"]
    no_out = sum(1 for r in rows if r.output is None)
    if no_out:
        notes.append(f"{no_out} of {len(rows)} requests have no 'Generated response … "
                     "output_token_ids' line (vLLM logs outputs with --enable-log-outputs at "
                     "DEBUG): their output_len is 0, not their true length")
    skipped = len(read.requests) - len(rows)
    if skipped:
        notes.append(f"{skipped} request(s) with output lines but no prompt_token_ids line are "
                     "left out (the log starts after they arrived)")
    unused = Counter({k: n for k, n in read.other.items() if k != ITERATION_LINES})
    if unused:
        shown = ", ".join(f"{n} {k}" for k, n in unused.most_common())
        notes.append(f"lines that are not request lines are not used: {shown}")
    return tuple(notes)


def _is_vllm_request_log(head: str) -> bool:
    # A log of INFO lines only (no ids) is claimed too, so the reader can name the level.
    return " details: prompt: " in head or _RECEIVED_HEAD.search(head) is not None


FORMAT = TraceFormatSpec(
    name=TraceFormat.VLLM_LOG,
    description="vLLM request log (`--enable-log-requests`, DEBUG): prompt and output token ids",
    reader=read_vllm_log,
    row_label="line",
    text_head=_is_vllm_request_log,
)
