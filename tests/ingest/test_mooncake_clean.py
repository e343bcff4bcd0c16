"""A clean Mooncake file read without pandas (`mooncake.read_clean`, `trace sweep`, `trace
analyze`, `trace diagnose` and `trace check`): the same trace, arrays, sweep, analysis,
diagnosis and gate as the usual read, on the two public files; every file the usual read would
sort, note or refuse goes the usual way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import shared_trace

from yaotu_trace.commands.analyze import analyze
from yaotu_trace.commands.check import check
from yaotu_trace.commands.diagnose import diagnose
from yaotu_trace.commands.sweep import sweep
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.detect import sniff_keys
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.traces.mooncake import read_clean
from yaotu_trace.prefix.options import ReplayOptions
from yaotu_trace.prefix.prepare import prepare
from yaotu_trace.render.json_report import render_json

PUBLIC = ("conversation_trace.jsonl", "synthetic_trace.jsonl")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(ts: int, n: int, ids: list[int], out: int = 3) -> dict:
    return {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}


CLEAN = [_row(0, 1000, [1, 2]), _row(5, 600, [1, 3]), _row(5, 512, [4]), _row(9, 1, [5])]


def test_detection_reads_the_four_keys_as_mooncake() -> None:
    """`open_trace(without_pandas=True)` takes a .jsonl file of exactly these keys as Mooncake
    without asking detection; this holds it to detection's answer."""
    keys = {"timestamp", "input_length", "output_length", "hash_ids"}
    assert sniff_keys(keys) is TraceFormat.MOONCAKE


