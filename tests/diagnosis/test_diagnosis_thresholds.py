"""Thresholds: defaults, overrides and one-line errors."""

from __future__ import annotations

import pytest

from yaotu_trace.axes.thresholds import THRESHOLDS, make_thresholds, parse_threshold_options
from yaotu_trace.errors import ConfigError


def test_thresholds_defaults_and_override() -> None:
    t = parse_threshold_options(["stall_factor=3", "window_s = 10"])
    assert t.stall_factor == 3.0 and t.window_s == 10.0
    assert t.kv_preempt_usage == THRESHOLDS["kv_preempt_usage"].default
    assert t.overridden() == {"stall_factor": 3.0, "window_s": 10.0}
    assert make_thresholds().overridden() == {}


def test_thresholds_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        parse_threshold_options(["stal_factor=3"])
    message = str(info.value)
    assert "unknown threshold 'stal_factor'" in message
    assert "stall_factor" in message and "window_s" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "pair", ["stall_factor", "stall_factor=abc", "=3", "stall_factor=-1", "window_s=0",
             "chunk_tokens=0"])
def test_thresholds_bad_values_are_config_errors(pair: str) -> None:
    with pytest.raises(ConfigError):
        parse_threshold_options([pair])
