"""Reading an engine's own server log (vLLM, SGLang) as `--metrics` telemetry.

Most users who want a diagnosis have the engine's log, not a Prometheus export. The log's
periodic lines carry the same gauges the `/metrics` endpoint exports, so each recognised line
becomes samples under the engine's Prometheus name (engines.md §1.9, §2.7), and the axes read
them through `EngineMetrics` like any export. Quantities with no Prometheus name are kept
under a `log:` name (`log:prefix_cache_hit_rate`, `log:gpu_kv_cache_size_tokens`).

Lines read (anywhere in the line, so Docker and process prefixes are fine):

- vLLM's `--enable-logging-iteration-details` line, one per step ("Iteration(N): … context
  tokens, … generation tokens, iteration elapsed time: … ms, GPU KV cache usage: X%"): its KV
  usage as the gauge, and as `--steps` the engine's step log (`server_log_steps`);
- vLLM: the periodic "Avg prompt throughput: …, Running: N reqs, Waiting|Pending: N reqs,
  [Swapped: N reqs,] GPU KV cache usage: X%[, Prefix cache hit rate: Y%]" (V1 with
  "Engine 000:", V0 without), start-up "GPU KV cache size: N tokens" and "Maximum
  concurrency for N tokens per request: Xx", and the V0 preemption warning's
  `total_num_cumulative_preemption=N`;
- SGLang: "Prefill batch[.,] #new-seq: …, #new-token: …, #cached-token: …, token usage: …,
  #running-req: …, #queue-req: …", "Decode batch[.,] #running-req: …, #token: …, token
  usage: …, gen throughput (token/s): …, #queue-req: …", the start-up
  `max_total_num_tokens=… max_running_requests=…`, and "Retract requests. #retracted_reqs: N"
  (summed into `sglang:num_retracted_requests_total`, SGLang's preemption).

Per-batch SGLang `#new-token` and `#cached-token` are summed into the counters
`sglang:prompt_tokens_total` (new + cached) and `sglang:cached_tokens_total`, from zero at the
first batch. Start-up values hold for the whole process, so they are repeated at the first and
last periodic sample (the telemetry is cut to the trace's time range later). Lines stamp
whole seconds; of several in one second, the last stands for that second.

Times: vLLM writes "INFO 05-14 10:32:07", without year or zone; SGLang "[2025-05-14 10:32:07]",
without zone. The year is the caller's (the trace's), else one written in the file itself (a
Docker timestamp, an SGLang line), else a fixed leap year (`NO_YEAR`); a month that goes back
starts the next year. The times are read in the caller's zone (`--log-tz`: an IANA name or a
UTC offset, `log_zone`), UTC by default, and the notes say which zone and where the year came
from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from itertools import pairwise
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from yaotu_trace.catalog.units import MAX_COUNT
from yaotu_trace.data.values import TIME_LIMIT_S
from yaotu_trace.errors import ConfigError, TraceReadError

Row = tuple[float, str, str, float]

# Bytes read to decide whether a file is a server log.
SNIFF_BYTES: Final = 256 * 1024
EXPECTED: Final = (
    "a vLLM 'Avg prompt throughput: … Running: N reqs, Waiting: N reqs, GPU KV cache usage: "
    "X%' line, 'GPU KV cache size: N tokens', 'total_num_cumulative_preemption=N', or an "
    "SGLang 'Prefill batch, #new-seq: …' / 'Decode batch, #running-req: …' line or "
    "'max_total_num_tokens=N', or LMCache's 'LMCache hit tokens: N, need to load: N'"
)

_VLLM_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) "
                        r"(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_SGLANG_TIME = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"
                          r"((?: [A-Z]+\d+)*)\]")
_FILE_YEAR = re.compile(r"\b((?:19|20)\d\d)-[01]\d-[0-3]\d[T ]\d\d:\d\d")
_VLLM_STATS = re.compile(r"(?:Engine (\d+): )?(Avg prompt throughput: .*)")
_SGLANG_BATCH = re.compile(r"\b(Prefill|Decode) batch[.,] (.*)")
_KV_SIZE = re.compile(r"\b[A-Z]+ KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_PREEMPTION = re.compile(r"total_num_cumulative_preemption=(\d+)")
_SGLANG_POOL = re.compile(r"\bmax_total_num_tokens=(\d+)")
_SGLANG_MAX_RUNNING = re.compile(r"\bmax_running_requests=(\d+)")
_SGLANG_RETRACT = re.compile(r"Retract requests\. #retracted_reqs: (\d+)")
_KV_TRANSFER = re.compile(r"KV Transfer metrics: (.*)")
# LMCache's lookup line, per request (lmcache 0.5.6 integration/vllm/vllm_v1_adapter.py,
# `get_num_new_matched_tokens`; older ones leave out the engine's computed tokens). "but need to
# load: L < min_retrieve" means nothing is loaded.
_LMCACHE = re.compile(r"Reqid: (\S+?), Total tokens (\d+), (?:Inference Engine computed tokens: "
                      r"(\d+), )?LMCache hit tokens: (\d+), (but )?need to load: (-?\d+)")
_LMCACHE_NAMES: Final = ("log:lmcache_prompt_tokens_total",
                         "log:lmcache_engine_computed_tokens_total",
                         "log:lmcache_hit_tokens_total", "log:lmcache_load_tokens_total")
_RANK = re.compile(r"([A-Z]+)(\d+)")
_OFFSET = re.compile(r"(?:UTC|GMT)?([+-])(\d\d):?(\d\d)")
# vLLM's `--enable-logging-iteration-details` line, one per engine step
# (`vllm/v1/metrics/loggers.py::_log_iteration_details`).
_ITERATION = re.compile(
    r"(?:Engine (\d+): )?Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, "
    r"(\d+) generation requests, (\d+) generation tokens, iteration elapsed time: "
    r"([\d.]+) ms( \(dummy\))?, (?:[A-Z]+ )?KV cache usage: ([\d.]+)%")
# The iteration line first: a log that has them holds one per step, most of its lines.
_ANY = (_ITERATION, _VLLM_STATS, _SGLANG_BATCH, _KV_SIZE, _CONCURRENCY, _PREEMPTION,
        _SGLANG_POOL, _SGLANG_MAX_RUNNING, _SGLANG_RETRACT, _KV_TRANSFER, _LMCACHE)

# Stats-line key → (metric name, scale); "%" values are read as fractions.
_VLLM_KEYS: Final = {
    "Avg prompt throughput": ("log:avg_prompt_throughput_tokens_per_s", 1.0),
    "Avg generation throughput": ("log:avg_generation_throughput_tokens_per_s", 1.0),
    "Running": ("vllm:num_requests_running", 1.0),
    "Waiting": ("vllm:num_requests_waiting", 1.0),
    "Pending": ("vllm:num_requests_waiting", 1.0),
    "Swapped": ("vllm:num_requests_swapped", 1.0),
    "Prefix cache hit rate": ("log:prefix_cache_hit_rate", 0.01),
    "External prefix cache hit rate": ("log:external_prefix_cache_hit_rate", 0.01),
}
# vLLM names the KV pool after its device ("GPU", "CPU", "XPU", "TPU" KV cache usage); V0 wrote
# "GPU KV cache usage" and "CPU KV cache usage" together, the second its swap space.
_DEVICE_KV = re.compile(r"^([A-Z]+) KV cache usage$")
# The KV connector's interval line (`KVConnectorLogging`): count, mean time and size.
_KV_TRANSFER_KEYS: Final = {
    "Num successful transfers": "log:kv_transfers_total",
    "Avg xfer time (ms)": "log:kv_transfer_ms_total",
    "Avg MB per transfer": "log:kv_transfer_mb_total",
}
_SGLANG_KEYS: Final = {
    "#running-req": ("sglang:num_running_reqs", 1.0),
    "#queue-req": ("sglang:num_queue_reqs", 1.0),
    "token usage": ("sglang:token_usage", 1.0),
    "full token usage": ("sglang:token_usage", 1.0),
    "#token": ("sglang:num_used_tokens", 1.0),
    "#full token": ("sglang:num_used_tokens", 1.0),
    "gen throughput (token/s)": ("sglang:gen_throughput", 1.0),
    "input throughput (token/s)": ("log:avg_prompt_throughput_tokens_per_s", 1.0),
    "cache hit rate": ("sglang:cache_hit_rate", 0.01),
    "#new-token": ("log:batch_new_tokens", 1.0),
    "#cached-token": ("log:batch_cached_tokens", 1.0),
}


@dataclass(slots=True)
class _Read:
    """What reading the log collects."""

    rows: list[Row] = field(default_factory=list)
    config: list[Row] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    preemptions: list[Row] = field(default_factory=list)
    prompt_total: float = 0.0
    cached_total: float = 0.0
    batch_times: list[float] = field(default_factory=list)
    retracted_total: float = 0.0
    undated: bool = False  # a line with vLLM's time, which has no year
    json_lines: int = 0  # lines written by a JSON log formatter
    json_untimed: int = 0  # of those, lines whose record has no time field
    # vLLM V1 per-interval parts, emitted at the end: (time_s, engine, waiting, deferred,
    # preemptions), None where the line leaves a part out.
    intervals: list[tuple[float, str, float, float | None, float | None]] = field(
        default_factory=list)
    devices: set[str] = field(default_factory=set)
    transfers: dict[str, float] = field(default_factory=dict)
    transfer_rows: list[Row] = field(default_factory=list)  # their running totals
    # LMCache's lookup lines: request → (time_s, prompt, engine computed or None, hit, load,
    # skipped below min_retrieve); a request looked up again keeps its last line.
    lmcache: dict[str, tuple[float, int, int | None, int, int, bool]] = field(
        default_factory=dict)
    lmcache_lines: int = 0
    # vLLM's iteration lines: (time s, its resolution s, engine, index, context requests,
    # context tokens, generation requests, generation tokens, elapsed ms, KV usage share).
    iterations: list[tuple[float, float, str, int, int, int, int, int, float, float]] = field(
        default_factory=list)
    iteration_lines: list[int] = field(default_factory=list)  # their line numbers
    resolution_s: float = 1.0  # of the line being read: its time's last digit
    line: int = 0  # the number of the line being read
    # Parts of the lines read that no series takes: key → (lines, sum of its values).
    unread: dict[str, tuple[int, float]] = field(default_factory=dict)

    def skip(self, key: str, value: float = 0.0) -> None:
        lines, total = self.unread.get(key, (0, 0.0))
        self.unread[key] = (lines + 1, total + value)

    def seen(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            yield from enumerate(fh, start=1)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc}); check the file") \
            from exc


# The year of a log whose lines carry none when neither the trace nor the file gives one: a
# leap year (a line of 02-29 reads) on the Unix clock (telemetry.UNIX_CLOCK_S, 2001-09-09 on).
NO_YEAR = 2004


def is_server_log(path: Path) -> bool:
    """Whether the file's first `SNIFF_BYTES` hold a line this reader knows."""
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    return any(p.search(head) for p in _ANY)