@pytest.mark.parametrize("name", PUBLIC)
def test_public_trace_read_without_pandas_is_the_usual_trace(name: str) -> None:
    path = shared_trace(f"mooncake/{name}")
    clean, usual = read_clean(path), read_trace(path)
    assert clean is not None and clean.table is None and clean.columns is not None
    for field in ("path", "format_name", "source_block_size", "notes", "rows_read",
                  "has_arrivals", "column_names", "content_column", "num_requests"):
        assert getattr(clean, field) == getattr(usual, field), field
    a, b = prepare(clean), prepare(usual)
    for field in ("prompt_tokens", "offsets", "values", "arrival_s", "model_codes",
                  "request_id"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert (a.tenant_codes, a.instance_codes, a.finish_s, a.cached_tokens) == (None,) * 4
    # The pandas table, when a pass asks for it, is the usual read's.
    pd.testing.assert_frame_equal(clean.requests, usual.requests)


@pytest.mark.parametrize("name", PUBLIC)
def test_public_sweep_without_pandas_is_the_usual_sweep(name: str) -> None:
    path = shared_trace(f"mooncake/{name}")
    options = ReplayOptions(preset="mooncake")
    fast = render_json(sweep(path, options))
    assert fast == render_json(sweep(read_trace(path), options))
    assert json.loads(fast)["capacity_curve"]["points"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_analysis_without_pandas_is_the_usual_analysis(name: str) -> None:
    path = shared_trace(f"mooncake/{name}")
    fast = render_json(analyze(path))
    assert fast == render_json(analyze(read_trace(path)))
    assert json.loads(fast)["profile"]["lengths"]["prompt_tokens_total"] > 0


# Judged as a 70B deployment: the ledger prices every remedy (and P004's tier candidate
# replays a CPU tier), so every axis reads the lengths and arrivals it can.
DEPLOYED = DiagnosisOptions(model="llama-3.1-70b", gpu="H100", kv_capacity="1382400tok", tp=4)


@pytest.mark.parametrize("options", [DiagnosisOptions(), DEPLOYED], ids=["plain", "deployed"])
@pytest.mark.parametrize("name", PUBLIC)
def test_public_diagnosis_without_pandas_is_the_usual_diagnosis(
        name: str, options: DiagnosisOptions) -> None:
    path = shared_trace(f"mooncake/{name}")
    fast = render_json(diagnose(path, options))
    assert fast == render_json(diagnose(read_trace(path), options))
    assert len(json.loads(fast)["axes"]) == 4


@pytest.mark.parametrize("fail_on", ["bottleneck", "warning"])
def test_public_check_without_pandas_is_the_usual_check(fail_on: str) -> None:
    path = shared_trace("mooncake/conversation_trace.jsonl")
    fast = render_json(check(path, DEPLOYED, fail_on=fail_on))
    assert fast == render_json(check(read_trace(path), DEPLOYED, fail_on=fail_on))
    assert json.loads(fast)["checks"]


@pytest.mark.parametrize("command", ["diagnose", "check"])
def test_a_diagnosis_builds_the_chains_once(command: str, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """The KV axis, the prefix replay (and for `check` the analysis' overview) read one build
    kept with the trace: the 288,500 blocks are hashed once, not three times."""
    from yaotu_trace.prefix.kernels import numpy_passes

    real, calls = numpy_passes.build_block_chains, []
    monkeypatch.setattr(numpy_passes, "build_block_chains",
                        lambda *args: calls.append(1) or real(*args))
    path = shared_trace("mooncake/conversation_trace.jsonl")
    report = (diagnose(path) if command == "diagnose" else check(path, fail_on="bottleneck"))
    assert report.sections and len(calls) == 1


def test_small_file_hand_checked(tmp_path: Path) -> None:
    trace = read_clean(_write(tmp_path / "t.jsonl", CLEAN))
    assert trace is not None and trace.columns is not None
    offsets, values = trace.columns.lists["prompt_block_ids"]
    assert offsets.tolist() == [0, 2, 4, 5, 6] and values.tolist() == [1, 2, 1, 3, 4, 5]
    assert trace.array("arrival_s", np.float64).tolist() == [0.0, 0.005, 0.005, 0.009]
    assert trace.array("prompt_len").tolist() == [1000, 600, 512, 1]
    assert prepare(trace).request_id.tolist() == ["r0", "r1", "r2", "r3"]
    assert trace.requests["request_id"].tolist() == ["r0", "r1", "r2", "r3"]


@pytest.mark.parametrize(("rows", "usual"), [
    # arrivals out of order: the usual read sorts them and says so
    ([_row(5, 1000, [1, 2]), _row(0, 600, [1, 3])], "sorted"),
    # negative length, ids that cannot cover the length: refused, naming the line
    ([_row(0, -1, []), _row(1, 600, [1, 3])], "is negative"),
    ([_row(0, 2000, [1]), _row(1, 600, [1, 3])], "cannot cover"),
    # a second clock among the first's
    ([_row(0, 10, [1]), _row(1, 10, [2]), _row(2_000_000_000_000, 10, [3])], "one clock"),
    # a missing id, a length that float64 would round: the usual read decides
    ([_row(0, 1000, [1, None])], "missing"),
    ([_row(0, 2**53 + 1, [1])], "cannot cover"),
    # a key more: not Mooncake's four columns
    ([{**_row(0, 10, [1]), "extra": 1}], None),
])
def test_anything_but_clean_goes_the_usual_way(tmp_path: Path, rows: list[dict],
                                               usual: str | None) -> None:
    path = _write(tmp_path / "t.jsonl", rows)
    assert read_clean(path) is None
    if usual == "sorted":
        assert any("sorted" in note for note in read_trace(path).notes)
    elif usual is not None:
        with pytest.raises(TraceSchemaError, match=usual):
            read_trace(path)


@pytest.mark.parametrize("command", [["sweep"], ["analyze"], ["diagnose"],
                                     ["check", "--fail-on", "bottleneck"]],
                         ids=["sweep", "analyze", "diagnose", "check"])
def test_commands_of_a_clean_file_import_no_pandas(tmp_path: Path, command: list[str]) -> None:
    """The point of the clean read: `trace sweep`, `analyze`, `diagnose` and `check` of a
    Mooncake file never import pandas (about 0.2 s of a 0.6 s run on the conversation trace);
    a pass that needs the table (a --capacities replay, the terminal's charts, `check
    --before`) still may."""
    path = _write(tmp_path / "t.jsonl", CLEAN)
    argv = ["trace", command[0], str(path), *command[1:], "-f", "json"]
    code = ("import sys; from yaotu_trace.cli import run; "
            f"sys.argv = {argv!r}; "
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: run()\n"
            "    except SystemExit as e: assert e.code == 0, e.code\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", out.stderr
