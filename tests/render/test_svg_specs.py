"""The chart specs of `render/svg.py`: what each field of an `Axis`, a `Line` and `Marks` does
to the drawn chart."""

from __future__ import annotations

import re

from yaotu_trace.render import svg


def _ticks(chart: str) -> list[str]:
    return re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', chart)


def _paths(chart: str) -> list[str]:
    return re.findall(r'<path class="mark line" d="([^"]+)"', chart)


def test_lo_and_hi_pin_the_value_axis_and_fixed_overrides_both() -> None:
    line = svg.Line("share", [0.0, 1.0, 2.0], [0.2, 0.3, 0.4])
    own = svg.line_chart("a", "a", [line], x=svg.Axis(), y=svg.Axis(fmt=svg.percent))
    pinned = svg.line_chart("b", "b", [line], x=svg.Axis(),
                            y=svg.Axis(fmt=svg.percent, lo=0.0, hi=1.0))
    fixed = svg.line_chart("c", "c", [line], x=svg.Axis(),
                           y=svg.Axis(fmt=svg.percent, lo=0.0, hi=1.0, fixed=(0.0, 0.5)))
    assert "0%" not in _ticks(own) and "100%" not in _ticks(own)  # the data's own range
    assert {"0%", "100%"} <= set(_ticks(pinned))
    assert "50%" in _ticks(fixed) and "100%" not in _ticks(fixed)


def test_a_stepped_line_is_drawn_in_steps_and_a_plain_one_in_segments() -> None:
    chart = svg.line_chart(
        "s", "s", [svg.Line("cdf", [1.0, 2.0, 3.0], [0.1, 0.5, 1.0], step=True),
                   svg.Line("model", [1.0, 2.0, 3.0], [0.2, 0.6, 0.9])],
        x=svg.Axis(), y=svg.Axis())
    stepped, plain = _paths(chart)
    assert "H" in stepped and "V" in stepped and "L" not in stepped
    assert "L" in plain and "H" not in plain
    assert chart.count('class="legend"') == 2  # two lines: a legend names both


def test_a_log_x_axis_and_its_format_reach_the_ticks() -> None:
    chart = svg.line_chart("g", "g", [svg.Line("gaps", [0.001, 0.01, 0.1, 1.0],
                                               [0.1, 0.4, 0.8, 1.0])],
                           x=svg.Axis(fmt=svg.seconds, log=True), y=svg.Axis())
    assert {"1 ms", "10 ms", "100 ms", "1 s"} <= set(_ticks(chart))
    assert 'class="legend"' not in chart  # one line: no legend


def test_marks_draw_their_lines_points_and_bands() -> None:
    chart = svg.line_chart(
        "m", "m", [svg.Line("hit ratio", [1.0, 10.0], [0.1, 0.9])], x=svg.Axis(), y=svg.Axis(),
        marks=svg.Marks(vlines=[(5.0, "capacity")], hlines=[(0.5, "half")],
                        points=[(10.0, 0.9, "knee")], bands=[svg.Band(2.0, 3.0, "busy", "busy")]))
    assert ">capacity<" in chart and ">half<" in chart
    assert chart.count('class="mark point"') == 1 and chart.count('class="mark band busy"') == 1


def test_a_histogram_reads_its_count_axis_label_and_range() -> None:
    own = svg.histogram_chart("h", "h", [0.0, 1.0, 2.0], [3, 4], x=svg.Axis(label="tokens"))
    assert ">requests<" in own  # the default count axis
    shared = svg.histogram_chart("h", "h", [0.0, 1.0, 2.0], [3, 4], x=svg.Axis(label="tokens"),
                                 y=svg.Axis(label="count", fixed=(0.0, 40.0)))
    assert ">count<" in shared and "40" in _ticks(shared) and "40" not in _ticks(own)


def test_a_bar_chart_reads_its_value_axis() -> None:
    chart = svg.bar_chart("t", "t", ["a", "b"], [0.25, 0.75],
                          value=svg.Axis(label="share of the requests", fmt=svg.percent,
                                         fixed=(0.0, 1.0)), horizontal=True)
    assert ">share of the requests<" in chart and "100%" in _ticks(chart)