def _file_year(path: Path) -> tuple[int, str]:
    """A year written in the file itself and where it came from, else `NO_YEAR` and "": never
    the file's modification time, which changes when the file is copied (the same log must
    give the same numbers)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        head = ""
    found = _FILE_YEAR.search(head)
    if found:
        return int(found.group(1)), "a date written in the log"
    return NO_YEAR, ""


def log_zone(text: str) -> tzinfo:
    """The zone of `--log-tz`: an IANA name (Asia/Shanghai, UTC) or a fixed offset from UTC
    (+08:00, -0530, UTC+08:00); a `ConfigError` naming the accepted forms otherwise."""
    value = text.strip()
    if (m := _OFFSET.fullmatch(value)) is not None:
        sign = 1 if m.group(1) == "+" else -1
        hours, minutes = int(m.group(2)), int(m.group(3))
        if hours < 24 and minutes < 60:
            offset = timedelta(hours=hours, minutes=minutes)
            return UTC if not offset else timezone(sign * offset, value)
    elif value and not value.startswith(("/", ".")) and ".." not in value:
        try:
            return ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise ConfigError(f"--log-tz {text!r} is not a time zone; give an IANA name such as "
                      "Asia/Shanghai or Europe/Berlin, or an offset from UTC such as +08:00")


def zone_name(zone: tzinfo) -> str:
    """How the notes name a zone: its IANA key, the offset as given, or UTC."""
    if zone is UTC:
        return "UTC"
    return str(getattr(zone, "key", None) or zone.tzname(None) or zone)


def _stamp(year: int, month: int, day: int, hms: tuple[str, str, str],
           fraction: str | None, zone: tzinfo = UTC) -> float | None:
    try:
        moment = datetime(year, month, day, int(hms[0]), int(hms[1]), int(hms[2]), tzinfo=zone)
    except ValueError:
        return None
    extra = float(f"0.{fraction}") if fraction else 0.0
    return moment.timestamp() + extra


def _number_parts(body: str, known: Callable[[str], bool]) -> dict[str, float] | None:
    """The `key: number` parts of a stats line ("%" and units dropped); None when a `known`
    key's value is not a number (a cut or garbled line)."""
    out: dict[str, float] = {}
    for part in body.split(","):
        key, sep, value = part.strip().partition(": ")
        if not sep or not known(key.strip()):
            continue
        value = value.strip().removeprefix("GPU: ")  # vLLM 0.6: "hit rate: GPU: X%, CPU: Y%"
        text = value.split(" ")[0].rstrip("%.")
        try:
            out[key.strip()] = float(text)
        except ValueError:
            return None
    return out


