"""Pathological inputs: a clock whose span would size memory, and duplicate column names.

The commands that could once exhaust memory run in a child process under a 2 GiB address-space
cap, so that a regression fails here instead of taking the machine down.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from diag_factories import make_input, thresholds

from yaotu_trace.axes.pd_interference.network import busiest_window_sum
from yaotu_trace.axes.queueing import analyze_queueing
from yaotu_trace.axes.queueing.metrics import (
    MIN_GRID_WINDOWS,
    grid_limit,
    request_timing,
    windows_of,
)
from yaotu_trace.data.values import clock_gap
from yaotu_trace.errors import ExitCode
from yaotu_trace.profile.success import MAX_WINDOWS, window_width_s

MEMORY_CAP_BYTES = 2 * 2**30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def run_capped(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`trace ARGS` in a child process that cannot map more than 2 GiB."""
    return subprocess.run([sys.executable, "-m", "yaotu_trace", *args], cwd=cwd,
                          preexec_fn=_capped, capture_output=True, text=True, timeout=600,
                          env={"COLUMNS": "100", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
                          check=False)


def far_rows(far_s: float, n: int = 59, timed: bool = True) -> list[dict[str, object]]:
    """`n` requests a second apart from 0 s, then one at `far_s`; each served in 2 s."""
    rows: list[dict[str, object]] = []
    for t in [*map(float, range(n)), far_s]:
        row: dict[str, object] = {"arrival_s": t, "prompt_len": 100, "output_len": 20}
        if timed:
            row.update(scheduled_s=t + 0.5, first_token_s=t + 0.7, finish_s=t + 2.0)
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- the load grid follows the data -------------------------------------------------------


def test_grid_limit_is_the_floor_or_four_windows_per_request():
    assert grid_limit(60) == MIN_GRID_WINDOWS
    assert grid_limit(1_000_000) == 4_000_000


def test_windows_of_a_far_request_stay_within_the_limit_in_whole_window_multiples():
    inp = make_input({k: [r[k] for r in far_rows(1e7)]
                      for k in ("arrival_s", "prompt_len", "output_len", "finish_s")})
    timing = request_timing(inp, [])
    grid = windows_of(timing, 5.0)
    assert grid.count <= MIN_GRID_WINDOWS
    assert grid.width_s % 5.0 == 0 and grid.width_s > 5.0
    assert grid.t0_s + grid.count * grid.width_s >= 1e7 + 2.0  # the last finish is covered


def test_windows_of_a_short_trace_keep_window_s():
    inp = make_input({k: [r[k] for r in far_rows(100.0)]
                      for k in ("arrival_s", "prompt_len", "output_len", "finish_s")})
    grid = windows_of(request_timing(inp, []), 5.0)
    assert (grid.width_s, grid.count) == (5.0, 21)


def test_queueing_notes_the_widened_windows():
    columns = {k: [r[k] for r in far_rows(1e7)] for k in far_rows(0.0, 1)[0]}
    result = analyze_queueing(make_input(columns), thresholds())
    assert result.metrics.window_s > 5.0
    assert result.metrics.windows is None or result.metrics.windows <= MIN_GRID_WINDOWS
    assert any("load windows are" in n and "window_s 5 s" in n for n in result.notes)


def spread_rows(span_s: float, n: int = 60) -> list[dict[str, object]]:
    """`n` requests evenly over `span_s`, each served in 2 s."""
    return [{"arrival_s": t, "prompt_len": 100, "output_len": 20, "scheduled_s": t + 0.5,
             "first_token_s": t + 0.7, "finish_s": t + 2.0}
            for t in np.linspace(0.0, span_s, n).tolist()]


@pytest.mark.parametrize("command", ["diagnose", "report"])
@pytest.mark.parametrize("rows", [far_rows(1e7), spread_rows(9e11)], ids=["far", "spread"])
def test_a_long_span_runs_in_bounded_memory(command: str, rows: list[dict[str, object]],
                                            tmp_path: Path):
    # GIVEN 60 requests over 116 days (one far from the rest) or over 9e11 s (before: 1.8e11
    # windows of 5 s, a 1.31 TiB allocation and exit 4)
    write_jsonl(tmp_path / "t.jsonl", rows)
    out = "r.html" if command == "report" else "r.txt"
    # WHEN the command runs under a 2 GiB cap
    done = run_capped([command, "t.jsonl", "-o", out], tmp_path)
    # THEN it finishes, and diagnose says the windows were widened
    assert done.returncode == ExitCode.OK, done.stderr
    if command == "diagnose":
        assert "load windows are" in (tmp_path / out).read_text(encoding="utf-8")


def test_success_windows_of_a_long_span_are_whole_days_and_at_most_48():
    width = window_width_s(9e11)
    assert width % 86_400.0 == 0 and np.floor(9e11 / width) + 1 <= MAX_WINDOWS
    assert window_width_s(40 * 86_400.0) == 86_400.0  # within the choices: unchanged


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_the_success_section_of_a_long_span_runs_in_bounded_memory(command: str,
                                                                  tmp_path: Path):
    # Before: one success window a day over 9e11 s, 1e7 of them: 3.2 GiB and 3 minutes.
    rows = [{**r, "status": "error" if i % 3 == 0 else "ok"}
            for i, r in enumerate(spread_rows(9e11))]
    write_jsonl(tmp_path / "t.jsonl", rows)
    done = run_capped([command, "t.jsonl", "-o", "r.html"], tmp_path)
    assert done.returncode == ExitCode.OK, done.stderr


def test_the_busiest_window_is_summed_over_the_windows_that_hold_a_time():
    # 5 s windows from 0: {0, 1} hold 3, {6} holds 4 and the one at 1e11 s holds 8; the
    # 2e10 empty windows between them are never allocated.
    times = np.array([0.0, 1.0, 6.0, 1e11])
    assert busiest_window_sum(times, np.array([1.0, 2.0, 4.0, 8.0]), 5.0) == 8.0
    assert busiest_window_sum(times[:3], np.array([1.0, 2.0, 4.0]), 5.0) == 4.0
    assert busiest_window_sum(np.zeros(0), np.zeros(0), 5.0) == 0.0


# -- one trace, one clock -------------------------------------------------------------------


def test_clock_gap_names_the_first_value_on_the_smaller_side():
    arrival = np.array([5.0, 1.7e9, 0.0, 1.0])
    finish = np.array([6.0, 1.7e9 + 2, np.nan, 3.0])
    gap = clock_gap({"arrival_s": arrival, "finish_s": finish})
    assert gap is not None
    assert (gap.column, gap.pos, gap.after, gap.beyond) == ("arrival_s", 1, True, 2)
    assert gap.rest_s == 8.0  # 0–6 s on one side of the gap, 2 s on the other
    assert "one clock" in gap.message() and "54 years" in gap.message()


def test_clock_gap_before_the_others_and_ties_go_to_the_later_side():
    early = clock_gap({"arrival_s": np.array([1.7e9, 1.7e9 + 1, 0.0])})
    assert early is not None and (early.pos, early.after) == (2, False)
    tie = clock_gap({"arrival_s": np.array([0.0, 1.0, 1.7e9, 1.7e9 + 1])})
    assert tie is not None and (tie.pos, tie.after) == (2, True)


@pytest.mark.parametrize("times", [
    [0.0, 3600.0],  # two requests an hour apart
    [0.0, 1.0, 1e7],  # 116 days: under a year
    # two captures 1.5 years apart, each half a year long: a gap 3× their spans
    [0.0, 15_768_000.0, 63_072_000.0, 78_840_000.0],
], ids=["hour", "116-days", "two-captures"])
def test_clock_gap_accepts_long_silences_one_clock_can_have(times: list[float]):
    assert clock_gap({"arrival_s": np.array(times)}) is None


def test_clock_gap_refuses_two_requests_decades_apart():
    assert clock_gap({"arrival_s": np.array([0.0, 1.7e9])}) is not None


@pytest.mark.parametrize("far_s", [1.7e9, 9e11], ids=["epoch", "9e11"])
def test_an_epoch_arrival_among_relative_ones_is_refused(far_s: float, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]):
    # GIVEN 59 arrivals at 0–58 s and one in epoch seconds (or at 9e11 s)
    path = write_jsonl(tmp_path / "t.jsonl", far_rows(far_s, timed=False))
    # WHEN the trace is profiled
    code, out, err = run_cli(["analyze", str(path)], capsys)
    # THEN one line names the file, the line, the column and the fix
    assert code == ExitCode.INPUT and out == ""
    line = err.strip()
    assert "\n" not in line and line.startswith("error: ")
    for words in (str(path), "line 60", "column 'arrival_s'", "one clock", "drop the row"):
        assert words in line


