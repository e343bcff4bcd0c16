"""The measurement window (`--warmup`, replay-spec §6): hand-checked small replays and sweeps.

Every expected number below is worked out by hand in the test's docstring or comments, from
the rules of replay-spec §3–§4 (longest cached prefix; LRU; the cache filled once the distinct
blocks inserted reach the capacity).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_replay_trace import make_trace

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix import replay_trace_with_requests, rules_for
from yaotu_trace.prefix.sweep_trace import CurveSectionSpec, sweep_trace
from yaotu_trace.prefix.window import (
    distinct_blocks_before,
    measurement_window,
    parse_warmup,
)

# B = 2 under the `none` preset: blocks (1,2) (3,4) | (1,2) (3,4) | (1,2) (5,6) | (1,2) (3,4).
FOUR = [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 5, 6], [1, 2, 3, 4]]
B2 = {"block_size_tokens": 2}


def test_a_window_of_two_counts_only_the_last_two_yet_the_first_two_warm_the_cache() -> None:
    """Unlimited cache: hits [0, 4, 2, 4]. With --warmup 2 only requests 3 and 4 count: 6 of
    8 prompt tokens. Replayed alone, those two would hit [0, 2] (request 3 finds nothing):
    the 2 + 4 counted here come from blocks the first two requests inserted."""
    summary, table = replay_trace_with_requests(make_trace(FOUR), rules_for("none", **B2),
                                                warmup="2")
    assert table.columns["hit_tokens"].tolist() == [0, 4, 2, 4]
    assert table.columns["measured"].tolist() == [False, False, True, True]
    assert summary.requests == 2
    assert summary.prompt_tokens == 8
    assert summary.saved_prefill_tokens == 6
    assert summary.remaining_prefill_tokens == 2
    assert summary.hit_ratio == pytest.approx(6 / 8)
    # request-averaged: (2/4 + 4/4) / 2; blocks: 3 hit of 4 cacheable
    assert summary.request_averaged_hit_ratio == pytest.approx(0.75)
    assert summary.cacheable_block_hit_ratio == pytest.approx(3 / 4)
    assert [(b[2]) for b in summary.hit_length.share_buckets if b[2]] == [1, 1]
    cold, _ = replay_trace_with_requests(make_trace(FOUR[2:]), rules_for("none", **B2))
    assert cold.saved_prefill_tokens == 2
    window = summary.to_dict()["measurement_window"]
    assert window["warmup_requests"] == 2
    assert window["measured_requests"] == 2
    assert window["warmup_seconds"] == 2.0  # arrivals 0, 1 | 2, 3
    assert window["filled_before_window"] is None  # unlimited: nothing to fill


def test_the_waterfall_counts_the_window_and_still_telescopes() -> None:
    """Ideal over requests 3 and 4: token-level LCP with an earlier request = 2 + 4 = 6;
    nothing is lost at B = 2, unlimited, so every step keeps 6."""
    summary, table = replay_trace_with_requests(make_trace(FOUR), rules_for("none", **B2),
                                                warmup="50%")
    assert summary.ideal_hit_tokens == 6
    assert [s.hit_tokens for s in summary.waterfall] == [6] * 6  # capacity split in two
    assert summary.ideal_hit_tokens - sum(s.loss_tokens for s in summary.waterfall) == 6
    assert table.columns["ideal_hit_tokens"].tolist() == [0, 4, 2, 4]  # --out keeps all


def test_without_a_window_nothing_changes() -> None:
    summary, table = replay_trace_with_requests(make_trace(FOUR), rules_for("none", **B2))
    assert summary.window is None
    assert summary.to_dict()["measurement_window"] is None
    assert "measured" not in table.columns
    assert summary.saved_prefill_tokens == 10


@pytest.mark.parametrize(("text", "warmup_requests"), [
    ("0.5", 2), ("50%", 2), ("0.49", 1), ("25%", 1), ("0", 0),      # share: floor(4 · share)
    ("2", 2), ("2req", 2), ("3 REQ", 3),                             # requests
    ("2s", 2), ("1.5s", 2), ("0.5s", 1), ("0.01min", 1), ("3sec", 3),  # arrivals 0, 1, 2, 3 s
])
def test_every_form_of_the_window(text: str, warmup_requests: int) -> None:
    """Requests arrive at 0, 1, 2 and 3 s; a time window counts those arriving before it ends
    (0.01 min = 0.6 s: only the first)."""
    window = measurement_window(text, np.array([0.0, 1.0, 2.0, 3.0]))
    assert window.warmup_requests == warmup_requests
    assert window.measured_requests == 4 - warmup_requests
    assert window.mask().tolist() == [i >= warmup_requests for i in range(4)]


def test_time_is_measured_from_the_first_arrival() -> None:
    window = measurement_window("10min", np.array([1000.0, 1300.0, 1599.0, 1600.0, 2000.0]))
    assert window.warmup_requests == 3
    assert window.warmup_seconds == 600.0
    assert window.first_measured_arrival_s == 1600.0


def test_parse_names_the_kind() -> None:
    assert (parse_warmup("50%").kind, parse_warmup("50%").value) == ("share", 0.5)
    assert (parse_warmup("1000").kind, parse_warmup("1000").value) == ("requests", 1000)
    assert (parse_warmup("2h").kind, parse_warmup("2h").value) == ("seconds", 7200)


@pytest.mark.parametrize(("text", "says"), [
    ("-1", "not a window"),
    ("150%", "below 100%"),
    ("100%", "below 100%"),
    ("abc", "not a window"),
    ("", "not a window"),
    ("1.5", "share of requests is below 1"),
    ("2.5req", "whole"),
    ("10 parsecs", "not a window"),
])
def test_bad_values_are_one_line_config_errors(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        parse_warmup(text)
    assert "\n" not in str(caught.value)
    assert "--warmup" in str(caught.value)


@pytest.mark.parametrize("text", ["4", "4req", "10s", "3.5s"])
def test_a_window_covering_every_request_is_an_error(text: str) -> None:
    """Four requests, all inside the window: nothing is left to measure, and a hit ratio over
    no request is no answer, so it is refused rather than reported as 0."""
    with pytest.raises(ConfigError, match="covers all 4 requests"):
        measurement_window(text, np.array([0.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ConfigError, match="covers all 4 requests"):
        replay_trace_with_requests(make_trace(FOUR), rules_for("none", **B2), warmup=text)


def test_a_cache_that_never_filled_before_the_window_is_marked() -> None:
    """The first two requests insert two distinct blocks, (1,2) and (1,2)(3,4): a cache of 2
    blocks filled before the window, one of 3 did not."""
    filled, _ = replay_trace_with_requests(
        make_trace(FOUR), rules_for("none", capacity_blocks=2, **B2), warmup="2")
    window = filled.to_dict()["measurement_window"]
    assert window["distinct_blocks_before_window"] == 2
    assert window["filled_before_window"] is True
    # Capacity 2: request 3 hits (1,2), inserts (5,6) evicting (3,4); request 4 hits 2.
    assert filled.saved_prefill_tokens == 4
    empty, _ = replay_trace_with_requests(
        make_trace(FOUR), rules_for("none", capacity_blocks=3, **B2), warmup="2")
    assert empty.to_dict()["measurement_window"]["filled_before_window"] is False
    assert any("never filled" in n for n in empty.notes)


def test_per_instance_every_cache_must_have_filled() -> None:
    """Round-robin over 2 instances: requests 1 and 3 go to instance 0, 2 and 4 to instance 1.
    A warm-up of 2 gives each cache two distinct blocks, (1,2) and (1,2)(3,4): both filled at
    capacity 2. A warm-up of 1 reaches instance 0 only; instance 1 starts the window empty."""
    rules = rules_for("none", capacity_blocks=2, scope="instance", route="round-robin",
                      instances=2, **B2)
    two, _ = replay_trace_with_requests(make_trace(FOUR), rules, warmup="2")
    w = two.to_dict()["measurement_window"]
    assert (w["distinct_blocks_before_window"], w["filled_before_window"]) == (2, True)
    one, _ = replay_trace_with_requests(make_trace(FOUR), rules, warmup="1")
    w = one.to_dict()["measurement_window"]
    assert (w["distinct_blocks_before_window"], w["filled_before_window"]) == (0, False)
    assert any("every one of them" in n for n in one.notes)


def test_distinct_blocks_count_per_cache_and_outputs() -> None:
    offsets = np.array([0, 2, 4, 5])
    ids = np.array([0, 1, 0, 2, 3])
    assert distinct_blocks_before(offsets, ids, 2) == (3, 1)
    assert distinct_blocks_before(offsets, ids, 2, np.array([0, 1, 0])) == (2, 2)
    # Request 3 is a cache of its own that the warm-up never reached.
    assert distinct_blocks_before(offsets, ids, 2, np.array([0, 0, 1])) == (0, 2)
    out_offsets, out_ids = np.array([0, 1, 1, 1]), np.array([7])
    assert distinct_blocks_before(offsets, ids, 1, None, out_offsets, out_ids) == (3, 1)


@pytest.mark.parametrize("touch_order", ["tail-first", "head-first"])
def test_the_windowed_curve_equals_windowed_replays_at_every_capacity(touch_order: str) -> None:
    """The one-pass curve with a window against LRU replays with the same window."""
    rng = np.random.default_rng(7)
    stems = [list(rng.integers(0, 50, size=6)) for _ in range(5)]
    prompts = [stems[rng.integers(0, 5)][: rng.integers(2, 7)] + list(rng.integers(0, 50, 3))
               for _ in range(40)]
    trace = make_trace(prompts)
    rules = rules_for("none", touch_order=touch_order, **B2)
    section, curve = sweep_trace(trace, rules, CurveSectionSpec(preset="none"), warmup="15")
    assert section.requests == 25
    fill = section.window["distinct_blocks_before_window"]
    for capacity in range(1, 40):
        summary, _ = replay_trace_with_requests(
            trace, rules.with_(capacity_blocks=capacity), waterfall=False, warmup="15")
        assert int(curve.hit_tokens_at(capacity)) == summary.saved_prefill_tokens, capacity
        assert curve.prompt_tokens_total == summary.prompt_tokens
        assert summary.window is not None
        assert summary.window.filled_before_window is (capacity <= fill)
    for point in section.points:
        assert point.filled_before_window is (point.capacity_blocks <= fill)


def test_a_curve_without_a_window_carries_no_mark() -> None:
    section, _ = sweep_trace(make_trace(FOUR), rules_for("none", **B2),
                             CurveSectionSpec(preset="none"))
    assert section.window is None
    assert all(p.filled_before_window is None for p in section.points)


def test_per_tenant_caches_must_each_have_filled() -> None:
    """--capacity-per-tenant: a cache of 2 blocks per tenant. Tenants a, b, a, b: the warm-up
    gives each tenant's cache its two blocks (filled); tenants a, a, b, b: b's cache is empty
    when the window begins (0 distinct blocks, not filled)."""
    rules = rules_for("vllm", block_size_tokens=2, last_token_rule=False, capacity_blocks=2,
                      capacity_per_tenant=True)
    for tenants, fill in ((["a", "b", "a", "b"], 2), (["a", "a", "b", "b"], 0)):
        summary, _ = replay_trace_with_requests(make_trace(FOUR, tenants=tenants), rules,
                                                warmup="2", waterfall=False)
        w = summary.to_dict()["measurement_window"]
        assert (w["distinct_blocks_before_window"], w["filled_before_window"]) == (fill,
                                                                                  fill == 2)