def _vllm_key(key: str) -> bool:
    return key in _VLLM_KEYS or key in ("Deferred", "Preemptions") or bool(_DEVICE_KV.match(key))


def _pairs(body: str, keys: dict[str, tuple[str, float]]) -> list[tuple[str, float]] | None:
    """The known `key: value` parts of a stats line; None when a value is not a number."""
    parts = _number_parts(body, keys.__contains__)
    if parts is None:
        return None
    return [(keys[k][0], v * keys[k][1]) for k, v in parts.items()]


def _vllm_stats(body: str, time_s: float, engine: str, read: _Read) -> bool:
    """A vLLM stats line's gauges, now; its per-interval parts (Deferred, Preemptions) are
    kept for `_finish`, which knows whether the log writes them at all."""
    parts = _number_parts(body, _vllm_key)
    if parts is None:
        return False
    for part in body.split(","):
        key, sep, _ = part.strip().partition(": ")
        if sep and not _vllm_key(key.strip()):
            read.skip(f"stats line '{key.strip()}'")
    rows = [(keys[0], v * keys[1]) for k, v in parts.items() if (keys := _VLLM_KEYS.get(k))]
    devices = {m.group(1): v for k, v in parts.items() if (m := _DEVICE_KV.match(k))}
    if "GPU" in devices and "CPU" in devices:  # V0: the CPU gauge is the swap space
        rows += [("vllm:kv_cache_usage_perc", devices["GPU"] / 100),
                 ("vllm:cpu_cache_usage_perc", devices["CPU"] / 100)]
    elif len(devices) == 1:
        (device, usage), = devices.items()
        read.devices.add(device)
        rows.append(("vllm:kv_cache_usage_perc", usage / 100))
    if not rows:
        return False
    read.rows.extend((time_s, name, engine, value) for name, value in rows)
    if "Waiting" in parts:
        read.intervals.append((time_s, engine, parts["Waiting"], parts.get("Deferred"),
                               parts.get("Preemptions")))
    read.seen("vLLM stats")
    return True