@pytest.mark.parametrize("command", ["diagnose", "report"])
def test_the_epoch_arrival_is_refused_before_any_window_is_made(command: str, tmp_path: Path):
    # Before: 5.3 GiB for 60 requests. Under a 2 GiB cap, a regression is exit 4, not a hang.
    write_jsonl(tmp_path / "t.jsonl", far_rows(1.7e9, timed=False))
    done = run_capped([command, "t.jsonl", "-o", "r.html" if command == "report" else "r.txt"],
                      tmp_path)
    assert done.returncode == ExitCode.INPUT, done.stderr
    assert "line 60, column 'arrival_s'" in done.stderr


def test_a_finish_on_another_clock_is_named_by_its_column(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    rows = far_rows(60.0)
    rows[4]["finish_s"] = 1.7e9
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    code, _, err = run_cli(["analyze", str(path)], capsys)
    assert code == ExitCode.INPUT
    assert "line 5, column 'finish_s'" in err


@pytest.mark.parametrize("part_bytes", [None, 200], ids=["whole", "in-parts"])
def test_convert_refuses_the_clock_over_every_part(part_bytes: int | None, tmp_path: Path):
    from yaotu_trace.errors import TraceSchemaError
    from yaotu_trace.ingest.convert import convert_trace

    path = write_jsonl(tmp_path / "t.jsonl", far_rows(1.7e9, timed=False))
    with pytest.raises(TraceSchemaError, match="line 60, column 'arrival_s'"):
        convert_trace(path, tmp_path / "o.parquet", part_bytes=part_bytes)
    assert not (tmp_path / "o.parquet").exists()


def test_convert_in_parts_keeps_a_file_whose_parts_alone_would_look_like_two_clocks(
        tmp_path: Path):
    # Two captures 1.5 years apart, each half a year long: one part holding the last hours of
    # the first and the first of the second has a gap 1000× its other times; the file has not.
    from yaotu_trace.ingest.convert import convert_trace

    times = [*range(0, 15_768_001, 100_000), *range(63_072_000, 78_840_001, 100_000)]
    path = write_jsonl(tmp_path / "t.jsonl", [{"arrival_s": float(t), "prompt_len": 1,
                                               "output_len": 1} for t in times])
    done = convert_trace(path, tmp_path / "o.parquet", part_bytes=150)
    assert done.parts > 1 and done.requests == len(times)


# -- a column named twice -------------------------------------------------------------------


def _parquet(path: Path, names: list[str]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = {"arrival_s": [0.0, 1.0], "prompt_len": [3, 4], "output_len": [1, 1],
              "note": ["a", "b"]}
    pq.write_table(pa.table([pa.array(values[n]) for n in names], names=names), path)
    return path


def _refused(args: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    code, out, err = run_cli(args, capsys)
    line = err.strip()
    assert code == ExitCode.INPUT and out == "", err
    assert "\n" not in line and line.startswith("error: ")
    for w in words:
        assert w in line, line
    return line


@pytest.mark.parametrize("names", [
    ["arrival_s", "prompt_len", "output_len", "prompt_len"],  # read: once a TypeError
    ["arrival_s", "prompt_len", "output_len", "note", "note"],  # not read: once accepted
], ids=["read-column", "other-column"])
def test_a_parquet_column_named_twice_is_refused(names: list[str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]):
    path = _parquet(tmp_path / "t.parquet", names)
    twice = names[-1]
    first = names.index(twice) + 1
    _refused(["analyze", str(path)], capsys, str(path), f"column '{twice}' appears twice",
             f"(columns {first} and {len(names)})", "rename or drop one of them")


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.tsv"])
def test_a_csv_header_naming_a_column_twice_is_refused(name: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    # pandas would read the first prompt_len and call the second prompt_len.1
    sep = "\t" if name.endswith(".tsv") else ","
    text = "\n".join(sep.join(r) for r in (("arrival_s", "prompt_len", "output_len",
                                             "prompt_len"), ("0", "3", "1", "5"),
                                            ("1", "4", "1", "6"))) + "\n"
    path = tmp_path / name
    if name.endswith(".gz"):
        import gzip

        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    line = _refused(["analyze", str(path)], capsys, str(path), "column 'prompt_len' appears twice",
                    "(columns 2 and 4)")
    assert "prompt_len.1" not in line


def test_a_csv_column_really_named_like_a_renamed_one_is_kept(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len,note,note.1\n0,3,1,a,b\n", encoding="utf-8")
    code, _, err = run_cli(["analyze", str(path)], capsys)
    assert code == ExitCode.OK, err


def test_convert_in_parts_refuses_the_csv_header(tmp_path: Path):
    from yaotu_trace.errors import TraceSchemaError
    from yaotu_trace.ingest.convert import convert_trace

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len,output_len\n"
                    + "".join(f"{i},3,1,2\n" for i in range(50)), encoding="utf-8")
    with pytest.raises(TraceSchemaError, match="column 'output_len' appears twice"):
        convert_trace(path, tmp_path / "o.parquet", part_bytes=40)


def test_a_name_three_times_is_listed_with_every_position():
    from yaotu_trace.data.values import check_unique_names
    from yaotu_trace.errors import TraceSchemaError

    with pytest.raises(TraceSchemaError, match=r"'x' appears 3 times \(columns 1, 3 and 4\).*"
                                               "all but one"):
        check_unique_names("t.csv", ["x", "y", "x", "x"])


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_a_step_log_column_named_twice_is_refused(suffix: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    trace = write_jsonl(tmp_path / "t.jsonl", far_rows(4.0, n=4))
    names = ["start_s", "end_s", "num_waiting", "decode_tokens", "num_waiting"]
    columns = [[0.0, 1.0], [1.0, 2.0], [0, 1], [1, 1], [2, 3]]
    steps = tmp_path / f"s.{suffix}"
    if suffix == "parquet":
        pq.write_table(pa.table([pa.array(c) for c in columns], names=names), steps)
    else:
        rows = zip(*columns, strict=True)
        steps.write_text(",".join(names) + "\n" + "".join(",".join(map(str, r)) + "\n"
                                                          for r in rows), encoding="utf-8")
    _refused(["diagnose", str(trace), "--steps", str(steps)], capsys, str(steps),
             "column 'num_waiting' appears twice", "(columns 3 and 5)")


def test_a_metrics_csv_column_named_twice_is_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]):
    trace = write_jsonl(tmp_path / "t.jsonl", far_rows(4.0, n=4))
    metrics = tmp_path / "m.csv"
    metrics.write_text("timestamp,metric,labels,value,value\n"
                       + "".join(f"{t},vllm:num_requests_waiting,,1,2\n" for t in range(5)),
                       encoding="utf-8")
    _refused(["diagnose", str(trace), "--metrics", str(metrics)], capsys, str(metrics),
             "column 'value' appears twice")


@pytest.mark.parametrize("line", [
    '{"arrival_s": 1, "prompt_len": 4, "output_len": 1, "prompt_len": 9}',
    '{"arrival_s" : 1, "prompt_len" :4, "output_len": 1, "prompt_len"\t: 9}',
], ids=["compact", "blanks-before-colons"])
def test_a_jsonl_key_twice_in_one_object_is_refused(line: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]):
    # json keeps the last value (9), other readers the first (4): neither is a safe guess
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_len": 3, "output_len": 1}\n' + line + "\n",
                    encoding="utf-8")
    _refused(["analyze", str(path)], capsys, str(path), "line 2, column 'prompt_len'",
             "more than once", "keep one")


def test_a_mooncake_key_twice_is_named_as_the_source_writes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n'
                    '{"timestamp": 5, "input_length": 4, "output_length": 1, "hash_ids": [1], '
                    '"timestamp": 9}\n', encoding="utf-8")
    _refused(["analyze", str(path)], capsys, str(path), "line 2, column 'timestamp'")


def test_keys_repeated_inside_a_nested_object_or_a_string_are_not_columns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_len": 3, "output_len": 1, '
                    '"meta": {"a": 1, "a": 2}, "tenant": "x\\": y\\":"}\n', encoding="utf-8")
    code, _, err = run_cli(["analyze", str(path)], capsys)
    assert code == ExitCode.OK, err
