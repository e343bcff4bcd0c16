"""The success-rate interval, the other conditions on small tables, and the bootstrap noise, each
worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.diff.conditions import io_condition, model_condition, success_condition
from yaotu_trace.diff.match import match_requests
from yaotu_trace.diff.measures import MEASURES
from yaotu_trace.diff.noise import RESAMPLES, Resamples, measure_change
from yaotu_trace.diff.warmth import warmth_condition


def _trace(n: int, failed: int = 0, model: str | None = None, output_len: int = 4) -> Trace:
    rows = {"request_id": [f"r{i}" for i in range(n)], "arrival_s": np.arange(n, dtype=float),
            "prompt_len": np.full(n, 10), "output_len": np.full(n, output_len),
            "status": ["error"] * failed + ["ok"] * (n - failed)}
    if model is not None:
        rows["model"] = [model] * n
    return normalize(RawTrace(requests=pd.DataFrame(rows), format_name="canonical"), "t.csv")


def test_success_rate_differs_outside_the_two_proportion_interval() -> None:
    # 100/100 against 90/100: pooled p = 190/200 = 0.95; half-width
    # 1.96 · √(0.95 · 0.05 · (1/100 + 1/100)) = 1.96 · 0.030822 = 0.06041 < 0.10 → differs.
    before, after = _trace(100), _trace(100, failed=10)
    c = success_condition(before, after, match_requests(before, after), matched_only=False)
    assert c.status == "differs"
    assert c.after == {"completed": 90, "total": 100, "rate": 0.9}
    assert "± 6.04 %" in c.detail
    # 100/100 against 99/100: one point is not beyond the 1-point floor → same.
    after = _trace(100, failed=1)
    c = success_condition(before, after, match_requests(before, after), matched_only=False)
    assert c.status == "same"


def test_model_condition_reads_the_trace_then_the_option() -> None:
    a, b = _trace(3, model="llama"), _trace(3, model="qwen")
    assert model_condition(a, b, None, None, None).status == "differs"
    assert model_condition(a, a, None, None, None).status == "same"
    unnamed = _trace(3)
    assert model_condition(unnamed, unnamed, None, None, None).status == "unknown"
    given = model_condition(unnamed, unnamed, None, None, "Llama-3.1-8B")
    assert given.status == "same" and "taken for both runs" in given.detail
    assert model_condition(a, unnamed, None, None, None).status == "unknown"


def test_io_distribution_differs_when_outputs_are_capped_otherwise() -> None:
    # Every output 4 tokens before, 400 after: the two ECDFs never overlap, D = 1.
    before, after = _trace(50), _trace(50, output_len=400)
    c = io_condition(before, after, match_requests(before, after), matched_only=False)
    assert c.status == "differs"
    assert c.statistics["output_len_all_ks"] == 1.0
    assert c.statistics["prompt_len_all_ks"] == 0.0


def test_cache_warmth_is_unknown_without_cached_tokens() -> None:
    t = _trace(5)
    c = warmth_condition(t, t, EngineSettings())
    assert c.status == "unknown" and "no cached_tokens column" in c.detail


def _columns(ttft_s: np.ndarray) -> dict[str, np.ndarray]:
    return {"ttft_s": ttft_s}


def test_noise_is_the_bootstrap_spread_of_both_runs() -> None:
    ttft_p50 = next(m for m in MEASURES if m.name == "ttft_p50_s")
    rng = np.random.default_rng(7)
    before = _columns(rng.exponential(1.0, 400))
    same = _columns(rng.exponential(1.0, 400))
    faster = _columns(rng.exponential(0.5, 400))
    rows = np.arange(400)
    draws = np.random.default_rng(0)
    rb, ra = Resamples.of(rows, draws), Resamples.of(rows, draws)
    assert rb.draws.shape == (RESAMPLES, 400)
    # The noise is 1.96 √(sd_b² + sd_a²) of the P50 over the draws, recomputed here.
    sd = [float(np.std([np.percentile(c["ttft_s"][d], 50) for d in r.draws], ddof=1))
          for c, r in ((before, rb), (same, ra))]
    unchanged = measure_change(ttft_p50, before, same, rb, ra)
    assert unchanged.noise == pytest.approx(1.96 * math.hypot(*sd))
    # Two draws of one workload: the P50s differ by less than the noise.
    assert unchanged.change == "unchanged"
    # Half the service time: the P50 halves (≈ ln 2 → ln 2 / 2), far beyond the noise.
    assert measure_change(ttft_p50, before, faster, rb, ra).change == "improved"
    assert measure_change(ttft_p50, faster, before, rb, ra).change == "regressed"