def _kv_transfer(body: str, time_s: float, read: _Read) -> bool:
    """`KV Transfer metrics: Num successful transfers=N, Avg xfer time (ms)=X, …`: summed
    into counters of transfers, their milliseconds and their MB."""
    found: dict[str, float] = {}
    other: dict[str, float] = {}
    for part in body.split(", "):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        try:
            number = float(value)
        except ValueError:
            if key.strip() in _KV_TRANSFER_KEYS:
                return False
            continue
        (found if key.strip() in _KV_TRANSFER_KEYS else other)[key.strip()] = number
    for key, number in other.items():
        read.skip(f"KV Transfer '{key}'", number)
    count = found.get("Num successful transfers")
    if count is None:
        return False
    if not read.transfers:
        for name in _KV_TRANSFER_KEYS.values():
            read.transfer_rows.append((time_s - 1e-3, name, "", 0.0))
    for key, name in _KV_TRANSFER_KEYS.items():
        add = count if key == "Num successful transfers" else count * found.get(key, 0.0)
        read.transfers[name] = read.transfers.get(name, 0.0) + add
        read.transfer_rows.append((time_s, name, "", read.transfers[name]))
    read.seen("KV transfer")
    return True


# The fields a JSON log formatter writes the message and the time under (python-json-logger
# and the logging-config examples vLLM documents).
_JSON_MESSAGE: Final = ("message", "msg")
_JSON_TIME: Final = ("asctime", "timestamp", "time", "@timestamp")


