"""The report page's workload pictures: the new chart kinds, the builders' shared bounds, and a
page per sample and public trace where every figure either draws data or is named as not drawn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import shared_trace
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.render import svg
from yaotu_trace.render.html_workload import Bounds, arrivals_figure, interarrival_figure

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
PUBLIC = {
    "azure-code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure-conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "mooncake-conversation": "mooncake/conversation_trace.jsonl",
    "ragpulse": "ragpulse/0_trace.jsonl",
    "weka-claude-code": "weka_claude_code/trace_0001.json",
}
SAMPLE_TRACES = sorted(p.name for p in SAMPLES.iterdir()
                       if p.suffix in {".parquet", ".csv", ".jsonl"} and ".steps." not in p.name)


def _page_of(trace: Path, out: Path) -> str:
    steps = trace.with_name(trace.name.split(".")[0] + ".steps.parquet")
    args = ["report", str(trace), "-o", str(out)]
    if steps.exists():
        args += ["--steps", str(steps)]
    assert main(args) == ExitCode.OK
    return out.read_text(encoding="utf-8")


def check_every_figure(page: str, runs: int = 1) -> list[str]:
    """Every <figure> draws an svg.plot with marks, or says in words it has nothing to draw;
    the figures not drawn are named in one "Not drawn" line per run. Returns the drawn plots."""
    assert "Not available" not in page
    assert 'class="unavailable"' not in page  # no empty panel is on the page
    figures = re.findall(r"<figure.*?</figure>", page, re.S)
    assert figures
    drawn = []
    for fig in figures:
        caption = re.search(r"<figcaption>(.*?)</figcaption>", fig).group(1)
        plot = re.search(r'<svg class="plot" data-plot="([^"]+)".*?</svg>', fig, re.S)
        if plot:
            assert 'class="mark' in plot.group(0), caption
            drawn.append(plot.group(1))
        else:
            assert 'class="note said"' in fig, f"figure {caption!r} draws nothing"
    lines = re.findall(r'<p class="note not-drawn">Not drawn: (.*?)</p>', page)
    assert len(lines) <= runs
    return drawn


@pytest.mark.parametrize("sample", SAMPLE_TRACES)
def test_every_sample_page_draws_or_names_each_figure(sample: str, tmp_path: Path) -> None:
    page = _page_of(SAMPLES / sample, tmp_path / "r.html")
    drawn = check_every_figure(page)
    # Every trace has arrivals and lengths, so the workload group is always drawn.
    assert {"arrivals", "interarrival", "prompt_len", "length_cdf"} <= set(drawn)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_trace_page_draws_or_names_each_figure(name: str, tmp_path: Path) -> None:
    page = _page_of(shared_trace(PUBLIC[name]), tmp_path / "r.html")
    drawn = check_every_figure(page)
    assert {"arrivals", "prompt_tokens", "output_tokens", "interarrival", "prompt_len",
            "output_len"} <= set(drawn)
    line = re.search(r'<p class="note not-drawn">Not drawn: (.*?)</p>', page).group(1)
    # None of these traces has request timing: the timing panels say how to model it.
    assert "time to first token (needs first_token_s per request)" in line
    assert "trace report --simulate --model M --gpu G" in line


def test_multitenant_page_draws_tenants_and_sessions(tmp_path: Path) -> None:
    page = _page_of(SAMPLES / "multitenant.csv", tmp_path / "r.html")
    drawn = check_every_figure(page)
    assert {"tenants", "session_depth", "reuse_over_time"} <= set(drawn)
    # Its 60 sessions have one turn each: the think time says so instead of an empty chart.
    assert "think_time" not in drawn
    assert "No session has two turns: there is no think time to draw." in page


def test_chat_page_draws_think_time_saying_what_it_is_measured_from(tmp_path: Path) -> None:
    page = _page_of(SAMPLES / "chat.parquet", tmp_path / "r.html")
    assert "think_time" in check_every_figure(page)
    assert "654 gaps, each measured from the previous turn&#x27;s arrival" in page


def test_log_ticks_read_on_narrow_and_wide_spans() -> None:
    assert svg.log_ticks(3.0, 70.0) == [5.0, 10.0, 20.0, 50.0]  # under three powers: 1-2-5
    assert svg.log_ticks(2.999, 3.003)[0] >= 2.999  # no power inside: linear ticks
    assert len(svg.log_ticks(2.999, 3.003)) >= 2
    assert svg.log_ticks(1e-6, 1e6) == [1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4, 1e6]  # every other


def test_bands_shade_and_label_without_overlap() -> None:
    bands = [svg.Band(10.0, 11.0, "burst 20/s", "burst"), svg.Band(11.0, 12.0, "burst 30/s",
                                                                      "burst"),
             svg.Band(12.0, 13.0, "burst 40/s", "burst")]
    chart = svg.line_chart("t", "t", [svg.Line("a", [0.0, 100.0], [1.0, 2.0])],
                           x=svg.Axis(label="x"), y=svg.Axis(label="y"),
                           marks=svg.Marks(bands=bands))
    assert chart.count('class="mark band burst"') == 3
    # Three labels a pixel apart: two rows hold two of them, the third is left to its tooltip.
    assert chart.count('class="band-label burst"') == 2


def test_bar_chart_draws_one_mark_per_category() -> None:
    chart = svg.bar_chart("b", "b", ["alpha", "beta", "gamma"], [0.5, 0.3, 0.2],
                          value=svg.Axis(label="share", fmt=svg.percent), horizontal=True)
    assert chart.count('class="mark bar"') == 3 and ">50%<" in chart
    vertical = svg.bar_chart("d", "d", ["1", "2"], [4.0, 1.0], value=svg.Axis(label="sessions"))
    assert vertical.count('class="mark bar"') == 2


def test_log_histogram_puts_log_bins_at_equal_widths() -> None:
    chart = svg.histogram_chart("h", "h", [1.0, 10.0, 100.0, 1000.0], [1, 2, 3],
                                x=svg.Axis(label="x", log=True))
    widths = [float(w) for w in re.findall(r'class="mark bar" x="[^"]+" y="[^"]+" '
                                           r'width="([^"]+)"', chart)]
    assert len(widths) == 3 and max(widths) - min(widths) < 0.2


WF = {
    "arrivals": {"bin_s": 1.0, "t_s": [0.0, 1.0, 2.0, 3.0], "requests_per_s": [1.0, 5.0, 1.0, 1.0],
                 "prompt_tokens_per_s": [10.0, 50.0, 10.0, 10.0],
                 "output_tokens_per_s": [1.0, 5.0, 1.0, 1.0], "mean_rate_rps": 2.0,
                 "peak_rate_rps": 5.0,
                 "busiest": [{"start_s": 1.0, "end_s": 2.0, "requests": 5, "rate_rps": 5.0}],
                 "bursts": [{"start_s": 1.0, "end_s": 2.0, "requests": 5, "rate_rps": 5.0}]},
    "interarrival": {"gap_s": [0.1, 0.5], "share": [0.6, 1.0], "poisson_share": [0.2, 0.6],
                     "mean_gap_s": 0.5, "cv": 1.2, "zero_gap_share": 0.25, "ks_distance": 0.4},
    "unavailable": {},
}


def _axis_ticks(chart: str) -> list[str]:
    return re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', chart)


def test_bounds_put_two_runs_on_the_same_axes() -> None:
    # GIVEN the same picture of a run and of one with a larger peak
    other = {**WF, "arrivals": {**WF["arrivals"], "requests_per_s": [1.0, 20.0, 1.0, 1.0]}}
    own, bigger = arrivals_figure(WF), arrivals_figure(other)
    assert _axis_ticks(own) != _axis_ticks(bigger)
    # WHEN both are drawn with the same bounds THEN their axes are the same
    shared = Bounds(x=(0.0, 4.0), y=(0.0, 25.0))
    assert _axis_ticks(arrivals_figure(WF, shared)) == _axis_ticks(arrivals_figure(other, shared))
    assert "burst 5/s" in own and "busiest 5/s" in own
    assert "Bins of 1.00 s" in own or "Bins of 1 s" in own


def test_interarrival_note_names_cv_ks_and_zero_gaps() -> None:
    fig = interarrival_figure(WF)
    assert "CV 1.20" in fig and "KS distance 0.40" in fig and "25.0 % of the gaps are zero" in fig
    assert 'data-plot="interarrival"' in fig


def test_a_busiest_window_as_long_as_the_trace_is_not_shaded() -> None:
    # GIVEN a 4 s trace whose "busiest 60 s window" is the whole of it
    whole = {"start_s": 0.0, "end_s": 60.0, "requests": 8, "rate_rps": 0.13}
    fig = arrivals_figure({**WF, "arrivals": {**WF["arrivals"], "busiest": [whole]}})
    # THEN no amber band covers the plot, and the note says why
    assert 'class="mark band busy"' not in fig
    assert "no busiest 60.00 s window (the trace spans 4.00 s)" in fig


def test_a_hit_length_histogram_without_a_hit_says_so_in_words() -> None:
    from yaotu_trace.render.html_timing import histogram as _hist

    # GIVEN a replay where no request hit: every value 0, in the first bin of 0-1 tokens
    plots = {"hit_length": {"label": "hit", "unit": "tokens", "edges": [0.0, 1 / 30, 2 / 30],
                            "counts": [12, 0], "overflow": 0, "total": 12, "p50": 0.0,
                            "p90": 0.0, "p99": 0.0}, "unavailable": {}}
    fig = _hist(plots, "hit_length", "Prefix-cache hit length per request", "hit tokens",
                seconds=False)
    # THEN the figure says it instead of drawing one bar at zero
    assert '<svg class="plot"' not in fig
    assert "No request reused a prefix: all 12 requests hit 0 tokens." in fig
    # and one hit is drawn
    plots["hit_length"] = {**plots["hit_length"], "edges": [0.0, 5.0, 10.0], "counts": [11, 1]}
    assert 'data-plot="hit_length"' in _hist(plots, "hit_length", "c", "x", seconds=False)


def test_axis_seconds_read_as_minutes_and_hours_past_ten_minutes() -> None:
    from yaotu_trace.render.svg import seconds

    assert [seconds(v) for v in (0.0, 0.0123, 1.5, 120.0, 2000.0, 6000.0, 40000.0)] == [
        "0", "12.3 ms", "1.5 s", "120 s", "33.3 min", "100 min", "11.1 h"]
