"""Two runs on one page: each pair of pictures on the axes that hold both runs' data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import shared_trace
from tests.render.test_html_workload import check_every_figure
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.render.shared_axes import Bounds

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
# Pictures whose every tick is an axis value (bar charts also tick their categories).
VALUE_AXES = ("arrivals", "prompt_tokens", "output_tokens", "interarrival", "prompt_len",
              "output_len", "length_cdf", "reuse_over_time", "capacity_curve", "hit_length",
              "queue_time", "ttft")


def test_union_holds_both_ranges_and_keeps_an_axis_only_one_side_has() -> None:
    a, b = Bounds(x=(0.0, 10.0), y=(0.0, 5.0)), Bounds(x=(2.0, 30.0))
    assert a.union(b) == Bounds(x=(0.0, 30.0), y=(0.0, 5.0))
    assert b.union(a) == a.union(b)


def test_a_log_range_is_not_joined_with_a_linear_one() -> None:
    log, linear = Bounds(x=(1.0, 1e4), y=(0.0, 9.0), log_x=True), Bounds(x=(0.0, 50.0),
                                                                         y=(0.0, 3.0))
    joined = log.union(linear)
    assert joined.x is None and joined.y == (0.0, 9.0)
    assert log.union(Bounds(x=(10.0, 1e6), log_x=True)).x == (1.0, 1e6)


def test_zoomed_value_axes_join_only_where_they_overlap() -> None:
    # GIVEN two waterfalls zoomed onto small losses: one near 1.1M tokens, one near 45k
    near_1m = Bounds(y=(1.118e6, 1.14e6), zoomed_y=True)
    near_45k = Bounds(y=(44.1e3, 46.9e3), zoomed_y=True)
    # THEN the union of the two windows is not drawn (it would show neither run's losses)
    assert near_1m.union(near_45k).y is None
    # AND overlapping windows, or one axis from zero, are joined
    assert near_1m.union(Bounds(y=(1.1e6, 1.13e6), zoomed_y=True)).y == (1.1e6, 1.14e6)
    assert near_45k.union(Bounds(y=(0.0, 5e4))).y == (0.0, 5e4)


def _ticks(chart: str) -> list[str]:
    return re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', chart)


def _pairs(page: str) -> dict[str, list[str]]:
    plots: dict[str, list[str]] = {}
    for name, chart in re.findall(r'<svg class="plot" data-plot="([^"]+)"(.*?)</svg>', page,
                                  re.S):
        plots.setdefault(name, []).append(chart)
    return plots


@pytest.fixture(scope="module")
def burst_after_chat(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A page of two different workloads: the chat sample before, the burst sample after."""
    out = tmp_path_factory.mktemp("pair") / "two.html"
    assert main(["report", str(SAMPLES / "diag-burst.parquet"), "--steps",
                 str(SAMPLES / "diag-burst.steps.parquet"), "--before",
                 str(SAMPLES / "chat.parquet"), "-o", str(out)]) == ExitCode.OK
    return out.read_text(encoding="utf-8")


def _alone(trace: str, tmp_path: Path) -> dict[str, list[str]]:
    out = tmp_path / f"{trace}.html"
    steps = SAMPLES / f"{trace}.steps.parquet"
    args = ["--steps", str(steps)] if steps.exists() else []
    assert main(["report", str(SAMPLES / f"{trace}.parquet"), *args, "-o", str(out)]) == 0
    return _pairs(out.read_text(encoding="utf-8"))


def test_each_pair_of_pictures_shares_its_axes(burst_after_chat: str, tmp_path: Path) -> None:
    plots = _pairs(burst_after_chat)
    shared = [name for name in VALUE_AXES if len(plots.get(name, [])) == 2]
    assert {"arrivals", "prompt_tokens", "output_tokens", "interarrival", "prompt_len",
            "output_len", "reuse_over_time", "capacity_curve", "hit_length"} <= set(shared)
    for name in shared:
        before, after = plots[name]
        assert _ticks(before) == _ticks(after), name
    # Each run alone ticks its own axes (3.3 min of chat; 46 s with a burst of 100 req/s)
    chat, burst = _alone("chat", tmp_path), _alone("diag-burst", tmp_path)
    differ = [name for name in shared if _ticks(chat[name][0]) != _ticks(burst[name][0])]
    assert {"arrivals", "prompt_tokens", "output_tokens", "prompt_len", "output_len",
            "hit_length"} <= set(differ)


def test_a_picture_only_one_run_can_draw_says_why_on_the_other_side(
        burst_after_chat: str) -> None:
    # The chat sample has no request timing; the burst sample has it and a step log
    assert burst_after_chat.count('data-plot="queue_time"') == 1
    assert "Not drawn for this run: needs scheduled_s" in burst_after_chat
    assert 'class="unavailable"' not in burst_after_chat
    check_every_figure(burst_after_chat, runs=2)
    # The hint for the timing panels is the one that works with two runs
    assert "trace report --simulate" not in burst_after_chat.split('id="runs"')[1]


def test_azure_code_against_conv_draws_every_pair_on_shared_axes(tmp_path: Path) -> None:
    # The Azure 2023 traces: code (8,819 requests, CV 13) before, conversation (19,366) after
    code = shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    conv = shared_trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    out = tmp_path / "azure.html"
    assert main(["report", str(conv), "--before", str(code), "-o", str(out)]) == ExitCode.OK
    page = out.read_text(encoding="utf-8")
    drawn = check_every_figure(page, runs=2)
    plots = _pairs(page)
    for name in ("arrivals", "prompt_tokens", "output_tokens", "interarrival", "prompt_len",
                 "output_len", "length_cdf"):
        assert drawn.count(name) == 2, name
        before, after = plots[name]
        assert _ticks(before) == _ticks(after), name
    # The code trace's peak (32.7 req/s in 10 s bins) sets both arrival axes: the
    # conversation trace, alone up to 9.8 req/s, is drawn on an axis to 30
    assert "peak 32.70 req/s" in page and "peak 9.80 req/s" in page
    assert "30" in _ticks(plots["arrivals"][1])