def _json_record(line: str, zone: tzinfo) -> tuple[str, float | None] | None:
    """(message, time_s or None) of a line a JSON log formatter wrote; None when the line is
    not such a record. `asctime` ("2026-12-03 10:15:00,123") is read in `zone`; an ISO time
    with an offset keeps its own."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    message = next((record[k] for k in _JSON_MESSAGE if isinstance(record.get(k), str)), None)
    if message is None:
        return None
    raw = next((record[k] for k in _JSON_TIME if record.get(k) not in (None, "")), None)
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return message, float(raw) if raw < 1e11 else float(raw) / 1e3
    try:
        moment = datetime.fromisoformat(str(raw).replace(",", ".")) if raw is not None else None
    except ValueError:
        moment = None
    if moment is None:
        return message, None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return message, moment.timestamp()


def read_server_log(path: Path, *, year: int | None = None, zone: tzinfo | None = None
                    ) -> tuple[list[Row], list[str], int | None, tuple[tuple[str, int], ...]]:
    """The log's samples as (time_s, metric, labels, value) rows, the notes on them, the
    year given to its year-less times (None when it has none), and the requests its LMCache
    lookup lines name, (request id, total tokens) each; `zone` is the zone its zone-less times
    are read in (`log_zone`; None: UTC)."""
    read, base_year, year_from, zone = _scan(path, year, zone)
    rows, notes, log_year = _finish(path, read, base_year, year_from, zone)
    requests = tuple((rid, int(v[1])) for rid, v in read.lmcache.items())
    return rows, notes, log_year, requests


def _scan(path: Path, year: int | None, zone: tzinfo | None
          ) -> tuple[_Read, int, str, tzinfo]:
    """Every recognised line of the log read into a `_Read`, with the year its year-less
    times were given, where that year came from, and the zone they were read in."""
    zone = UTC if zone is None else zone
    if year is not None:
        base_year, year_from = year, "the trace"
    else:
        base_year, year_from = _file_year(path)
    read = _Read()
    vllm_year, last_month = base_year, 0
    for number, line in _lines(path):
        if not any(p.search(line) for p in _ANY):
            continue
        read.line = number
        time_s: float | None = None
        labels = ""
        if line.lstrip().startswith("{") and (record := _json_record(line, zone)) is not None:
            line, time_s = record
            read.json_lines += 1
            if time_s is None:
                read.json_untimed += 1
                read.bad.append(number)
            else:
                read.resolution_s = 1e-3
                if not _read_line(line, time_s, labels, read):
                    read.bad.append(number)
            continue
        sglang = _SGLANG_TIME.search(line)
        vllm = _VLLM_TIME.search(line)
        if sglang is not None and (vllm is None or sglang.start() < vllm.start()):
            g = sglang.groups()
            ranks = dict(_RANK.findall(g[7] or ""))
            if any(ranks.get(k, "0") != "0" for k in ("TP", "PP", "EP", "CP")):
                continue  # the same batch as rank 0 logs it
            labels = f"dp={ranks['DP']}" if "DP" in ranks else ""
            time_s = _stamp(int(g[0]), int(g[1]), int(g[2]), (g[3], g[4], g[5]), g[6], zone)
            read.resolution_s = 10.0 ** -len(g[6]) if g[6] else 1.0
        elif vllm is not None:
            g = vllm.groups()
            month = int(g[0])
            if last_month and month < last_month:
                vllm_year += 1  # the log ran over a new year
            last_month = month
            read.undated = True
            time_s = _stamp(vllm_year, month, int(g[1]), (g[2], g[3], g[4]), g[5], zone)
            read.resolution_s = 10.0 ** -len(g[5]) if g[5] else 1.0
        if time_s is None:
            read.bad.append(number)
            continue
        if not _read_line(line, time_s, labels, read):
            read.bad.append(number)
    return read, base_year, year_from, zone


def _read_line(line: str, time_s: float, labels: str, read: _Read) -> bool:
    """Add the line's samples; False when it is a stats line that cannot be read."""
    if (m := _ITERATION.search(line)) is not None:
        g = m.groups()
        if g[7] is None:  # a data-parallel dummy step computes nothing
            read.iteration_lines.append(read.line)
            read.iterations.append((time_s, read.resolution_s, g[0] or "0", int(g[1]),
                                    int(g[2]), int(g[3]), int(g[4]), int(g[5]), float(g[6]),
                                    float(g[8]) / 100.0))
        read.seen("iteration")
        return True
    if (m := _VLLM_STATS.search(line)) is not None:
        engine = f"engine={int(m.group(1))}" if m.group(1) else "engine=0"
        return _vllm_stats(m.group(2), time_s, engine, read)
    if (m := _KV_TRANSFER.search(line)) is not None:
        return _kv_transfer(m.group(1), time_s, read)
    if (m := _LMCACHE.search(line)) is not None:
        computed = None if m.group(3) is None else int(m.group(3))
        skipped = m.group(5) is not None
        load = 0 if skipped else max(int(m.group(6)), 0)
        read.lmcache[m.group(1)] = (time_s, int(m.group(2)), computed, int(m.group(4)), load,
                                    skipped)
        read.lmcache_lines += 1
        read.seen("LMCache lookup")
        return True
    if (m := _SGLANG_BATCH.search(line)) is not None:
        pairs = _pairs(m.group(2), _SGLANG_KEYS)
        if not pairs:
            return False
        read.rows.extend((time_s, name, labels, value) for name, value in pairs)
        if m.group(1) == "Prefill":
            found = dict(pairs)
            new = found.get("log:batch_new_tokens", 0.0)
            cached = found.get("log:batch_cached_tokens", 0.0)
            if not read.batch_times:
                read.rows.append((time_s - 1e-3, "sglang:prompt_tokens_total", labels, 0.0))
                read.rows.append((time_s - 1e-3, "sglang:cached_tokens_total", labels, 0.0))
            read.batch_times.append(time_s)
            read.prompt_total += new + cached
            read.cached_total += cached
            read.rows.append((time_s, "sglang:prompt_tokens_total", labels, read.prompt_total))
            read.rows.append((time_s, "sglang:cached_tokens_total", labels, read.cached_total))
        read.seen(f"SGLang {m.group(1).lower()} batch")
        return True
    found_any = False
    if (m := _KV_SIZE.search(line)) is not None:
        read.config.append((time_s, "log:gpu_kv_cache_size_tokens", "",
                            float(m.group(1).replace(",", ""))))
        found_any = True
    if (m := _CONCURRENCY.search(line)) is not None:
        read.config.append((time_s, "log:max_concurrency", "", float(m.group(2))))
        found_any = True
    if (m := _SGLANG_POOL.search(line)) is not None:
        read.config.append((time_s, "sglang:max_total_num_tokens", labels, float(m.group(1))))
        found_any = True
    if (m := _SGLANG_MAX_RUNNING.search(line)) is not None:
        read.config.append((time_s, "log:max_running_requests", labels, float(m.group(1))))
        found_any = True
    if found_any:
        read.seen("start-up")
    if (m := _SGLANG_RETRACT.search(line)) is not None:
        if not read.retracted_total:
            read.preemptions.append((time_s - 1e-3, "sglang:num_retracted_requests_total",
                                     labels, 0.0))
        read.retracted_total += float(m.group(1))
        read.preemptions.append((time_s, "sglang:num_retracted_requests_total", labels,
                                 read.retracted_total))
        read.seen("SGLang retraction")
        found_any = True
    if (m := _PREEMPTION.search(line)) is not None:
        read.preemptions.append((time_s, "vllm:num_preemptions_total", "", float(m.group(1))))
        read.seen("preemption warning")
        found_any = True
    return found_any


