"""Reading Prometheus text exposition (what `curl .../metrics` prints) as `--metrics` telemetry.

Three shapes, all into the same long table as the JSON and CSV exports (`EngineMetrics`, whose
name mapping serves the vLLM `vllm:` and SGLang `sglang:` names alike):

- **one snapshot**: a saved `/metrics` body. Counters count since the engine started; where a
  counter or histogram has its `_created` sample (prometheus_client writes one per series, the
  Unix time the series began), a zero is placed at that time, so the snapshot's increase is
  dated: from the engine's start to the snapshot;
- **a file of snapshots**, each preceded by a line `# scrape TIME` (TIME in ISO 8601, UTC
  unless it names a zone, or Unix seconds), e.g. `# scrape 2025-05-14T10:32:07Z`;
- **a folder of snapshot files**, each dated by a time in its name (`20250514T103207Z.prom`,
  `2025-05-14T10:32:07Z.txt`, `1747218727.prom` in Unix seconds or `1747218727000` in ms) or
  by `# scrape` lines inside it.

A sample's own millisecond timestamp (`name{labels} value 1747218727000`), where written, is
its time and wins over the snapshot's. A file's modification time is never used: it says when
the file was copied, not when the engine was scraped. A single snapshot with no time at all is
read as one instant (time 0): its gauges are that instant and its counters totals, which the
notes say. Counter resets (an engine restart: a drop, or a new `_created` time) are counted as
Prometheus' `rate()` counts them, by `EngineMetrics`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from yaotu_trace.errors import TraceReadError

# What a reader hands `read_metrics`: rows (time_s, metric, labels, value) and notes.
Rows = list[tuple[float, str, str, float]]
Scrape = tuple[Rows, tuple[str, ...]]

# The extensions a text snapshot is looked for in (besides none at all).
SUFFIXES: Final = (".txt", ".prom", ".metrics", "")
SCRAPE_PREFIX: Final = "# scrape "
_HEAD_BYTES: Final = 65536

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE: Final = re.compile(
    rf'^({_NAME})\s*(\{{(?:[^"}}]|"(?:[^"\\]|\\.)*")*\}})?\s+(\S+)(?:\s+(-?\d+))?\s*$'
)
_LABEL: Final = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_ESCAPE: Final = re.compile(r"\\(.)")  # label values escape \\, \" and \n
_ISO_NAME: Final = re.compile(
    r"(\d{4})-?(\d{2})-?(\d{2})[T_ ]?(\d{2})[-:]?(\d{2})[-:]?(\d{2})(?:[.,](\d+))?"
)
_UNIX_NAME: Final = re.compile(r"(?<![\d.])(\d{13}|\d{10}(?:\.\d+)?)(?![\d])")
# The sample names a `_created` time dates (prometheus_client's counter and histogram parts).
_DATED_PARTS: Final = ("_total", "_count", "_sum")
_FIX: Final = ("write samples as name{label=\"v\"} value [timestamp_ms], as /metrics prints "
               "them")


@dataclass(slots=True)
class _Snapshot:
    """One scrape: its time (None when unknown) and its samples (name, labels, value, ms)."""

    time_s: float | None
    line: int
    samples: list[tuple[str, str, float, float | None]] = field(default_factory=list)


def looks_like_text(path: Path) -> bool:
    """Whether the file opens as text exposition: `# HELP`/`# TYPE`/`# scrape` lines or a
    `name{labels} value` sample before anything else."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    for raw in head.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(("# HELP ", "# TYPE ", SCRAPE_PREFIX.strip())):
            return True
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        return match is not None and _is_number(match.group(3))
    return False


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def is_scrape_folder(path: Path) -> bool:
    """Whether a folder holds text snapshots (the first file in name order opens as one)."""
    files = _snapshot_files(path)
    return bool(files) and looks_like_text(files[0])


def _snapshot_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir()
                  if p.is_file() and not p.name.startswith(".")
                  and p.suffix.lower() in SUFFIXES and p.name.lower() != "readme.md")


