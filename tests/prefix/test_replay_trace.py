"""replay_trace on small in-code traces: summary, waterfall, hot prefixes, observed hits."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import ConfigError, TraceSchemaError
from yaotu_trace.prefix import effective_rules, replay_trace, replay_trace_with_requests, rules_for


def make_trace(prompts, *, tenants=None, instances=None, cached=None, finish=None,
               block_ids_of: int | None = None, prompt_len=None, model=None):
    data: dict[str, object] = {
        "arrival_s": [float(i) for i in range(len(prompts))],
        "prompt_len": prompt_len if prompt_len is not None else [len(p) for p in prompts],
        "output_len": [1] * len(prompts),
        ("prompt_block_ids" if block_ids_of else "prompt_tokens"): prompts,
    }
    data.update({name: values for name, values in (
        ("tenant", tenants), ("instance", instances), ("cached_tokens", cached),
        ("finish_s", finish), ("model", model)) if values is not None})
    raw = RawTrace(requests=pd.DataFrame(data), format_name="test",
                   source_block_size=block_ids_of)
    return normalize(raw, "test.jsonl")


WORKED = [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]]


def test_worked_example_through_a_trace() -> None:
    summary, table = replay_trace_with_requests(make_trace(WORKED),
                                                rules_for("none", block_size_tokens=1))
    assert table.columns["hit_tokens"].tolist() == [0, 3, 0]
    assert summary.prompt_tokens == 12
    assert summary.remaining_prefill_tokens == 9
    assert summary.hit_ratio == pytest.approx(3 / 12)
    two, table = replay_trace_with_requests(make_trace(WORKED),
                                            rules_for("none", block_size_tokens=2))
    assert table.columns["hit_tokens"].tolist() == [0, 2, 0]
    # The waterfall: ideal 3 tokens, block granularity loses 1.
    steps = {s.step: s.loss_tokens for s in two.waterfall}
    assert two.ideal_hit_tokens == 3
    assert steps["block_granularity"] == 1


def test_to_dict_is_json_ready() -> None:
    trace = make_trace([[1, 2, 3, 4, 5]] * 4, tenants=["a", "b", "a", None],
                       cached=[0, 0, 4, None])
    summary = replay_trace(trace, rules_for("vllm", block_size_tokens=2, capacity_blocks=3,
                                            scope="instance", route="round-robin",
                                            instances=2))
    text = json.dumps(summary.to_dict(), allow_nan=False)
    again = json.loads(text)
    assert again["hit_ratio"] == summary.hit_ratio
    assert again["rules"]["scope"] == "instance"
    assert [g["label"] for g in again["per_tenant"]] == ["a", "b", "(none)"]
    assert len(again["per_instance"]) == 2

    def walk(value: object) -> None:
        assert not isinstance(value, np.generic)
        if isinstance(value, float):
            assert math.isfinite(value)
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        if isinstance(value, list | tuple):
            for v in value:
                walk(v)

    walk(summary.to_dict())
    from yaotu_trace.data.report import to_builtins

    json.dumps(to_builtins(summary), allow_nan=False)  # the dataclass itself is report-safe


@st.composite
def small_traces(draw: st.DrawFn):
    n = draw(st.integers(1, 10))
    prompts = [draw(st.lists(st.integers(0, 2), min_size=1, max_size=9)) for _ in range(n)]
    for i in range(1, n):
        if draw(st.booleans()):
            j = draw(st.integers(0, i - 1))
            prompts[i] = prompts[j][: draw(st.integers(0, len(prompts[j])))] + prompts[i]
    tenants = draw(st.lists(st.sampled_from(["a", "b"]), min_size=n, max_size=n))
    return prompts, tenants


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_traces(), st.integers(1, 4), st.booleans(), st.booleans(),
       st.one_of(st.none(), st.integers(1, 6)), st.sampled_from([None, "round-robin",
                                                                 "prefix-affinity"]))
def test_waterfall_sums_exactly(trace, block, ltr, isolate, capacity, route) -> None:
    prompts, tenants = trace
    kw = {"scope": "instance", "route": route, "instances": 2} if route else {}
    rules = rules_for("none", block_size_tokens=block, last_token_rule=ltr,
                      tenant_isolation=isolate, capacity_blocks=capacity, **kw)
    summary, table = replay_trace_with_requests(make_trace(prompts, tenants=tenants), rules)
    assert sum(s.loss_tokens for s in summary.waterfall) == (summary.ideal_hit_tokens
                                                             - summary.saved_prefill_tokens)
    cols = table.columns
    losses = sum(cols[c] for c in cols if c.startswith("loss_"))
    assert (cols["ideal_hit_tokens"] - losses == cols["hit_tokens"]).all()
    # The ideal is the token-granular longest common prefix with any earlier request.
    ideal = [max((_lcp(p, q) for q in prompts[:i]), default=0) for i, p in enumerate(prompts)]
    assert cols["ideal_hit_tokens"].tolist() == ideal
    # Rules that only remove reuse lose >= 0 per request (no routing decisions involved).
    for step in ("block_granularity", "last_token_rule", "tenant_isolation"):
        assert (cols[f"loss_{step}_tokens"] >= 0).all()


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_hot_prefixes_name_the_reason_and_tenants() -> None:
    system = list(range(100, 108))  # an 8-token shared system prompt
    prompts = [[*system, i] for i in range(6)]
    tenants = ["a", "b", "c", "a", "b", "c"]
    summary = replay_trace(make_trace(prompts, tenants=tenants),
                           rules_for("vllm", block_size_tokens=4))
    hot = summary.hot_prefixes
    assert len(hot) == 1
    top = hot[0]
    # Isolation: the first request of b and of c recompute the 8 shared tokens.
    assert top.by_reason_tokens == {"isolation": 16}
    assert top.prefix_tokens == 8
    assert top.times == 2
    assert set(top.tenants) == {"b", "c"}
    steps = {s.step: s.loss_tokens for s in summary.waterfall}
    assert steps["tenant_isolation"] == 16


def test_hot_prefixes_from_eviction() -> None:
    shared = [7] * 8
    prompts = [[*shared, 1], [5] * 8, [*shared, 2]]
    summary = replay_trace(make_trace(prompts),
                           rules_for("none", block_size_tokens=4, capacity_blocks=2))
    assert summary.hot_prefixes[0].by_reason_tokens == {"eviction": 8}


def test_observed_agreement_and_warm_start() -> None:
    prompts = [[1, 2, 3, 4]] * 10
    agree = replay_trace(make_trace(prompts, cached=[0] + [2] * 9),
                         rules_for("vllm", block_size_tokens=2))
    assert agree.observed.exact_match_share == 1.0
    assert not agree.observed.warm_start
    warm = replay_trace(make_trace(prompts, cached=[2] * 10),
                        rules_for("vllm", block_size_tokens=2))
    assert warm.observed.warm_start
    assert warm.observed.early_excess_tokens == 2


def test_observed_block_size_mismatch() -> None:
    prompts = [[1] * 40] * 6
    summary = replay_trace(make_trace(prompts, cached=[0, 30, 30, 30, 30, 30]),
                           rules_for("vllm", block_size_tokens=16))
    assert summary.observed.block_size_mismatch
    assert summary.observed.observed_block_gcd_tokens == 30


def test_block_id_trace_needs_a_multiple_of_the_source_block() -> None:
    trace = make_trace([[1, 2], [1, 2]], block_ids_of=4, prompt_len=[8, 8])
    with pytest.raises(ConfigError, match="cannot be split"):
        replay_trace(trace, rules_for("vllm", block_size_tokens=6))
    rules, _, notes = effective_rules(trace, "lmcache")
    assert rules.block_size_tokens == 256
    rules, _, notes = effective_rules(trace.__class__(
        table=trace.requests, path="x", format_name="test", source_block_size=48), "vllm")
    assert rules.block_size_tokens == 48 and notes
    with pytest.raises(ConfigError, match="cannot be split"):
        effective_rules(trace.__class__(table=trace.requests, path="x", format_name="test",
                                        source_block_size=48), "vllm", block_size_tokens=16)


def test_trace_instance_column_is_the_default_for_instance_scope() -> None:
    prompts = [[1, 2, 3]] * 4
    summary, table = replay_trace_with_requests(
        make_trace(prompts, instances=["x", "y", "x", "y"]),
        rules_for("none", block_size_tokens=1, scope="instance"))
    assert table.columns["hit_tokens"].tolist() == [0, 0, 3, 3]
    assert [g.label for g in summary.per_instance] == ["x", "y"]


def test_models_are_namespaces() -> None:
    prompts = [[1, 2, 3]] * 3
    _, table = replay_trace_with_requests(make_trace(prompts, model=["m1", "m2", "m1"]),
                                          rules_for("none", block_size_tokens=1,
                                                    tenant_isolation=False))
    assert table.columns["hit_tokens"].tolist() == [0, 0, 3]


def test_trace_without_content_is_a_clear_error() -> None:
    raw = RawTrace(requests=pd.DataFrame({"arrival_s": [0.0], "prompt_len": [5],
                                          "output_len": [1]}), format_name="test")
    with pytest.raises(TraceSchemaError, match="no prompt content"):
        replay_trace(normalize(raw, "t.csv"), rules_for("vllm"))