def _interval_rows(read: _Read) -> list[Row]:
    """vLLM V1's per-interval parts as series, where the log writes them at all: Preemptions
    (the interval's count, left out when 0) summed into `vllm:num_preemptions_total` from 0
    before the first stats line; Deferred (left out when 0) and the rest of Waiting, which
    counts both, as `vllm:num_requests_waiting_by_reason`."""
    rows: list[Row] = []
    preempts = any(p is not None for *_, p in read.intervals)
    deferred = any(d is not None for *_, d, _ in read.intervals)
    totals: dict[str, float] = {}
    for time_s, engine, waiting, defer, preempted in read.intervals:
        if preempts:
            if engine not in totals:
                rows.append((time_s - 1e-3, "vllm:num_preemptions_total", engine, 0.0))
            totals[engine] = totals.get(engine, 0.0) + (preempted or 0.0)
            rows.append((time_s, "vllm:num_preemptions_total", engine, totals[engine]))
        if deferred:
            later = defer or 0.0
            name = "vllm:num_requests_waiting_by_reason"
            rows.append((time_s, name, f"{engine},reason=deferred", later))
            rows.append((time_s, name, f"{engine},reason=capacity", max(waiting - later, 0.0)))
    return rows


def _lmcache_rows(read: _Read) -> list[Row]:
    """LMCache's lookups, the last one of each request, summed in time order into counters of
    prompt tokens, the engine's own hits (when the lines give them), LMCache's hits from token 0
    and the tokens it loads; each from 0 just before the first."""
    if not read.lmcache:
        return []
    lines = sorted(read.lmcache.values(), key=lambda v: v[0])
    with_computed = any(v[2] is not None for v in lines)
    names = [n for n in _LMCACHE_NAMES
             if with_computed or n != "log:lmcache_engine_computed_tokens_total"]
    rows: list[Row] = [(lines[0][0] - 1e-3, name, "", 0.0) for name in names]
    totals = dict.fromkeys(names, 0.0)
    for time_s, prompt, computed, hit, load, _ in lines:
        parts = dict(zip(_LMCACHE_NAMES, (prompt, computed or 0, hit, load), strict=True))
        for name in names:
            totals[name] += parts[name]
            rows.append((time_s, name, "", totals[name]))
    return rows


