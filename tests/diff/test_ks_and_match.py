"""The pieces of `trace diff` checked by hand: the KS statistic and p-value, the request match
(by id, by content when ids differ, not at all for unrelated runs), the noise and the axis rule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.axes.base import AxisName, AxisResult, Status
from yaotu_trace.data.run_diff import MeasureChange
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.diff.axis_change import axis_change
from yaotu_trace.diff.ks import kolmogorov_q, ks_statistic, ks_test
from yaotu_trace.diff.match import match_requests, rank_correlation


def test_ks_statistic_of_5_against_5_by_hand() -> None:
    # x = 1..5, y = 3..7. The ECDFs at each pooled value t:
    #   t:    1    2    3    4    5    6    7
    #   F_x: .2   .4   .6   .8   1    1    1
    #   F_y:  0    0   .2   .4   .6   .8   1
    #   |.|: .2   .4   .4   .4   .4   .2   0   → D = 0.4
    x = np.array([5.0, 1, 4, 2, 3])
    y = np.array([3.0, 7, 6, 5, 4])
    assert ks_statistic(x, y) == pytest.approx(0.4)
    assert ks_statistic(x, x) == 0.0
    assert ks_statistic(x, x + 10) == 1.0  # disjoint samples


def test_ks_p_value_by_hand() -> None:
    # n = m = 5: en = √(25/10) = 1.5811; λ = (en + 0.12 + 0.11/en) · D = 1.7707 · 0.4 = 0.7083.
    # Q(0.7083) = 2 (e^{-2λ²} − e^{-8λ²} + e^{-18λ²} − ...) = 2 (0.36665 − 0.01807 + 0.00012)
    #           = 0.6974
    test = ks_test(np.array([1.0, 2, 3, 4, 5]), np.array([3.0, 4, 5, 6, 7]))
    lam = (math.sqrt(2.5) + 0.12 + 0.11 / math.sqrt(2.5)) * 0.4
    assert lam == pytest.approx(0.7083, abs=1e-4)
    assert test.p_value == pytest.approx(0.6974, abs=1e-3)
    # Q(1.36) ≈ 0.05 is the classic 5 % critical value of the Kolmogorov distribution.
    assert kolmogorov_q(1.36) == pytest.approx(0.0494, abs=5e-4)
    assert kolmogorov_q(0.0) == 1.0


def test_ks_on_large_samples_tells_another_distribution() -> None:
    rng = np.random.default_rng(1)
    same = ks_test(rng.normal(size=2000), rng.normal(size=2000))
    other = ks_test(rng.normal(size=2000), rng.normal(0.3, size=2000))
    assert same.p_value > 0.01
    assert other.p_value < 1e-6 and other.statistic > 0.05


def _trace(rows: list[dict[str, object]], path: str = "t.jsonl") -> Trace:
    return normalize(RawTrace(requests=pd.DataFrame(rows), format_name="canonical"), path)


def _requests(ids: list[str], prompts: list[list[int]], arrivals: list[float]
              ) -> list[dict[str, object]]:
    return [{"request_id": i, "arrival_s": t, "prompt_tokens": p, "prompt_len": len(p),
             "output_len": 4} for i, p, t in zip(ids, prompts, arrivals, strict=True)]


PROMPTS = [[1, 2, 3], [4, 5], [1, 2, 3], [9, 9, 9, 9]]


def test_match_by_content_when_ids_differ() -> None:
    # The same four prompts, renamed and arriving 10 s later. The prompt [1, 2, 3] comes twice:
    # its first occurrence before pairs with its first occurrence after (arrival order).
    before = _trace(_requests(["a", "b", "c", "d"], PROMPTS, [0.0, 1.0, 2.0, 3.0]))
    after = _trace(_requests(["w", "x", "y", "z"], PROMPTS, [10.0, 11.0, 12.0, 13.0]))
    m = match_requests(before, after)
    assert m.basis == "content and arrival"
    assert m.before_rows == (0, 1, 2, 3) and m.after_rows == (0, 1, 2, 3)
    assert m.before_share == m.after_share == 1.0
    assert m.order_correlation == pytest.approx(1.0)
    assert m.span_ratio == pytest.approx(1.0)  # 13 − 10 over 3 − 0
    assert m.gap_agreement == 1.0


def test_match_by_id_needs_the_same_prompt_length() -> None:
    # r0..r3 on both sides, but r3 carries another prompt after: three of four match.
    before = _trace(_requests(["r0", "r1", "r2", "r3"], PROMPTS, [0.0, 1.0, 2.0, 3.0]))
    after = _trace(_requests(["r0", "r1", "r2", "r3"], [*PROMPTS[:3], [7]], [0.0, 1.0, 2.0, 3.0]))
    m = match_requests(before, after)
    assert m.basis == "request_id"
    assert m.before_rows == (0, 1, 2) and m.after_rows == (0, 1, 2)
    assert m.before_share == pytest.approx(0.75)


def test_unrelated_runs_share_no_request() -> None:
    before = _trace(_requests(["a", "b"], [[1, 2], [3]], [0.0, 1.0]))
    after = _trace(_requests(["x", "y"], [[5, 6, 7], [8, 8]], [0.0, 1.0]))
    m = match_requests(before, after)
    assert m.count == 0 and m.basis == "none"


def test_rank_correlation_by_hand() -> None:
    # Ranks 1,2,3,4 against 4,3,2,1: perfectly reversed, ρ = −1; against 1,3,2,4:
    # ρ = 1 − 6 Σd²/(n(n²−1)) = 1 − 6·2/60 = 0.8.
    x = np.array([0.0, 1, 2, 3])
    assert rank_correlation(x, x[::-1].copy()) == pytest.approx(-1.0)
    assert rank_correlation(x, np.array([0.0, 2, 1, 3])) == pytest.approx(0.8)


def _axis(status: Status) -> AxisResult:
    return AxisResult(axis=AxisName.KV_MEMORY, status=status, cause=None, score=None,
                      score_basis="", sources=(), metrics=None)


def _measure(change: str) -> MeasureChange:
    return MeasureChange(name="m", before=1.0, after=0.5, unit="ratio", change=change,  # type: ignore[arg-type]
                         noise=0.1, basis="")


def test_axis_change_by_measures_then_by_status() -> None:
    ok, bad = _axis(Status.OK), _axis(Status.BOTTLENECK)
    # A measure beyond noise decides, whatever the statuses say.
    assert axis_change(AxisName.KV_MEMORY, ok, bad, (_measure("improved"),)).change == "improved"
    # Every measure within noise: unchanged, even when the status crossed a threshold.
    flipped = axis_change(AxisName.KV_MEMORY, bad, ok, (_measure("unchanged"),))
    assert flipped.change == "unchanged" and "bottleneck → ok" in flipped.reason
    # No measure on both runs: the status decides.
    assert axis_change(AxisName.KV_MEMORY, bad, ok, ()).change == "improved"
    assert axis_change(AxisName.KV_MEMORY, ok, ok, ()).change == "unchanged"
    # As many up as down: the headline (first) measure decides.
    mixed = (_measure("regressed"), _measure("improved"))
    assert axis_change(AxisName.KV_MEMORY, ok, ok, mixed).change == "regressed"
    # Nothing known on an undecided run.
    undecided = _axis(Status.INSUFFICIENT_DATA)
    assert axis_change(AxisName.KV_MEMORY, undecided, ok, ()).change == "unknown"


def test_importing_the_package_loads_nothing_heavy() -> None:
    import subprocess
    import sys

    # By its module's name: `yaotu_trace.diff` is the API's command (`from yaotu_trace import
    # diff`), the package its core.
    code = ("import importlib, sys; d = importlib.import_module('yaotu_trace.diff'); "
            "assert 'pandas' not in sys.modules; assert callable(d.diff_traces)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_numbered_ids_shifted_by_a_dropped_request_fall_back_to_content() -> None:
    # The after run lost request "b": a reader numbering rows r0, r1, r2 pairs r1 with "c" and
    # r2 with "d", whose prompt lengths differ; the prompts pair the three that remain.
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10], [9, 9, 9, 9]]
    before = _trace(_requests(["r0", "r1", "r2", "r3"], prompts, [0.0, 1.0, 2.0, 3.0]))
    after = _trace(_requests(["r0", "r1", "r2"], [prompts[0], *prompts[2:]], [0.0, 2.0, 3.0]))
    m = match_requests(before, after)
    assert m.basis == "content and arrival"
    assert m.before_rows == (0, 2, 3) and m.after_rows == (0, 1, 2)
    assert m.before_share == pytest.approx(0.75) and m.after_share == 1.0
