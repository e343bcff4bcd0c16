"""Any small trace, consistent or not, gives a JSON-clean diagnosis (no crash, no NaN)."""

from __future__ import annotations

import json

from diag_factories import make_trace
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.commands.diagnose import diagnose_trace as diagnose
from yaotu_trace.data.telemetry_fit import (
    MIN_OVERLAP_SHARE,
    Span,
    overlap_share,
    trace_span,
)
from yaotu_trace.errors import TraceReadError

times = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)


@st.composite
def traces(draw):
    n = draw(st.integers(min_value=1, max_value=8))
    arrival = sorted(draw(st.lists(times, min_size=n, max_size=n)))
    columns: dict = {
        "arrival_s": arrival,
        "prompt_len": draw(st.lists(st.integers(0, 600), min_size=n, max_size=n)),
        "output_len": draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)),
    }
    for name in ("scheduled_s", "first_token_s", "finish_s"):
        if draw(st.booleans()):
            columns[name] = [a + draw(times) if draw(st.booleans()) else draw(times)
                             for a in arrival]
    if draw(st.booleans()):
        columns["token_times_s"] = [sorted(draw(st.lists(times, max_size=6))) for _ in range(n)]
    if draw(st.booleans()):
        columns["instance"] = draw(st.lists(st.sampled_from(["a", "b"]), min_size=n, max_size=n))
    if draw(st.booleans()):
        columns["num_preemptions"] = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    if draw(st.booleans()):
        columns["prompt_tokens"] = [list(range(p)) for p in columns["prompt_len"]]
        if draw(st.booleans()):
            columns["cached_tokens"] = [p // 2 for p in columns["prompt_len"]]
    steps = None
    if draw(st.booleans()):
        k = draw(st.integers(min_value=1, max_value=6))
        start = sorted(draw(st.lists(times, min_size=k, max_size=k)))
        steps = {"start_s": start, "end_s": [s + draw(st.floats(0, 2)) for s in start],
                 "num_waiting": draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)),
                 "prefill_tokens": draw(st.lists(st.integers(0, 900), min_size=k, max_size=k)),
                 "decode_tokens": draw(st.lists(st.integers(0, 9), min_size=k, max_size=k)),
                 "num_running": draw(st.lists(st.integers(0, 9), min_size=k, max_size=k)),
                 "kv_blocks_used": draw(st.lists(st.integers(0, 100), min_size=k, max_size=k)),
                 "kv_blocks_total": [100] * k,
                 "num_preempted": draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))}
    return columns, steps


DENORMAL_STEP = (
    {"arrival_s": [0.0] * 3, "prompt_len": [0] * 3, "output_len": [0] * 3,
     "scheduled_s": [0.0, 0.0, 4.0], "finish_s": [0.0] * 3, "instance": ["a"] * 3},
    {"start_s": [0.0], "end_s": [2.2250738585072014e-308], "num_waiting": [0],
     "prefill_tokens": [0], "decode_tokens": [0], "num_running": [0], "kv_blocks_used": [0],
     "kv_blocks_total": [100], "num_preempted": [0]},
)


# Requests queued beside one step that scheduled nothing: no token budget to infer (it was
# taken as 0, and the batch-budget ledger entry divided by it).
EMPTY_STEP = (
    {"arrival_s": [0.0] * 4, "prompt_len": [0] * 4, "output_len": [0] * 4,
     "finish_s": [0.0] * 4},
    {"start_s": [0.0], "end_s": [1.0], "num_waiting": [1], "prefill_tokens": [0],
     "decode_tokens": [0], "num_running": [1], "kv_blocks_used": [0], "kv_blocks_total": [100],
     "num_preempted": [0]},
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.booleans())
@example(DENORMAL_STEP, False)
@example(EMPTY_STEP, False)
def test_diagnosis_is_json_clean_for_any_small_trace(case, with_model) -> None:
    columns, steps = case
    trace = make_trace(columns, steps=steps)
    engine = EngineSettings(kv_capacity_tokens=512.0, kv_bytes_per_token=1000,
                            active_params=10**6) if with_model else EngineSettings()
    try:
        doc = diagnose(trace, settings=engine).to_dict()
    except TraceReadError as exc:  # a step log from another run is refused, not judged
        assert trace.steps is not None and "they are from different runs" in str(exc)
        span = trace.steps.span()
        assert span is not None
        # too little overlap, no request in it, or fewer tokens than the requests need
        assert (overlap_share(Span(*span), trace_span(trace)) < MIN_OVERLAP_SHARE
                or "but no request of" in str(exc) or "need at least" in str(exc))
        return
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["verdict"]["ranking"]
    for axis in doc["axes"]:
        assert axis["status"] in ("ok", "warning", "bottleneck", "insufficient_data")
        if axis["status"] == "insufficient_data":
            assert axis["missing"]