def _lmcache_note(read: _Read) -> str:
    skipped = sum(1 for v in read.lmcache.values() if v[5])
    again = read.lmcache_lines - len(read.lmcache)
    return (f"LMCache's 'LMCache hit tokens: …, need to load: …' lines are summed over "
            f"{len(read.lmcache):,} request(s) into log:lmcache_* counters, each request's last "
            f"lookup ({again:,} earlier lookup(s) of the same requests left out"
            + (f"; {skipped:,} below min_retrieve load nothing" if skipped else "") + ")")


def _interval_notes(read: _Read) -> list[str]:
    notes = []
    if any(p is not None for *_, p in read.intervals):
        total = sum(p or 0.0 for *_, p in read.intervals)
        notes.append(f"vLLM's per-interval 'Preemptions: N' parts are summed into "
                     f"vllm:num_preemptions_total ({total:.0f} over {len(read.intervals)} stats "
                     "line(s); a line without the part had none)")
    if any(d is not None for *_, d, _ in read.intervals):
        notes.append("vLLM's 'Waiting' counts the deferred requests too (waiting on remote KV "
                     "or a grammar, not on capacity): 'Deferred: N' is read apart, as "
                     "vllm:num_requests_waiting_by_reason")
    return notes


def _finish(path: Path, read: _Read, year: int, year_from: str, zone: tzinfo
            ) -> tuple[list[Row], list[str], int | None]:
    if read.json_untimed and not read.rows:
        raise TraceReadError(
            f"{path}: {read.json_untimed} JSON log record(s) hold engine stats but no time "
            f"field ({', '.join(_JSON_TIME)}); add the time to the formatter's format, e.g. "
            "\"format\": \"%(asctime)s %(message)s\" in vLLM's --logging-config")
    if (not read.rows and not read.config and not read.preemptions and not read.transfer_rows
            and not read.lmcache and not read.iterations):
        skipped = f" ({len(read.bad)} such line(s) could not be read)" if read.bad else ""
        raise TraceReadError(f"{path}: no engine log line recognised{skipped}; --metrics "
                             f"takes a server log with {EXPECTED}")
    rows = list(read.rows)
    rows.extend(_interval_rows(read))
    # An iteration line's KV usage is the gauge after that step (`kv_cache_usage_perc`).
    rows.extend((t, "vllm:kv_cache_usage_perc", f"engine={int(engine)}", usage)
                for t, _, engine, *_, usage in read.iterations)
    vllm_preempted = [r for r in read.preemptions if r[1] == "vllm:num_preemptions_total"]
    if vllm_preempted:
        # Each warning is one preemption: just before the first, the count was one less.
        first = min(vllm_preempted)
        rows.append((first[0] - 1e-3, first[1], first[2], first[3] - 1.0))
    rows.extend(read.preemptions)
    rows.extend(read.transfer_rows)
    rows.extend(_lmcache_rows(read))
    periodic = sorted({r[0] for r in read.rows})
    for time_s, name, labels, value in read.config:
        rows.append((time_s, name, labels, value))
        later = [t for t in (periodic[:1] + periodic[-1:]) if t > time_s] if periodic else []
        rows.extend((t, name, labels, value) for t in sorted(set(later)))
    # Logs stamp whole seconds: of several lines in one second, the last holds the state at
    # its end (and a counter's total), as one scrape then would.
    last = {(t, name, labels): value for t, name, labels, value in rows}
    rows = [(t, name, labels, value) for (t, name, labels), value in last.items()]
    counts = ", ".join(f"{n} {what} line(s)" for what, n in sorted(read.counts.items()))
    year_note = (f"; vLLM's times carry no year: {year} is taken from {year_from}" if year_from
                 else f"; vLLM's times carry no year, and neither a trace nor the log gives one, "
                 f"so {year}: only the times between its lines are meaningful")
    how = ("read in UTC (pass --log-tz for another zone)" if zone is UTC
           else f"read in {zone_name(zone)} (--log-tz)")
    notes = [f"the metrics file {path} is an engine server log ({counts}); its times carry no "
             f"zone and are {how}{year_note if read.undated else ''}"]
    if read.devices - {"GPU"}:
        devices = ", ".join(sorted(read.devices))
        notes.append(f"vLLM names its KV pool after its device: the '{devices} KV cache usage' "
                     "of its stats lines is read as the KV pool's usage")
    notes.extend(_interval_notes(read))
    if read.unread:
        shown = "; ".join(
            f"{key} ({lines} line(s){', Σ ' + format(total, 'g') if 'Num ' in key else ''})"
            for key, (lines, total) in sorted(read.unread.items()))
        notes.append(f"parts of the lines read that no axis uses yet: {shown}")
    if read.batch_times:
        notes.append(f"SGLang prefill batches' #new-token and #cached-token are summed into "
                     f"prompt and cached token counters ({read.prompt_total:.0f} and "
                     f"{read.cached_total:.0f} tokens over {len(read.batch_times)} batch(es))")
    if read.lmcache:
        notes.append(_lmcache_note(read))
    if read.bad:
        notes.append(f"{len(read.bad)} engine log line(s) could not be read and were skipped "
                     f"(first: line {read.bad[0]})")
    return rows, notes, (year if read.undated else None)


