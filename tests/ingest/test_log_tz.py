"""`--log-tz`: the zone a server log's zone-less times are read in (UTC unless it says).

vLLM writes "INFO 05-19 10:13:11" and SGLang "[2026-07-01 15:20:26 TP0]", neither with a
zone. Every expected shift below is the zone's offset on that date, worked out by hand.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES

from tests.conftest import run_cli
from yaotu_trace.commands.diagnose import diagnose
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError, ExitCode
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.ingest.telemetry.serverlog import log_zone

LOGS = FIXTURES / "serverlogs"
ISSUE_43295 = LOGS / "vllm_v1_issue43295.log"  # first line INFO 05-19 10:13:11
SGLANG_29853 = LOGS / "sglang_pr29853.log"  # first line [2026-07-01 15:20:26 TP0]


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _first_time(m: EngineMetrics) -> float:
    g = m.gauge("num_running")
    assert g is not None
    return float(g["time_s"].iloc[0])


@pytest.mark.parametrize(("zone", "shift_s"), [
    ("UTC", 0.0),
    ("Asia/Shanghai", -8 * 3600.0),  # CST, UTC+8 all year: 10:13:11 there is 02:13:11 UTC
    ("+08:00", -8 * 3600.0),
    ("+0800", -8 * 3600.0),
    ("-05:30", 5.5 * 3600.0),  # 10:13:11 at UTC-5:30 is 15:43:11 UTC
    ("America/New_York", 4 * 3600.0),  # 19 May is daylight time, EDT = UTC-4
])
def test_vllm_times_shift_by_the_zone_offset(zone: str, shift_s: float) -> None:
    m = read_metrics(ISSUE_43295, year=2025, zone=log_zone(zone))
    assert _first_time(m) == _utc("2025-05-19T10:13:11") + shift_s
    # the spacing of the lines does not change: 10 s apart
    times = m.gauge("num_running")["time_s"].tolist()  # type: ignore[index]
    assert [b - a for a, b in pairwise(times)] == [10.0] * 4


def test_sglang_times_shift_by_daylight_time_of_their_date() -> None:
    """[2026-07-01 15:20:26] in Europe/Berlin is CEST (UTC+2): 13:20:26 UTC; the same clock
    time in January would be CET (UTC+1)."""
    default = read_metrics(SGLANG_29853)
    berlin = read_metrics(SGLANG_29853, zone=log_zone("Europe/Berlin"))
    assert _first_time(default) == _utc("2026-07-01T15:20:26")
    assert _first_time(berlin) == _utc("2026-07-01T13:20:26")
    assert "read in Europe/Berlin (--log-tz)" in berlin.notes[0]
    assert "read in UTC (pass --log-tz for another zone)" in default.notes[0]


def test_notes_say_the_zone_and_where_the_year_came_from() -> None:
    m = read_metrics(ISSUE_43295, year=2025, zone=log_zone("+08:00"))
    assert "its times carry no zone and are read in +08:00 (--log-tz)" in m.notes[0]
    assert "vLLM's times carry no year: 2025 is taken from the trace" in m.notes[0]
    docker = read_metrics(LOGS / "vllm_v1_docker_tt3359.log")
    assert "2026 is taken from a date written in the log" in docker.notes[0]
    assert "read in UTC" in docker.notes[0]


@pytest.mark.parametrize("text", ["Mars/Base", "+25:00", "+08:75", "", "8", "../UTC",
                                  "/etc/localtime"])
def test_a_bad_zone_is_a_usage_error(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        log_zone(text)
    assert info.value.exit_code == ExitCode.USAGE
    assert str(info.value) == (
        f"--log-tz {text!r} is not a time zone; give an IANA name such as Asia/Shanghai or "
        "Europe/Berlin, or an offset from UTC such as +08:00")


def test_a_bad_zone_is_refused_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        diagnose(None, DiagnosisOptions(metrics=tmp_path / "absent.log", log_tz="Nowhere/Town"))


def test_cli_refuses_a_bad_zone_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["diagnose", "--metrics", str(ISSUE_43295), "--log-tz",
                              "Mars/Base"], capsys)
    assert code == ExitCode.USAGE and out == ""
    assert err.count("\n") == 1
    assert "Invalid value for '--log-tz': 'Mars/Base' is not a time zone" in err


def test_the_zone_survives_dating_the_log_by_the_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace on Unix time from 2025-05-19 02:13:11 UTC, which is 10:13:11 in Shanghai: read
    in Asia/Shanghai, issue 43295's log (10:13:11–10:13:51 local) lies on the trace, dated in
    the trace's year; read in UTC it is 8 h later, from another run, and refused."""
    start = _utc("2025-05-19T02:13:11")
    trace = tmp_path / "t.parquet"
    pd.DataFrame({"request_id": [f"r{i}" for i in range(5)],
                  "arrival_s": [start + 10.0 * i for i in range(5)],
                  "prompt_len": [100] * 5, "output_len": [10] * 5}).to_parquet(trace)
    base = ["diagnose", str(trace), "--metrics", str(ISSUE_43295), "-f", "json"]
    code, out, err = run_cli([*base, "--log-tz", "Asia/Shanghai"], capsys)
    assert code == ExitCode.OK, err
    notes = json.loads(out)["input"]["notes"]
    log_note = next(n for n in notes if "is an engine server log" in n)
    assert "read in Asia/Shanghai (--log-tz)" in log_note
    assert "2025 is taken from the trace" in log_note
    assert not any("cannot be matched in time" in n for n in notes)
    code, _, err = run_cli(base, capsys)
    assert code == ExitCode.INPUT and "they are from different runs" in err
