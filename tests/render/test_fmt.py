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


def test_tokens_name_their_unit_up_to_the_largest_capacity() -> None:
    # a trillion tokens is 1T (it read "1e+03G"), and a count that rounds up to the next unit
    # takes it (999,600 read "1e+03k")
    assert fmt.tokens(1e12) == "1T tok"
    assert fmt.tokens(5.4e14) == "540T tok"
    assert fmt.tokens(999_600) == "1M tok"
    assert fmt.tokens(999_499) == "999k tok"
    assert fmt.tokens(3_200_000) == "3.2M tok"