def time_in_name(name: str) -> float | None:
    """The Unix time a snapshot file's name gives (ISO-like UTC stamp, Unix s or ms)."""
    import pandas as pd

    iso = _ISO_NAME.search(name)
    if iso is not None:
        y, mo, d, h, mi, s, frac = iso.groups()
        stamp = pd.Timestamp(year=int(y), month=int(mo), day=int(d), hour=int(h),
                             minute=int(mi), second=int(s), tz="UTC")
        return stamp.timestamp() + (float(f"0.{frac}") if frac else 0.0)
    unix = _UNIX_NAME.search(name)
    if unix is not None:
        text = unix.group(1)
        return float(text) / 1000.0 if len(text) == 13 else float(text)
    return None


def _labels_key(labels: dict[str, str]) -> str:
    """Labels as the other exports key them: sorted `k=v` joined by commas."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _scrape_time(text: str, path: Path, number: int) -> float:
    """A `# scrape` line's time: Unix seconds, or ISO 8601 (UTC unless it names a zone)."""
    import pandas as pd

    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = pd.Timestamp(text)
    except (ValueError, TypeError):
        stamp = None
    if stamp is None or stamp is pd.NaT:
        raise TraceReadError(f"{path}: line {number}: {text!r} is neither Unix seconds nor an "
                             "ISO 8601 time; write e.g. # scrape 2025-05-14T10:32:07Z")
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return float(stamp.timestamp())


def _labels(text: str | None, path: Path, number: int) -> str:
    if not text:
        return ""
    body = text[1:-1]
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(body) and body[pos:].strip():
        match = _LABEL.match(body, pos)
        if match is None:
            raise TraceReadError(f"{path}: line {number}: cannot read the labels {text!r}; "
                                 "write them as {k=\"v\",...}")
        value = _ESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), match.group(2))
        labels[match.group(1)] = value
        pos = match.end()
    return _labels_key(labels)


