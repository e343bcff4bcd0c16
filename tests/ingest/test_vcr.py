"""vllm-vcr traces: the cases vllm-vcr's own trace module wrote (`tests/fixtures/captures/vcr/
cases.jsonl`, made by `make_fixtures.py` from v0.2.1's `crates/sim-trace/src/trace.rs` and
`main.rs`) read back as the records `main.rs` fed it, and bad records (the shared workload's
file is checked with the other captures, `test_captures.py`)."""

from __future__ import annotations

import json
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace import diagnose
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.traces.common import as_int64
from yaotu_trace.prefix.reconcile_replay import reconcile_trace
from yaotu_trace.prefix.rules import effective_rules

sys.path.insert(0, str(FIXTURES / "captures" / "vcr"))
from tap import tap_records  # what vllm-vcr's tap writes of a vLLM run

VCR = FIXTURES / "captures" / "vcr" / "cases.jsonl"
META = {"meta": {"model": "m", "block_size": 16}}


def _absent(value: object) -> bool:
    return value is None or value is pd.NA or len(value) == 0  # type: ignore[arg-type]


def _record(**fields: object) -> dict:
    return {"prompt_tokens": 40, "cached_tokens": 0, "output_tokens": 2, "ttft_ms": 20.0,
            "itl_ms": [5.0], "concurrency": 1, "arrival_ms": 0.0, **fields}


