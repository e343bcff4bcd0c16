"""`render.fmt`: times on a trace's clock, read as dates when the clock is Unix time."""

from __future__ import annotations

from yaotu_trace.render import fmt


def test_clock_is_a_date_on_a_unix_clock_and_seconds_otherwise() -> None:
    # 1.7e9 s is 2023-11-14 22:13:20 UTC, a moment, not a duration of 472,222.22 h
    assert fmt.clock(1.7e9) == "2023-11-14 22:13:20 UTC"
    assert fmt.seconds(1.7e9) == "472222.22 h"
    # a clock that starts near zero (the samples, simulated traces) keeps its seconds
    assert fmt.clock(55.72) == fmt.seconds(55.72) == "55.72 s"
    assert fmt.clock(None) == fmt.MISSING
    # past year 9999 no date exists (an absurd clock): seconds, not an internal error
    assert fmt.clock(253_402_300_799.0) == "9999-12-31 23:59:59 UTC"
    assert fmt.clock(9e11) == fmt.seconds(9e11) == "250000000.00 h"
