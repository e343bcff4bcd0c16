"""Text charts: hand-checked sparklines, histograms and markers, widths kept, ASCII fallback."""

from __future__ import annotations

import pytest

from yaotu_trace.data.charts import TerminalCharts
from yaotu_trace.data.figures import Series
from yaotu_trace.data.prefix_reuse import CapacityPoint, ReuseOverview
from yaotu_trace.data.workload_figures import ArrivalSeries, LengthDistribution, Window
from yaotu_trace.render.text_charts import (
    arrivals_chart,
    capacity_chart,
    chart_lines,
    group_means,
    kv_chart,
    length_chart,
    levels,
    marks,
    ranked_spans,
    sparkline,
    time_means,
)


def test_each_eighth_of_the_peak_is_one_block_higher() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7, 8]) == " ▁▂▃▄▅▆▇█"
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7, 8], unicode=False) == " .:-=+*#@"


def test_the_peak_is_the_highest_block_and_a_small_value_is_never_blank() -> None:
    assert levels([0.0, 0.001, 50.0, 100.0]) == [0, 1, 4, 8]
    line = sparkline([3.0, 0.01, 9.0, 4.5])
    assert line == "▃▁█▄"
    assert line[2] == max(line)  # the block characters sort by height


def test_a_given_top_scales_below_full_height_and_clips_above_it() -> None:
    assert sparkline([0.5, 1.0, 2.0], top=2.0) == "▂▄█"
    assert sparkline([4.0], top=2.0) == "█"
    assert sparkline([0.0, 0.0]) == "  "  # nothing to scale: blank, not a crash


def test_groups_average_runs_of_equal_length() -> None:
    assert group_means([1, 3, 5, 7, 9], 2) == ([3.0, 8.0], 3)  # k = 3; the last run is short
    assert group_means([1, 2], 10) == ([1.0, 2.0], 1)


def test_time_means_bucket_by_time_and_leave_empty_columns_empty() -> None:
    means, start, width_s = time_means([0.0, 1.0, 9.0, 10.0], [2.0, 4.0, 6.0, 8.0], 5)
    assert (start, width_s) == (0.0, 2.0)
    assert means == [3.0, None, None, None, 7.0]


def test_marks_keep_each_arrow_under_its_column_and_move_a_label_that_collides() -> None:
    assert marks(40, [(0, "a"), (5, "b")], unicode=False) == ["^a   ^b"]
    # No room after the first arrow: its label goes before it, else on a second line.
    assert marks(40, [(8, "p50 9"), (10, "p99 80")]) == ["   p50 9▲ ▲p99 80"]
    assert marks(40, [(2, "p50 9"), (4, "p99 80")]) == ["  ▲ ▲p99 80", "  p50 9"]
    assert marks(6, [(0, "long label")]) == ["▲", "long l"]


def test_ranked_spans_underline_each_window_with_its_rank() -> None:
    assert ranked_spans(12, [(6, 8), (1, 2)]) == " 2▔   1▔▔"
    assert ranked_spans(12, [(0, 0)], unicode=False) == "1"


def _arrivals(rates: list[float], busiest: tuple[Window, ...] = ()) -> ArrivalSeries:
    return ArrivalSeries(bin_s=1.0, t_s=tuple(float(k) for k in range(len(rates))),
                         requests_per_s=tuple(rates), prompt_tokens_per_s=tuple(rates),
                         output_tokens_per_s=tuple(rates), mean_rate_rps=sum(rates) / len(rates),
                         peak_rate_rps=max(rates), busiest=busiest, bursts=())


def test_arrivals_chart_marks_the_busiest_window_under_the_peak() -> None:
    rates = [1.0] * 20 + [8.0, 8.0] + [1.0] * 18
    window = Window(start_s=20.0, end_s=22.0, requests=16, rate_rps=8.0)
    lines = arrivals_chart(_arrivals(rates, (window,)), 80)
    assert lines[0] == "Arrivals over time (requests/s; one column = 1 s, 40 s in all)"
    assert lines[1] == "  " + "▁" * 20 + "██" + "▁" * 18
    assert lines[2] == "  " + " " * 20 + "1▔"
    assert lines[3] == "  busiest 2 s: 1 8.00 req/s from 20 s"
    assert lines[4] == "  peak 8.00 req/s (per 1 s column), mean 1.35 req/s"


