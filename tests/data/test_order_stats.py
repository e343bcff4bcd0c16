"""Exact streamed summaries equal numpy's on the whole sample, however it is cut into batches."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yaotu_trace.data import order_stats
from yaotu_trace.data.order_stats import summarize

QS = (0, 25, 50, 75, 90, 99, 100)


def _batches(values: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    edges = sorted({0, values.size, *(c % (values.size + 1) for c in cuts)})
    return [values[a:b] for a, b in itertools.pairwise(edges)]


def _check(values: np.ndarray, batches: list[np.ndarray]) -> None:
    got = summarize(lambda: iter(batches), QS, median=True)
    finite = values[np.isfinite(values)]
    assert got.count == finite.size
    if not finite.size:
        assert got.min is None and got.median is None and got.percentiles == {}
        return
    assert [got.percentiles[q] for q in QS] == np.percentile(finite, QS).tolist()
    assert got.median == float(np.median(finite))
    assert (got.min, got.max) == (float(finite.min()), float(finite.max()))
    assert got.mean == pytest.approx(float(finite.mean()), rel=1e-12, abs=1e-300)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e300, 1e300), st.sampled_from([np.nan, np.inf, -np.inf])),
                max_size=300),
       st.lists(st.integers(0, 400), max_size=6))
def test_any_floats_any_batches(values: list[float], cuts: list[int]) -> None:
    array = np.array(values, dtype=np.float64)
    _check(array, _batches(array, cuts))


def test_buckets_too_large_to_collect_are_split_down_to_single_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN heavy ties and values a few ulps apart, with collection allowed only for 3 values
    monkeypatch.setattr(order_stats, "COLLECT_VALUES", 3)
    rng = np.random.default_rng(7)
    base = np.nextafter(0.25, 1.0, dtype=np.float64)
    values = np.concatenate([np.full(5_000, 0.25), base + rng.integers(0, 9, 2_000) * 1e-17,
                             rng.exponential(0.02, 3_001), [-0.0, 0.0, -3.5]])
    rng.shuffle(values)
    # THEN every percentile still equals numpy's
    _check(values, _batches(values, [11, 4_000, 9_999]))


def test_the_sum_does_not_depend_on_the_batches() -> None:
    rng = np.random.default_rng(3)
    values = rng.exponential(0.03, 3 * order_stats.SUM_BLOCK + 17)
    one = summarize(lambda: iter([values]))
    many = summarize(lambda: iter(_batches(values, list(range(0, values.size, 977)))))
    assert one.total == many.total
    assert one.total == pytest.approx(float(np.sum(values)), rel=1e-13)


def test_passes_read_the_sample_again_and_stay_few() -> None:
    # GIVEN a counter of passes over a large sample
    passes = []
    values = np.random.default_rng(5).lognormal(-3.5, 1.0, 200_000)

    def read() -> list[np.ndarray]:
        passes.append(1)
        return _batches(values, list(range(0, values.size, 65_536)))

    got = summarize(read, (50, 90, 99))
    # THEN one pass counts and one collects (buckets are small)
    assert len(passes) == 2
    assert got.percentiles[99] == float(np.percentile(values, 99))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1,
                max_size=60))
def test_median_of_is_numpys_median_bit_for_bit(values: list[float]) -> None:
    """`median_of` stands in for `np.median` (which imports numpy.ma on its first call):
    the same float64, NaN for a sample holding one, infinities included."""
    sample = np.array(values, dtype=np.float64)
    with np.errstate(all="ignore"):  # two huge values overflow their mean in both
        expected = np.float64(np.median(sample))
        found = np.float64(order_stats.median_of(sample))
    assert found.tobytes() == expected.tobytes() or (np.isnan(expected) and np.isnan(found))


def test_median_of_hand_checked_and_refuses_an_empty_sample() -> None:
    assert order_stats.median_of(np.array([3.0, 1.0, 2.0])) == 2.0
    assert np.signbit(np.median(np.array([-0.0]))) == np.signbit(
        order_stats.median_of(np.array([-0.0])))  # numpy's mean makes it +0.0
    assert order_stats.median_of(np.array([4, 1, 3, 2])) == 2.5
    with pytest.raises(ValueError, match="empty"):
        order_stats.median_of(np.array([]))