def _write(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    return read_trace(VCR)


def test_the_records_main_rs_fed_vllm_vcr_come_out_in_arrival_order(trace) -> None:
    req = trace.requests
    assert detect_format(VCR) is TraceFormat.VLLM_VCR and trace.format_name == "vllm-vcr"
    # main.rs: eight records in finish order; the one without arrival_ms (line 7) is left out
    assert req["arrival_s"].tolist() == [0.0, 0.012, 0.2, 0.25, 0.3, 0.4, 0.45]
    assert req["prompt_len"].tolist() == [70, 90, 60, 15, 70, 70, 49]
    assert req["output_len"].tolist() == [5, 3, 8, 40, 0, 1, 2]
    assert req["cached_tokens"].tolist() == [0, 32, 32, 0, 64, 0, 32]
    assert req["status"].tolist() == ["ok", "ok", "ok", "ok", "aborted", "ok", "ok"]
    assert set(req["model"]) == {"meta-llama/Llama-3.1-8B-Instruct"}
    first = req["first_token_s"].to_numpy(dtype=float)
    assert np.allclose(first[[0, 1, 2, 3, 5, 6]], [0.0525, 0.052, 0.235, 0.45, 0.461, 0.48])
    assert np.isnan(first[4])  # aborted before its first token
    times = req["token_times_s"]
    assert np.allclose(times.iloc[0], [0.0525, 0.0625, 0.074, 0.0835, 0.1135])
    assert np.allclose(times.iloc[2], [0.235, 0.255, 0.276, 0.295])  # 4 chunks of 8 tokens
    assert _absent(times.iloc[3])  # itl_summary only
    assert req["finish_s"].iloc[3] == pytest.approx(0.25 + 0.2 + 0.351)
    assert list(req["output_tokens"].iloc[6]) == [9001, 9002]
    notes = " | ".join(trace.notes)
    assert "skipped (vllm-vcr's replay_subset leaves them out too): 1 (first: line 7)" in notes
    assert "vllm_version 0.33.0, gpu H100, tp 1" in notes
    unused = next(n for n in trace.notes if "does not use" in n)
    assert unused.endswith("holding each: concurrency (8)")  # itl_ctx is read


def test_block_hashes_are_vllm_vcrs_own_and_images_keep_requests_apart(trace) -> None:
    rows = [json.loads(line) for line in VCR.read_text(encoding="utf-8").splitlines()[1:]]
    by_arrival = sorted((r for r in rows if "arrival_ms" in r), key=lambda r: r["arrival_ms"])
    ids = trace.requests["prompt_block_ids"]
    assert trace.source_block_size == 16
    for got, record in zip(ids, by_arrival, strict=True):
        hashes = [as_int64(h) for h in record.get("block_hashes", [])]
        if "mm_hashes" in record:  # `a`'s text with an image: no id in common with `a`
            assert len(got) == len(hashes) and not set(got) & set(hashes)
        else:
            assert ([] if _absent(got) else list(got)) == hashes


@pytest.mark.parametrize(("name", "requests"), [("cases.jsonl", 7), ("workload.jsonl", 48)])
def test_the_replay_hits_what_the_engine_counted(name: str, requests: int) -> None:
    # main.rs wrote the cached tokens vLLM's prefix cache gives these prompts (the system
    # prompt's two full blocks, `a`'s four again; the workload engine's at 16-token blocks):
    # the replay under vLLM's rules agrees on every request.
    trace = read_trace(VCR.parent / name)
    rules, preset, _ = effective_rules(trace, "vllm")
    found = reconcile_trace(trace, rules, preset=preset)
    assert found is not None and sum(w.requests for w in found.windows) == requests
    assert (found.differing_requests, found.below_tokens, found.above_tokens) == (0, 0, 0)


def test_the_gzipped_file_reads_the_same(trace) -> None:
    packed = FIXTURES / "captures" / "vcr" / "cases.jsonl.gz"
    assert detect_format(packed) is TraceFormat.VLLM_VCR
    again = read_trace(packed).requests
    assert again["arrival_s"].tolist() == trace.requests["arrival_s"].tolist()
    assert again["cached_tokens"].tolist() == trace.requests["cached_tokens"].tolist()


def test_records_without_arrivals_are_a_lengths_only_table(tmp_path: Path) -> None:
    path = _write(tmp_path, [META, _record(arrival_ms=None), _record(arrival_ms=None)])
    trace = read_trace(path, arrivals_optional=True)
    assert not trace.has_arrivals and len(trace.requests) == 2
    assert any("read as a lengths-only table" in n for n in trace.notes)


@pytest.mark.parametrize(("lines", "message"), [
    ([{"meta": {"model": "m"}}, _record(block_hashes=[1, 2])],
     "line 2, field 'block_hashes': the trace has no meta.block_size"),
    ([META, _record(block_hashes=[1, 2, 3])],
     "line 2, field 'block_hashes': 3 full 16-token blocks in a 40-token prompt"),
    ([META, _record(cached_tokens=50)], "line 2, field 'cached_tokens': 50 cached of a 40-token"),
    ([META, _record(finish_reason="eos")], "line 2, field 'finish_reason': 'eos' is not one of"),
    ([META, _record(output_tokens=3, itl_ms=None)],
     "line 2, field 'itl_ms': output_tokens=3 but neither itl_ms nor itl_summary is present"),
    ([META, _record(itl_tokens=[1, 1])], "line 2, field 'itl_tokens': 2 chunks for 1 gaps"),
    ([META, _record(ttft_ms=-4.0)], "line 2, field 'ttft_ms': -4.0 ms is negative"),
    ([META, _record(output_token_ids=[5])], "line 2, field 'output_token_ids': 1 ids for "
                                             "output_tokens=2"),
    ([{"meta": [16]}, _record()], "line 1, field 'meta': not an object"),
    ([META, _record(), META, _record()], "line 3, field 'meta': a second header or one after"),
])
def test_a_bad_record_is_one_line_naming_its_field(tmp_path: Path, lines: list[dict],
                                                   message: str) -> None:
    path = _write(tmp_path, lines)
    with pytest.raises(TraceSchemaError) as err:
        read_trace(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


STEPS = VCR.parent / "steps.jsonl"


def _step_rows(trace) -> list[tuple]:  # type: ignore[no-untyped-def]
    frame = pd.concat(list(trace.steps.batches(("prefill_tokens", "decode_tokens",
                                                 "num_running"))))
    return [(round(r.start_s, 6), round(r.end_s, 6), int(r.prefill_tokens), int(r.decode_tokens),
             None if pd.isna(r.num_running) else int(r.num_running))
            for r in frame.itertuples()]


def test_the_engine_steps_come_from_the_outputs_that_reached_the_tap_together() -> None:
    # main.rs's `steps.jsonl`: A alone, B's prefill (96 tokens, 32 cached) in A's 80 ms step,
    # both decoding to 160 ms, idle, C at 200 ms.
    trace = read_trace(STEPS)
    assert _step_rows(trace) == [
        (0.0, 0.04, 64, 0, None),  # A's prefill
        (0.04, 0.05, 0, 1, 1),
        (0.05, 0.13, 64, 1, 2),  # B's 64 uncached tokens beside A's decode
        (0.13, 0.14, 0, 2, 2),
        (0.14, 0.15, 0, 2, 1),
        (0.15, 0.16, 0, 1, 1),
        (0.2, 0.23, 32, 0, None),  # after the idle spell: from C's arrival
        (0.23, 0.24, 0, 1, 1),
    ]
    assert any(n.startswith("engine steps from the tap's own outputs") for n in trace.notes)


def test_the_interference_axis_reads_the_stall_in_the_engines_own_steps() -> None:
    doc = diagnose(STEPS, DiagnosisOptions()).to_dict()
    axis = next(a for a in doc["axes"] if a["name"] == "pd_interference")
    m = axis["metrics"]
    # A's 80 ms gap against 10 ms decode steps, B's prefill in that step: 70 ms of the 150 ms
    # of decode (A 110, B 30, C 10) lost.
    assert (m["stalls"], m["stalls_with_prefill"], m["prefill_coincidence"]) == (1, 1, 1.0)
    assert m["median_decode_step_s"] == pytest.approx(0.01)
    assert m["decode_seconds_total"] == pytest.approx(0.15)
    assert m["decode_seconds_lost"] == pytest.approx(0.07)
    assert m["coincidence_source"] == "prefill steps in the step log"


def test_no_steps_without_every_gap_and_a_given_step_log_takes_their_place(
        tmp_path: Path) -> None:
    cases = read_trace(VCR)  # one request has only a summary of its gaps
    assert cases.steps is None
    assert any(n.startswith("no engine steps are derived from itl_ctx: 2 record(s) hide")
               for n in cases.notes)
    given = tmp_path / "steps.jsonl"
    given.write_text(json.dumps({"start_s": 0.0, "end_s": 0.24, "prefill_tokens": 160}) + "\n",
                     encoding="utf-8")
    trace = read_trace(STEPS, steps_path=given)
    assert trace.steps is not None and trace.steps.path == str(given)
    assert trace.steps.num_rows == 1


def test_convert_keeps_the_capture_steps_only_when_asked(tmp_path: Path) -> None:
    from yaotu_trace.errors import ConfigError
    from yaotu_trace.ingest.convert import convert_trace

    done = convert_trace(STEPS, tmp_path / "requests.parquet")
    assert any(n.startswith("the engine steps steps.jsonl records (8) are not in the table")
               for n in done.notes)
    # GIVEN --steps-out: the table and the step log, read back together, are the capture
    convert_trace(STEPS, tmp_path / "r.parquet", steps_out=tmp_path / "s.parquet")
    again = read_trace(tmp_path / "r.parquet", steps_path=tmp_path / "s.parquet")
    assert _step_rows(again) == _step_rows(read_trace(STEPS))
    with pytest.raises(ConfigError, match="does not record the engine's steps"):
        convert_trace(VCR, tmp_path / "c.parquet", steps_out=tmp_path / "c.steps.parquet")
    assert not (tmp_path / "c.parquet").exists()


SIM_VLLM = FIXTURES / "sim_vllm"


@pytest.mark.parametrize("name", ["chat", "bursty", "multi_tenant", "rag", "agentic",
                                  "long_prefill"])
def test_the_steps_are_vllms_own_steps_that_emitted_a_token(name: str, tmp_path: Path) -> None:
    """vLLM 0.33.0's scheduler run (sync) of each golden case, as the tap records it, gives
    back every step of vLLM's that emitted a token: its end, start and decode tokens exactly.
    Its prefill is vLLM's too, but for what the tap cannot see: a preempted request's
    recompute, and a prompt's earlier chunks (counted in the step of its first token)."""
    case = json.loads((SIM_VLLM / f"{name}.json").read_text(encoding="utf-8"))
    run = case["runs"]["sync"]
    steps = run["steps"]
    path = _write(tmp_path, [{"meta": {"block_size": 16}}, *tap_records(run, case["requests"])])
    derived = pd.concat(list(read_trace(path).steps.batches(("prefill_tokens",
                                                              "decode_tokens"))))
    decodes: dict[int, int] = {}
    for emitted in run["token_steps"]:
        for s in emitted:
            decodes.setdefault(s, 0)
        for s in emitted[1:]:
            decodes[s] += 1
    visible = sorted(decodes)  # the steps that sent the tap a token
    assert np.allclose(derived["end_s"], [steps[s][1] / 1e9 for s in visible], atol=1e-9)
    assert derived["decode_tokens"].tolist() == [decodes[s] for s in visible]
    after_silence = sum(1 for a, b in pairwise(visible) if b > a + 1)
    starts = np.isclose(derived["start_s"].iloc[1:], [steps[s][0] / 1e9 for s in visible[1:]],
                        atol=1e-9)
    assert int((~starts).sum()) == after_silence  # a token-less step before: not seen
    scheduled = sum(row[2] for row in steps)
    carried = int(derived["prefill_tokens"].sum() + derived["decode_tokens"].sum())
    if any(run["preemptions"]):
        assert carried < scheduled  # the recompute after a preemption is not in the trace
    else:
        assert carried == scheduled
