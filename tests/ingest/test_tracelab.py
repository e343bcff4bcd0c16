"""TraceLab round traces: the rows TraceLab's own scripts wrote (`tests/fixtures/tracelab/
claude_rounds.jsonl`), the public example against what AIPerf's TraceLab loader reads from it,
and bad rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, shared_trace

from yaotu_trace.errors import TraceReadError, TraceSchemaError
from yaotu_trace.ingest import detect_format, read_trace
from yaotu_trace.ingest.formats import TraceFormat

ROUNDS = FIXTURES / "tracelab" / "claude_rounds.jsonl"
AIPERF = FIXTURES / "tracelab" / "aiperf_rounds.json"
EXAMPLE = "tracelab_example/round_trace.jsonl"


def _round(**fields: object) -> dict:
    row: dict = {"provider": "codex", "session_id": "codex:s1", "round_index": 0,
                 "round_id": "r0", "model": "gpt-5.4", "input_tokens_total": 1000,
                 "prefix_tokens": 768, "newly_append_tokens": 232, "output_tokens": 40,
                 "reasoning_output_tokens": 12,
                 "timing_events": [{"event_type": "user_message",
                                    "timestamp": "2026-03-21T10:00:00.000Z"},
                                   {"event_type": "text",
                                    "timestamp": "2026-03-21T10:00:02.000Z"}]}
    row.update(fields)
    return row


def _write(tmp_path: Path, rows: list[dict], name: str = "rounds.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_rounds_tracelab_wrote_are_read_as_their_submissions() -> None:
    trace = read_trace(ROUNDS)
    req = trace.requests
    assert detect_format(ROUNDS) is TraceFormat.TRACELAB and trace.format_name == "tracelab"
    # make_fixture.py's log: a user message at 09:00:00.000; two tool results, the later at
    # 07.400; one at 11.500; none (its first output at 15.000). The fifth round has no time.
    assert req["arrival_s"].tolist() == [0.0, 7.4, 11.5, 15.0]
    # Claude's usage: uncached + cache write + cache read is the input, the read its prefix.
    assert req["prompt_len"].tolist() == [16_103, 17_005, 17_602, 17_851]
    assert req["cached_tokens"].tolist() == [14_000, 16_100, 17_200, 17_700]
    assert req["output_len"].tolist() == [310, 120, 64, 48]
    assert req["session_id"].nunique() == 1 and set(req["model"]) == {"claude-opus-4-8"}
    assert req["request_id"].str.startswith("claude:claude:").all()
    notes = " | ".join(trace.notes)
    assert "rounds without a timed event, skipped: 1 (first: line 5)" in notes
    assert "2026-06-01T09:00:00.000+00:00" in notes
    assert "tools (5)" in notes and "project (5)" in notes and "round_index (5)" in notes


def test_the_public_example_reads_as_aiperf_reads_it() -> None:
    """AIPerf 0.13.0's TraceLab conversion (benchmarks/engines/tracelab_aiperf.py wrote the
    fixture) places each round at its latest input event, as this reader does; its output
    length adds `reasoning_output_tokens` to `output_tokens`, which TraceLab's own cost
    analysis counts as included already (this reader keeps `output_tokens`)."""
    path = shared_trace(EXAMPLE)
    trace = read_trace(path)
    req = trace.requests
    expected = json.loads(AIPERF.read_text(encoding="utf-8"))["sessions"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    reasoning = {r["trace_key"]: r["reasoning_output_tokens"] or 0 for r in rows}
    first_unix_s = min(s["first_submission_unix_s"] for s in expected.values())
    assert set(req["session_id"]) == set(expected)
    for session, want in expected.items():
        mine = req[req["session_id"] == session]
        start = float(mine["arrival_s"].iloc[0])
        assert np.allclose(mine["arrival_s"] - start, [r["t"] for r in want["requests"]],
                           atol=1e-6)
        assert start + first_unix_s == pytest.approx(want["first_submission_unix_s"], abs=1e-6)
        assert mine["prompt_len"].tolist() == [r["in"] for r in want["requests"]]
        added = [reasoning[k] for k in mine["request_id"]]
        assert (mine["output_len"] + added).tolist() == [r["out"] for r in want["requests"]]
    # The provider's hits: Claude's cache reads; Codex's in steps of 128 tokens.
    codex = req[req["session_id"].str.startswith("codex:")]
    assert (codex["cached_tokens"] % 128 == 0).all()
    assert int(req["cached_tokens"].sum()) == sum(r["prefix_tokens"] for r in rows)
    assert any(n.startswith("output_len is output_tokens, which holds Codex's reasoning")
               for n in trace.notes)


def test_a_gzipped_release_file_is_read_like_the_plain_one(tmp_path: Path) -> None:
    packed = tmp_path / "syfi_coding_trace.jsonl.gz"
    packed.write_bytes(gzip.compress(ROUNDS.read_bytes()))
    assert detect_format(packed) is TraceFormat.TRACELAB
    assert read_trace(packed).requests["arrival_s"].tolist() == [0.0, 7.4, 11.5, 15.0]


def test_the_user_is_the_tenant_and_an_unbalanced_input_is_noted(tmp_path: Path) -> None:
    path = _write(tmp_path, [_round(user="user_07"),
                             _round(round_id="r1", round_index=1, newly_append_tokens=5,
                                    user="user_09")])
    trace = read_trace(path)
    assert trace.requests["tenant"].tolist() == ["user_07", "user_09"]
    assert any("is not prefix_tokens + newly_append_tokens, read as given: 1 (first: line 2)"
               in n for n in trace.notes)


@pytest.mark.parametrize(("fields", "message"), [
    ({"prefix_tokens": 1200}, "line 1, field 'prefix_tokens': 1,200 cached tokens in a "
                              "1,000-token input"),
    ({"output_tokens": None}, "line 1, field 'output_tokens': 'None' is not a whole number"),
    ({"input_tokens_total": -3}, "line 1, field 'input_tokens_total': -3 is negative"),
    ({"timing_events": "soon"}, "line 1, field 'timing_events': not a list of events"),
    ({"timing_events": [{"event_type": "user_message", "timestamp": "2026-13-01T00:00:00Z"}]},
     "line 1, field 'timing_events[0].timestamp': '2026-13-01T00:00:00Z' is not an ISO-8601"),
])
def test_a_bad_round_is_one_line_naming_its_field(tmp_path: Path, fields: dict,
                                                  message: str) -> None:
    path = _write(tmp_path, [_round(**fields)])
    with pytest.raises(TraceSchemaError) as err:
        read_trace(path)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_a_file_of_untimed_rounds_or_broken_json_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, [_round(timing_events=[{"event_type": "text", "timestamp": None}])])
    with pytest.raises(TraceSchemaError, match=r"no round has a timed event \(1 in the file\)"):
        read_trace(path)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(_round()) + "\n{\"session_id\": \n", encoding="utf-8")
    with pytest.raises(TraceReadError, match="line 2: invalid JSON"):
        read_trace(broken)
