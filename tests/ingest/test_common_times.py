"""The readers' one ISO-8601 parser (`ingest/traces/common.py`), on hand-checked times."""

from __future__ import annotations

from pathlib import Path

import pytest

from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.traces.common import unix_seconds

P = Path("t.jsonl")


@pytest.mark.parametrize(("value", "seconds"), [
    ("1970-01-01T00:00:01Z", 1.0),
    ("1970-01-01T00:00:01", 1.0),  # no zone: UTC
    ("1970-01-01T08:00:01+08:00", 1.0),
    ("2026-06-01T05:40:20.151Z", 1_780_292_420.151),
    (12.5, 12.5),  # a number is already seconds
])
def test_times_in_unix_seconds(value: object, seconds: float) -> None:
    assert unix_seconds(value, P, "line", 3, "start_time", "fix it") == pytest.approx(seconds,
                                                                                    abs=1e-6)


@pytest.mark.parametrize("value", ["yesterday", True, None, "2026-13-01T00:00:00"])
def test_a_value_that_is_no_time_is_one_line_naming_it(value: object) -> None:
    with pytest.raises(TraceSchemaError, match=r"t\.jsonl: line 3, field 'start_time': .* is "
                                                "not an ISO-8601 time; fix it"):
        unix_seconds(value, P, "line", 3, "start_time", "fix it")
