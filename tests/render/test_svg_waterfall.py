"""The loss waterfall's y axis: zoomed in when the losses are small next to the total (so each
stays visible), from zero when nothing is lost. The Mooncake conversation trace at unlimited
capacity loses nothing: a waterfall zoomed to 54.01M with six empty bars looked broken."""

from __future__ import annotations

import re

from yaotu_trace.render.svg import waterfall_chart


def _floor(svg: str) -> str | None:
    found = re.search(r"\(axis starts at ([^)]+)\)", svg)
    return None if found is None else found.group(1)


def test_no_loss_draws_from_zero_and_says_nothing_is_lost() -> None:
    svg = waterfall_chart("w", "Reuse", ("ideal", 54_010_000.0),
                          [("block boundary", 0.0), ("tenant", 0.0), ("capacity", 0.0)])
    assert _floor(svg) is None
    assert "no step loses any of it" in svg


def test_small_losses_zoom_the_axis_and_say_where_it_starts() -> None:
    # 1,000 lost of 100,000: the axis starts at 99,000 − 0.8 × max(1,000, 200) = 98,200.
    svg = waterfall_chart("w", "Reuse", ("ideal", 100_000.0), [("tenant", 1_000.0)])
    assert _floor(svg) == "98.2k"
    assert "no step loses" not in svg


def test_large_losses_draw_from_zero() -> None:
    svg = waterfall_chart("w", "Reuse", ("ideal", 100_000.0), [("capacity", 50_000.0)])
    assert _floor(svg) is None and "no step loses" not in svg