# Step-log columns of vLLM's iteration lines.
_STEP_FIELDS: Final = ("instance", "start_s", "end_s", "prefill_tokens", "decode_tokens",
                       "num_running", "kv_usage")


def server_log_steps(path: Path, *, year: int | None = None, zone: tzinfo | None = None
                     ) -> tuple[dict[str, list[object]], list[str]]:
    """The engine's steps from vLLM's `--enable-logging-iteration-details` lines (`--steps`):
    step-log columns and the notes on them.

    Each line is one step after it ran: `prefill_tokens` its context tokens (prompt chunks),
    `decode_tokens` its generation tokens, `num_running` the requests it scheduled, `kv_usage`
    the pool's usage after it, its duration the logged elapsed time. A line's time is when the
    stats were logged, to its resolution (vLLM's default: the whole second); a step ends at
    the end of the step before it plus its own duration when that falls within its line's
    time, else at the nearest instant of that time (its start after an idle spell, its end
    when the steps before ran long: overlapping steps, as async scheduling runs them): steps
    back to back while the engine is busy, order and durations as vLLM logged them, placement
    within the second an estimate. Data-parallel dummy steps compute nothing and are left
    out.
    """
    read, _, year_from, zone = _scan(path, year, zone)
    if not read.iterations:
        raise TraceReadError(
            f"{path}: a server log without vLLM's 'Iteration(N): … context tokens, … "
            "generation tokens, iteration elapsed time: … ms' lines: start vLLM with "
            "--enable-logging-iteration-details to log every step, or give a step log")
    for number, (*_, ctx_tok, _, gen_tok, elapsed_ms, _usage) in zip(
            read.iteration_lines, read.iterations, strict=True):
        if elapsed_ms > 1000.0 * TIME_LIMIT_S or max(ctx_tok, gen_tok) > MAX_COUNT:
            raise TraceReadError(
                f"{path}: line {number}: a step of {elapsed_ms:g} ms, {ctx_tok:,} context and "
                f"{gen_tok:,} generation tokens is no engine's step; fix or remove the line")
    columns: dict[str, list[object]] = {name: [] for name in _STEP_FIELDS}
    last_end: dict[str, float] = {}
    placed_late = 0
    for t, res, engine, _, ctx_req, ctx_tok, gen_req, gen_tok, elapsed_ms, usage in (
            read.iterations):
        elapsed = elapsed_ms / 1000.0
        end = last_end.get(engine, -float("inf")) + elapsed
        if not t <= end < t + res:
            placed_late += end >= t + res
            end = min(max(end, t), t + res)
        last_end[engine] = end
        for name, value in zip(_STEP_FIELDS, (engine, end - elapsed, end, ctx_tok, gen_tok,
                                              ctx_req + gen_req, usage), strict=True):
            columns[name].append(value)
    by_engine: dict[str, list[int]] = {}
    for i in read.iterations:
        by_engine.setdefault(i[2], []).append(i[3])
    missing = sum(max(b - a - 1, 0) for indexes in by_engine.values()
                  for a, b in pairwise(indexes))
    resolution = min(i[1] for i in read.iterations)
    notes = [f"engine steps from vLLM's iteration lines in {path.name} "
             f"({len(read.iterations):,} steps; --enable-logging-iteration-details): context "
             "tokens as prefill_tokens, generation tokens as decode_tokens, the requests "
             "scheduled as num_running, the KV usage after each step; durations as logged, each "
             f"step placed after the one before within its line's time (resolution "
             f"{resolution:g} s), read in {zone_name(zone) if zone is not UTC else 'UTC'}"
             + (f", its year from {year_from}" if read.undated and year_from else "")]
    if placed_late:
        notes.append(f"{placed_late:,} step(s) logged before the steps ahead of them could "
                     "have ended (the engine's steps overlap, as async scheduling runs them, or "
                     "its clock jumped): placed at the end of their line's time, overlapping "
                     "the step before")
    if missing:
        notes.append(f"{missing:,} iteration number(s) missing between lines (lines lost or "
                     "filtered): their steps are not in the log")
    return columns, notes
