"""vllm-vcr's step-stats sidecar as the step log (`--steps step-stats.jsonl`).

The fixtures (`tests/fixtures/captures/vcr/stats/`, by `benchmarks/engines/vllm_steps.py
vcr-stats --write`) are vLLM 0.33.0's own scheduler run on CPU with its statistics on: the
`SchedulerStats` its `update_from_output` attached to each step's outputs, written in the
layout of vllm-vcr v0.2.1's `StepStatsRecord` (`tests/fixtures/captures/vcr/tap.py`), beside
the trace its tap records of the same run and the run itself (`<case>.json`: every step's
end and scheduled tokens, each request's preemptions and first hit), which the reader never
sees and the tests hold it to.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from yaotu_trace import diagnose
from yaotu_trace.commands.replay import replay
from yaotu_trace.data.metric_names import VLLM_RESIDENCY_BUCKETS
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.convert import convert_trace
from yaotu_trace.ingest.load import read_metrics, read_steps, same_capture
from yaotu_trace.ingest.telemetry.prom_text import read_prom_text
from yaotu_trace.ingest.traces.msgpack_value import decode
from yaotu_trace.prefix.options import ReplayOptions
from yaotu_trace.prefix.rules import rules_for
from yaotu_trace.prefix.trace import replay_trace_with_requests

STATS = FIXTURES / "captures" / "vcr" / "stats"
CASES = ("multi_tenant", "long_prefill")


def _files(name: str) -> tuple[Path, Path, dict]:
    run = json.loads((STATS / f"{name}.json").read_text(encoding="utf-8"))["run"]
    return STATS / f"{name}.trace.jsonl", STATS / f"{name}.step-stats.jsonl", run


def _log(trace) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    return pd.concat(list(trace.steps.batches(trace.steps.columns)), ignore_index=True)


def _axis(trace, name: str) -> dict:  # type: ignore[no-untyped-def]
    doc = diagnose(trace, DiagnosisOptions()).to_dict()
    return next(a for a in doc["axes"] if a["name"] == name)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


@pytest.mark.parametrize("name", CASES)
def test_every_step_after_the_first_is_vllms_with_its_own_counts(name: str) -> None:
    """A step per line after the first, ending where vLLM's step ended; its running, waiting
    and KV usage are the numbers vLLM's make_stats gave the tap; the preemptions add up to the
    requests' own count, and the usage is blocks over the pool without the null block."""
    trace_path, stats_path, run = _files(name)
    log = _log(read_trace(trace_path, steps_path=stats_path))
    steps = np.array(run["steps"], dtype=np.int64)
    lines = [x["scheduler"] for x in _lines(stats_path)][1:]
    assert len(log) == len(steps) - 1
    assert np.allclose(log["end_s"], steps[1:, 1] / 1e9, rtol=0, atol=1e-12)
    assert log["num_running"].tolist() == [x["num_running_reqs"] for x in lines]
    assert log["num_waiting"].tolist() == [x["num_waiting_reqs"] + x["num_skipped_waiting_reqs"]
                                           for x in lines]
    assert log["kv_usage"].tolist() == [x["kv_cache_usage"] for x in lines]
    assert int(log["num_readmitted"].sum()) == sum(run["preemptions"])
    assert "num_preempted" not in log.columns  # the count is the readmission's, not its step's
    pool = json.loads((FIXTURES / "sim_vllm" / f"{name}.json").read_text())["engine_limits"]
    used = log["kv_usage"].to_numpy() * (pool["kv_blocks"] - 1)
    assert np.allclose(used, np.round(used), rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", CASES)
def test_the_trace_of_the_same_capture_gives_the_steps_their_decode_tokens(name: str) -> None:
    """Each output that reached the tap is a decode token of the sidecar step ending then: the
    steps' decode tokens are the trace's own, and with the prefill the sidecar counts they are
    every token vLLM scheduled, but for what a preempted chunked prefill had not reached (its
    prompt counted at both admissions) and the first step (the first line seeds the clock)."""
    trace_path, stats_path, run = _files(name)
    log = _log(read_trace(trace_path, steps_path=stats_path))
    derived = _log(read_trace(trace_path))
    assert int(log["decode_tokens"].sum()) == int(derived["decode_tokens"].sum())
    records = _lines(trace_path)[1:]
    assert int(log["decode_tokens"].sum()) == sum(r["output_tokens"] - 1 for r in records)
    scheduled = np.array(run["steps"], dtype=np.int64)[1:, 2].sum()
    carried = int(log["prefill_tokens"].sum() + log["decode_tokens"].sum())
    if sum(run["preemptions"]):
        assert carried > scheduled
    else:
        assert abs(carried - scheduled) <= 1  # one first token left in the clock's seed step


def test_the_recompute_is_the_engines_upper_bound_not_an_estimate() -> None:
    """On long_prefill (13 preemptions of long chunked prompts) the memory axis takes the
    readmissions' compute from the sidecar: 34,446 tokens, at or above the 15,873 vLLM really
    computed twice (what it scheduled beyond each prompt's first uncached pass and the decode),
    where the estimate from the preemption count alone says 73,101."""
    trace_path, stats_path, run = _files("long_prefill")
    records = _lines(trace_path)[1:]
    scheduled = int(np.array(run["steps"], dtype=np.int64)[:, 2].sum())
    first_pass = sum(r["prompt_tokens"] for r in records) - sum(run["hit_tokens"])
    decode = sum(r["output_tokens"] - 1 for r in records)
    twice = scheduled - first_pass - decode
    lines = [x["scheduler"]["prefix_cache_stats"] for x in _lines(stats_path)]
    bound = sum(x["preempted_queries"] - x["preempted_hits"] for x in lines)
    estimate = sum(run["preemptions"]) * np.mean([r["prompt_tokens"] + r["output_tokens"] / 2
                                                  for r in records])
    assert (twice, bound, round(estimate)) == (15_873, 34_446, 73_101)
    kv = _axis(read_trace(trace_path, steps_path=stats_path), "kv_memory")
    assert kv["metrics"]["recomputed_tokens"] == bound
    assert any("engine-counted" in n and "upper bound" in n for n in kv["notes"])
    # The derived steps alone carry no preemption count: nothing to price.
    assert _axis(read_trace(trace_path), "kv_memory")["metrics"]["preemptions_total"] is None


def test_the_queue_axis_reads_the_engines_waiting_count() -> None:
    """The derived steps have no queue length; with the sidecar the queueing axis counts the
    waiting requests from the engine's own steps (multi_tenant's queue reaches 18)."""
    trace_path, stats_path, _ = _files("multi_tenant")
    before = _axis(read_trace(trace_path), "queueing")
    after = _axis(read_trace(trace_path, steps_path=stats_path), "queueing")
    assert before["metrics"]["waiting_share"] is None
    assert after["metrics"]["waiting_share"] > 0
    assert after["metrics"]["kv_usage_p75"] is not None
    assert not any("num_waiting (step log)" in m for m in after["missing"])


def test_the_sidecar_alone_is_a_step_log(tmp_path: Path) -> None:
    """Without a trace (`read_steps`, as --calibrate reads a log): the same steps, no decode
    tokens, each step from the line before."""
    _, stats_path, run = _files("multi_tenant")
    log = read_steps(stats_path, "--steps")
    frame = pd.concat(list(log.batches(log.columns)), ignore_index=True)
    ends = np.array(run["steps"], dtype=np.int64)[:, 1] / 1e9
    assert "decode_tokens" not in frame.columns
    assert np.allclose(frame["start_s"], ends[:-1], rtol=0, atol=1e-12)


def _sidecar(tmp_path: Path, lines: list[dict], name: str = "s.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _line(ts_ms: float, running: int = 1, waiting: int = 0, **more: object) -> dict:
    prefix = {"reset": False, "requests": 1, "queries": 32, "hits": 16, "preempted_requests": 0,
              "preempted_queries": 0, "preempted_hits": 0}
    stats = {"num_running_reqs": running, "num_waiting_reqs": waiting, "step_counter": 0,
             "current_wave": 0, "kv_cache_usage": 0.5, "prefix_cache_stats": prefix}
    for key, value in more.items():
        (prefix if key in prefix else stats)[key] = value
    return {"ts_ms": ts_ms, "scheduler": stats}


def test_after_an_idle_engine_a_step_starts_at_the_next_arrival(tmp_path: Path) -> None:
    """A line that leaves nothing running or waiting: the engine idled until a request came,
    so the next step starts at that arrival, not at the line before."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in [
        {"meta": {"block_size": 16}},
        {"prompt_tokens": 32, "output_tokens": 1, "ttft_ms": 9.0, "arrival_ms": 1.0},
        {"prompt_tokens": 32, "output_tokens": 1, "ttft_ms": 5.0, "arrival_ms": 100.0}]),
        encoding="utf-8")
    stats = _sidecar(tmp_path, [_line(0.5), _line(10.0, running=0), _line(105.0)])
    log = _log(read_trace(trace, steps_path=stats))
    assert log["start_s"].tolist() == [0.0005, 0.1]
    assert log["end_s"].tolist() == [0.01, 0.105]


def test_fields_the_log_leaves_out_are_named(tmp_path: Path) -> None:
    path = _sidecar(tmp_path, [_line(1.0), _line(2.0, spec_decoding_stats={"num_drafts": 3}),
                               _line(3.0, kv_cache_eviction_events=[], cudagraph_stats=None)])
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"prompt_tokens": 32, "output_tokens": 1, "ttft_ms": 1.0,
                                 "arrival_ms": 0.5}) + "\n", encoding="utf-8")
    notes = " ".join(read_trace(trace, steps_path=path).notes)
    assert "scheduler.spec_decoding_stats (1)" in notes
    assert "scheduler.prefix_cache_stats.requests (3)" in notes
    assert "kv_cache_eviction_events" not in notes and "cudagraph_stats" not in notes


@pytest.mark.parametrize(("lines", "message"), [
    ([_line(2.0), _line(1.0)], "line 2, field 'ts_ms': 1.0 ms comes before the line above"),
    ([_line(1.0), {"ts_ms": 2.0, "scheduler": 3}], "line 2, field 'scheduler': not an object"),
    ([_line(1.0), _line(2.0, kv_cache_usage=1.5)],
     "line 2, field 'scheduler.kv_cache_usage': 1.5 is not a share of the pool"),
    ([_line(1.0), _line(2.0, hits=40)],
     "line 2, field 'scheduler.prefix_cache_stats.hits': more hits than queried tokens"),
    ([_line(1.0), _line(2.0, num_running_reqs=-1)],
     "line 2, field 'scheduler.num_running_reqs': -1 is negative"),
    ([_line(1.0)], "1 step-stats line(s); a step needs the line before it"),
    ([_line(1.0), _line(2.0, num_running_reqs=10**30)],
     "line 2, field 'scheduler.num_running_reqs': 1e+30 is beyond 1e+15"),
    ([_line(1.0), _line(1e300)], "line 2, field 'ts_ms': 1e+300 ms is beyond 1e+12 s"),
    ([_line(1.0), _line(2.0, kv_cache_eviction_events=[
        {"lifetime_seconds": 1e308, "idle_seconds": 0.0, "reuse_gaps_seconds": []}])],
     "a time beyond 1e+12 s in an event"),
])
def test_a_bad_sidecar_is_one_line_naming_the_line_and_field(tmp_path: Path, lines: list[dict],
                                                              message: str) -> None:
    path = _sidecar(tmp_path, lines)
    with pytest.raises(TraceSchemaError, match=r"s\.jsonl") as err:
        read_steps(path, "--steps")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_sidecar_of_another_capture_is_refused() -> None:
    """multi_tenant's trace with long_prefill's sidecar: the trace's steps end at instants the
    sidecar has no line for, so the two are not one capture."""
    trace_path, _, _ = _files("multi_tenant")
    _, other, _ = _files("long_prefill")
    with pytest.raises(TraceSchemaError, match="not of one capture"):
        read_trace(trace_path, steps_path=other)


def test_the_engines_registration_reply_gives_the_diagnosis_its_limits() -> None:
    """The meta's `ready_response_hex` is vLLM's own msgpack of its `EngineCoreReadyResponse`
    (made by vLLM 0.33's classes and msgspec for the run): the pool, seats and token budget fed
    to it come out, and the axes judge against them where no option gives them; an option
    wins."""
    trace_path, _, _ = _files("multi_tenant")
    meta = _lines(trace_path)[0]["meta"]
    reply = decode(bytes.fromhex(meta["ready_response_hex"]))
    limits = json.loads((FIXTURES / "sim_vllm" / "multi_tenant.json").read_text())
    engine = limits["engine_limits"]
    assert (reply["num_gpu_blocks"], reply["block_size"], reply["max_num_seqs"],
            reply["max_num_batched_tokens"], reply["vllm_version"]) == (
        engine["kv_blocks"], 16, engine["max_num_seqs"], engine["max_batched_tokens"], "0.33.0")
    trace = read_trace(trace_path)
    assert trace.engine_limits is not None
    assert trace.engine_limits.kv_capacity_tokens == (engine["kv_blocks"] - 1) * 16
    queueing, memory = _axis(trace, "queueing"), _axis(trace, "kv_memory")
    assert (queueing["metrics"]["seq_cap"], queueing["metrics"]["seq_cap_inferred"]) == (
        engine["max_num_seqs"], False)
    assert memory["metrics"]["kv_capacity_tokens"] == (engine["kv_blocks"] - 1) * 16
    given = diagnose(trace, DiagnosisOptions(max_num_seqs=8, kv_capacity="100blocks")).to_dict()
    axes = {a["name"]: a["metrics"] for a in given["axes"]}
    assert axes["queueing"]["seq_cap"] == 8
    assert axes["kv_memory"]["kv_capacity_tokens"] == 1600
    unlimited = diagnose(trace, DiagnosisOptions(kv_capacity="unlimited")).to_dict()
    memory = next(a for a in unlimited["axes"] if a["name"] == "kv_memory")
    assert memory["metrics"]["kv_capacity_tokens"] is None  # as asked, not the capture's


@pytest.mark.parametrize(("reply", "problem"), [
    ("81a3", "cut short"),
    ("zz", "not the msgpack"),
    ("c1", "type 0xc1"),
    ("93010203", "not the msgpack map"),
    ("81a1610100", "1 bytes after the value"),
    ((bytes([0x81, 0xae]) + b"num_gpu_blocks" + b"\xcf" + b"\xff" * 8).hex(),
     "1.84e+19 is beyond 1e+15"),
])
def test_a_damaged_registration_reply_is_refused(tmp_path: Path, reply: str,
                                                 problem: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [
        {"meta": {"block_size": 16, "ready_response_hex": reply}},
        {"prompt_tokens": 32, "output_tokens": 1, "ttft_ms": 9.0, "arrival_ms": 1.0}]),
        encoding="utf-8")
    with pytest.raises(TraceSchemaError, match=r"line 1, field 'meta\.ready_response_hex") as err:
        read_trace(path)
    assert problem in str(err.value)


@pytest.mark.parametrize(("hex_bytes", "value"), [
    ("81a161cd0100", {"a": 256}),  # fixmap, fixstr, uint16
    ("93ff00d0ce", [-1, 0, -50]),  # negative fixint, int8
    ("cb3ff8000000000000", 1.5),  # float64
    ("ca3fc00000", 1.5),  # float32
    ("82a178c0a179c3", {"x": None, "y": True}),
    ("d903616263", "abc"),  # str8
    ("c4020102", b"\x01\x02"),  # bin8
    ("cf0000000100000000", 1 << 32),  # uint64
    ("d3ffffffffffffffff", -1),  # int64
])
def test_the_msgpack_reader_on_hand_made_values(hex_bytes: str, value: object) -> None:
    """Byte strings written from the MessagePack spec (msgpack/msgpack spec.md) by hand."""
    assert decode(bytes.fromhex(hex_bytes)) == value


@pytest.mark.parametrize("name", CASES)
def test_as_metrics_the_sidecar_is_what_vllms_own_logger_records(name: str) -> None:
    """`--metrics step-stats.jsonl` holds the series vLLM 0.33's `PrometheusStatLogger` makes of
    the same statistics (`<case>.metrics.prom`: every line through its `record`, with
    `--kv-cache-metrics`, by `benchmarks/engines/vcr_stats_prometheus.py`): the prefix-cache
    counters, the hits by source, every bucket, count and sum of the three residency histograms,
    and the gauges as the last line left them."""
    _, stats_path, _ = _files(name)
    ours = read_metrics(stats_path)
    vllm = read_metrics(STATS / f"{name}.metrics.prom")
    for key in ("prefix_queries", "prefix_hits"):
        assert ours.counter_increase(key) == vllm.counter_increase(key) > 0
    assert ours.counter_increase("prompt_tokens_cached_by_source", "device") == \
        vllm.counter_increase("prompt_tokens_cached_by_source", "device")
    for key in ("kv_block_lifetime_s", "kv_block_idle_before_evict_s", "kv_block_reuse_gap_s"):
        assert ours.histogram_count(key) == vllm.histogram_count(key) > 0
        assert ours.histogram_sum(key) == pytest.approx(vllm.histogram_sum(key), rel=1e-12)
        for le in (*VLLM_RESIDENCY_BUCKETS, float("inf")):
            assert ours.bucket_increase(key, le) == vllm.bucket_increase(key, le)
    rows, _ = read_prom_text(STATS / f"{name}.metrics.prom")
    last = {metric: value for _, metric, _, value in rows if "reason" not in metric}
    for key, metric in (("num_running", "vllm:num_requests_running"),
                        ("num_waiting", "vllm:num_requests_waiting"),
                        ("kv_usage", "vllm:kv_cache_usage_perc")):
        gauge = ours.gauge(key)
        assert gauge is not None and gauge["value"].iloc[-1] == last[metric]


def test_the_engines_residency_is_held_against_the_replays() -> None:
    """`trace replay --residency --metrics step-stats.jsonl`: vLLM's own residency histograms
    of the run (every block, its collector on the engine loop's clock) beside the replay's."""
    trace_path, stats_path, _ = _files("long_prefill")
    events = [e for line in _lines(stats_path)
              for e in line["scheduler"]["kv_cache_eviction_events"]]
    rules = rules_for("vllm", block_size_tokens=16, capacity_blocks=2199)
    summary, _ = replay_trace_with_requests(read_trace(trace_path), rules, explain=True,
                                            metrics=read_metrics(stats_path), waterfall=False)
    assert summary.residency is not None
    engine = {h.key: h.engine for h in summary.residency.histograms}
    lifetime, gaps = engine["kv_block_lifetime_s"], engine["kv_block_reuse_gap_s"]
    assert lifetime is not None and lifetime["count"] == len(events)
    assert gaps is not None
    assert gaps["count"] == sum(len(e["reuse_gaps_seconds"]) for e in events)


def test_without_eviction_events_there_are_no_residency_histograms(tmp_path: Path) -> None:
    path = _sidecar(tmp_path, [_line(1.0), _line(2.0)])
    metrics = read_metrics(path)
    assert metrics.histogram_count("kv_block_lifetime_s") is None
    assert metrics.counter_increase("prefix_queries") == 64
    assert any("without --kv-cache-metrics" in n for n in metrics.notes)
    bad = _sidecar(tmp_path, [_line(1.0, kv_cache_eviction_events=[{"lifetime_seconds": -1,
                                                                     "idle_seconds": 0}])],
                   "bad.jsonl")
    with pytest.raises(TraceSchemaError, match="a negative time in an event"):
        read_metrics(bad)


def test_convert_says_how_to_give_the_limits_back(tmp_path: Path) -> None:
    """A canonical table has no place for the engine's limits: `trace convert` names the
    options that give them back."""
    trace_path, _, _ = _files("long_prefill")
    notes = convert_trace(trace_path, tmp_path / "r.parquet").notes
    assert any("--max-num-seqs 1024 --max-batched-tokens 4096 --kv-capacity 35184tok" in n
               for n in notes)
    assert read_trace(tmp_path / "r.parquet").engine_limits is None


def test_each_file_given_in_the_others_place_is_told_where_it_belongs() -> None:
    trace_path, stats_path, _ = _files("long_prefill")
    with pytest.raises(TraceReadError, match="is vllm-vcr's step-stats sidecar") as err:
        read_trace(stats_path)
    assert f"--steps {stats_path}" in str(err.value)
    with pytest.raises(TraceReadError, match=r"is a request trace \(vllm-vcr\)") as err:
        read_steps(trace_path, "--steps")
    assert "step log as --steps" in str(err.value)


def test_an_unlimited_replay_names_the_pool_the_capture_states() -> None:
    """The registration reply's pool (2,200 blocks on long_prefill) is vLLM's num_gpu_blocks:
    the unlimited replay says `--preset vllm --capacity 2200` replays it; with it, no note."""
    trace_path, _, _ = _files("long_prefill")
    unlimited = replay(trace_path, ReplayOptions(), waterfall=False).to_dict()
    assert any("--preset vllm --capacity 2200 replays that pool" in n
               for n in unlimited["prefix_reuse"]["notes"])
    sized = replay(trace_path, ReplayOptions(preset="vllm", capacity="2200"),
                   waterfall=False).to_dict()
    assert not any("replays that pool" in n for n in sized["prefix_reuse"]["notes"])


def test_another_captures_sidecar_as_metrics_is_refused() -> None:
    """Given as --metrics with multi_tenant's trace, long_prefill's sidecar has a line at none
    of the instants the trace's outputs reached the tap: refused, where the same capture's
    sidecar is taken."""
    trace_path, stats_path, _ = _files("multi_tenant")
    _, other, _ = _files("long_prefill")
    trace = read_trace(trace_path)
    same_capture(trace, read_metrics(stats_path))
    with pytest.raises(TraceSchemaError, match="output times are at no step-stats line"):
        same_capture(trace, read_metrics(other))
    with pytest.raises(TraceSchemaError, match="not of one capture"):
        replay(trace_path, ReplayOptions(residency=True), waterfall=False, metrics=other)