def test_arrivals_wider_than_the_terminal_are_averaged_into_its_width() -> None:
    rates = [float(k % 10) for k in range(400)]
    for width in (40, 80, 100, 140):
        lines = arrivals_chart(_arrivals(rates), width)
        assert all(len(line) <= width for line in lines)
        spark = next(line for line in lines if "▁" in line or "█" in line)[2:]
        assert len(spark) <= width - 2
        assert len(spark) == -(-400 // -(-400 // (width - 2)))  # one column per run of bins


def _lengths() -> LengthDistribution:
    # Bins of 10 tokens from 0 to 50; p50 in the second bin, p99 in the last.
    return LengthDistribution(label="prompt tokens", edges=(0.0, 10.0, 20.0, 30.0, 40.0, 50.0),
                              counts=(2, 8, 4, 0, 1), log_x=False, cdf_tokens=(), cdf_share=(),
                              total=15, p50=14.0, p90=25.0, p99=48.0)


def test_length_histogram_marks_p50_and_p99_under_their_bins() -> None:
    lines = length_chart(_lengths(), 60)
    assert lines == [
        "Prompt tokens (15 requests; linear bins 0 to 50)",
        "  ▂▂██▄▄  ▁▁",  # counts 2, 8, 4, 0, 1: two columns per bin
        "    ▲     ▲p99 48",  # p50 = 14 in the second bin, p99 = 48 in the fifth
        "    p50 14",
    ]


def test_length_histogram_narrower_than_its_bins_sums_neighbours() -> None:
    lines = length_chart(_lengths(), 2 + 10)  # room for 10 columns: bins keep 2 each
    assert "  ▂▂██▄▄  ▁▁" in lines
    assert all(len(line) <= 12 for line in lines)
    # 15 columns for 30 bins: pairs summed, 2 each and 1 + 10 in the last
    many = LengthDistribution(label="output tokens", edges=tuple(float(k) for k in range(31)),
                              counts=(1,) * 29 + (10,), log_x=False, cdf_tokens=(),
                              cdf_share=(), total=39, p50=15.0, p90=28.0, p99=29.5)
    assert "  " + "▂" * 14 + "█" in length_chart(many, 2 + 15)


def _point(label: str, blocks: int, ratio: float) -> CapacityPoint:
    return CapacityPoint(label=label, capacity_blocks=blocks, capacity_tokens=16 * blocks,
                         capacity_bytes=None, hit_tokens=0, hit_ratio=ratio,
                         share_of_unlimited=ratio / 0.8, block_hit_ratio_over_full_blocks=ratio)


def test_capacity_bars_are_in_capacity_order_and_as_long_as_the_hit_ratio() -> None:
    overview = ReuseOverview(available=True, preset="vllm", hit_ratio=0.8,
                             shares=(_point("50%", 10, 0.4), _point("90%", 40, 0.72)),
                             knee=_point("knee", 20, 0.6), full_reuse=_point("full reuse", 90, 0.8))
    lines = capacity_chart(overview, 80)
    assert lines[0].startswith("Prefix hit ratio vs LRU capacity (preset vllm")
    names = [line.split("  ")[1].split(" ")[0] for line in lines[1:]]
    assert names == ["50%", "knee", "90%", "full"]
    bars = [line.count("█") for line in lines[1:]]
    width = bars[0] + lines[1].count("░")
    assert bars == [round(width * r) for r in (0.4, 0.6, 0.72, 0.8)]
    assert all(len(line) <= 80 for line in lines)
    assert all(len(line) <= 50 for line in capacity_chart(overview, 50))
    assert lines[-1].endswith("80.0 %")


def test_kv_usage_is_scaled_to_the_pool() -> None:
    series = Series(label="KV usage", unit="share of the pool", source="step log",
                    t_s=(0.0, 1.0, 2.0, 3.0), values=(0.25, 0.5, 1.0, 0.125), capacity=1.0)
    lines = kv_chart(series, 100)
    assert lines[1] == "  ▂▄█▁"
    assert lines[2] == "  peak 100.0 % at 2 s from the start, mean 46.9 %"


def test_kv_demand_below_the_capacity_does_not_reach_full_height() -> None:
    series = Series(label="KV demand", unit="tokens", source="request timing",
                    t_s=(0.0, 1.0), values=(100.0, 200.0), capacity=400.0)
    lines = kv_chart(series, 100)
    assert lines[1] == "  ▂▄"
    assert "full height = capacity 400 tok" in lines[0]
    assert lines[2].endswith("capacity 400 tok")


@pytest.mark.parametrize("width", [40, 60, 100])
def test_every_line_fits_and_ascii_has_no_block_character(width: int) -> None:
    window = Window(start_s=3.0, end_s=5.0, requests=10, rate_rps=5.0)
    charts = TerminalCharts(arrivals=_arrivals([1.0, 2.0, 3.0, 5.0, 5.0, 1.0], (window,)),
                            prompt_len=_lengths(), output_len=_lengths())
    lines = chart_lines(charts, width, unicode=False)
    assert lines and all(len(line) <= width for line in lines)
    assert all(ord(ch) < 128 for line in lines for ch in line)
    assert "" in lines  # a blank line between charts
    assert chart_lines(TerminalCharts(), width) == []


def test_a_busiest_window_below_the_mean_rate_is_not_marked() -> None:
    rates = [1.0] * 10 + [9.0] + [1.0] * 9
    windows = (Window(start_s=10.0, end_s=11.0, requests=9, rate_rps=9.0),
               Window(start_s=19.0, end_s=20.0, requests=1, rate_rps=1.0))  # mean is 1.4
    lines = arrivals_chart(_arrivals(rates, windows), 80)
    assert lines[2] == "  " + " " * 10 + "1"
    assert lines[3] == "  busiest 1 s: 1 9.00 req/s from 10 s"