def _parse(path: Path, name_time_s: float | None) -> list[_Snapshot]:
    """The file's snapshots in order; a malformed line is a one-line error with its number."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceReadError(f"{path}: not UTF-8 text ({exc.reason}); save the /metrics body "
                             "as it was served") from exc
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc}); check the file") \
            from exc
    snapshots = [_Snapshot(time_s=name_time_s, line=1)]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(SCRAPE_PREFIX):
            stamp = _scrape_time(line[len(SCRAPE_PREFIX):].strip(), path, number)
            if not math.isfinite(stamp):
                raise TraceReadError(f"{path}: line {number}: {line!r} is not a finite time; "
                                     "write e.g. # scrape 2025-05-14T10:32:07Z")
            if snapshots[-1].samples:
                snapshots.append(_Snapshot(time_s=stamp, line=number))
            else:
                snapshots[-1] = _Snapshot(time_s=stamp, line=number)
            continue
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise TraceReadError(f"{path}: line {number}: cannot read {line[:80]!r} as a "
                                 f"sample; {_FIX}")
        name, labels, value_text, ms = match.groups()
        try:
            value = float(value_text)
        except ValueError:
            raise TraceReadError(f"{path}: line {number}: the value {value_text!r} of {name} "
                                 f"is not a number; {_FIX}") from None
        snapshots[-1].samples.append(
            (name, _labels(labels, path, number), value, None if ms is None else int(ms) / 1e3)
        )
    return [s for s in snapshots if s.samples]


@dataclass(slots=True)
class _Rows:
    """The long table being built, with what the notes will say."""

    rows: Rows = field(default_factory=list)
    dated: int = 0
    restarts: int = 0
    # Per (sample name, labels): the time of its last scrape and its last `_created` time.
    last: dict[tuple[str, str], tuple[float, float | None]] = field(default_factory=dict)


def _add(snapshot: _Snapshot, time_s: float, out: _Rows, *, first_is_start: bool) -> None:
    created = {(name[: -len("_created")], labels): value
               for name, labels, value, _ in snapshot.samples if name.endswith("_created")}
    paired = {(base, labels) for name, labels, _, _ in snapshot.samples
              for base in [_base(name)] if base is not None and (base, labels) in created}
    for name, labels, value, ms in snapshot.samples:
        if name.endswith("_created") and (name[: -len("_created")], labels) in paired:
            continue  # a date, not a quantity: it has dated its series
        at = time_s if ms is None else ms
        base = _base(name)
        start = None if base is None else created.get((base, labels))
        if start is not None:
            before = out.last.get((name, labels))
            if before is None:
                if first_is_start and start < at:
                    out.rows.append((start, name, labels, 0.0))
                    out.dated += 1
            elif before[1] is not None and start != before[1] and before[0] < start < at:
                out.rows.append((start, name, labels, 0.0))  # restarted: zero again
                out.restarts += 1
        out.last[(name, labels)] = (at, start)
        out.rows.append((at, name, labels, value))


def _base(name: str) -> str | None:
    """The series name a `_created` sample dates, for a counter or histogram part."""
    return next((name[: -len(p)] for p in _DATED_PARTS if name.endswith(p)), None)


def _sorted(rows: Rows) -> Rows:
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def _when(time_s: float) -> str:
    import pandas as pd

    if time_s < 1e9:  # a clock that starts near zero, as the trace's may
        return f"{time_s:.1f} s"
    return pd.Timestamp(time_s, unit="s", tz="UTC").strftime("%Y-%m-%dT%H:%M:%SZ")


def _build(snapshots: list[tuple[_Snapshot, Path]], where: str) -> Scrape:
    out = _Rows()
    notes: list[str] = []
    if len(snapshots) == 1:
        snapshot, _ = snapshots[0]
        has_own = all(ms is not None for *_, ms in snapshot.samples)
        if snapshot.time_s is None and not has_own:
            _add(snapshot, 0.0, out, first_is_start=False)
            notes.append(f"the scrape {where} carries no time (no '{SCRAPE_PREFIX.strip()}' "
                         "line, no time in its name or its samples): its gauges are one "
                         "instant and its counters are totals since the engine started; "
                         f"write '{SCRAPE_PREFIX}2025-05-14T10:32:07Z' above it to date it")
        else:
            _add(snapshot, snapshot.time_s or 0.0, out, first_is_start=True)
            if out.dated:
                notes.append(f"the scrape {where} is one /metrics snapshot: its counters count "
                             f"from the engine's start, which {out.dated} series date by their "
                             "_created samples, so their increase covers the whole process "
                             "up to the snapshot")
            else:
                notes.append(f"the scrape {where} is one /metrics snapshot with no _created "
                             "samples: its gauges are one instant and its counters are totals "
                             "since the engine started")
        return _sorted(out.rows), tuple(notes)
    for snapshot, path in snapshots:
        if snapshot.time_s is None and any(ms is None for *_, ms in snapshot.samples):
            raise TraceReadError(
                f"{path}: line {snapshot.line}: this snapshot has no time; precede each "
                f"snapshot with a line such as '{SCRAPE_PREFIX}2025-05-14T10:32:07Z', or name "
                "each file by its time (20250514T103207Z.prom)"
            )
    ordered = sorted(snapshots, key=lambda s: (s[0].time_s or 0.0, s[0].line))
    for snapshot, _ in ordered:
        _add(snapshot, snapshot.time_s or 0.0, out, first_is_start=False)
    times = [s.time_s for s, _ in ordered if s.time_s is not None]
    span = f" from {_when(min(times))} to {_when(max(times))}" if times else ""
    notes.append(f"the scrapes {where} are {len(ordered)} /metrics snapshots{span}; counters "
                 "are read as increases between scrapes, a drop counted as a restart from zero "
                 "as Prometheus' rate() does")
    if out.restarts:
        notes.append(f"{where}: {out.restarts} series restarted between scrapes (a new "
                     "_created time): each counts again from zero at its new start")
    return _sorted(out.rows), tuple(notes)


def read_prom_text(path: Path) -> Scrape:
    """One file: a snapshot, or snapshots each preceded by `# scrape TIME`."""
    parsed = _parse(path, time_in_name(path.name))
    if not parsed:
        raise TraceReadError(f"{path}: the scrape holds no samples; save the /metrics body "
                             "of an engine started with metrics enabled")
    return _build([(s, path) for s in parsed], str(path))


def read_prom_folder(path: Path) -> Scrape:
    """A folder of snapshot files, each dated by its name or its `# scrape` lines."""
    snapshots: list[tuple[_Snapshot, Path]] = []
    for file in _snapshot_files(path):
        if not looks_like_text(file):
            raise TraceReadError(f"{file}: not a /metrics text snapshot, in the scrape folder "
                                 f"{path}; keep only the saved /metrics bodies there")
        snapshots.extend((s, file) for s in _parse(file, time_in_name(file.name)))
    if not snapshots:
        raise TraceReadError(f"{path}: the scrape folder holds no samples; save each "
                             "/metrics body as a file named by its time")
    return _build(snapshots, str(path))
