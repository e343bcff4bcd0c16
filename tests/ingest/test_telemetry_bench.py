"""AIPerf 0.13.0 and guidellm 0.8.1 outputs from one real run each against a local server
(tests/fixtures/telemetry/bench; README.md gives the commands): 20 requests, 64 prompt and 32
output tokens each, the 10th and 20th answered with HTTP 500.

The per-request exports come out with the tools' own summary numbers; their summary CSVs are
refused with the file that holds the requests, not with a column mapping that cannot work.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import FIXTURES

from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest import read_trace

DATA = FIXTURES / "telemetry" / "bench"


@pytest.mark.parametrize(("name", "ttft_mean_ms"), [
    # the tools' own summaries: AIPerf's profile_export_aiperf.json time_to_first_token.avg,
    # guidellm's benchmarks.json time_to_first_token_ms.successful.mean
    ("aiperf/profile_export.jsonl", 49.1375),
    ("guidellm/benchmarks.json", 43.9129),
])
def test_per_request_exports_match_the_tools_summaries(name: str, ttft_mean_ms: float) -> None:
    req = read_trace(DATA / name).requests
    assert len(req) == 20
    status = req["status"].astype(str)
    assert (status == "ok").sum() == 18 and (status == "error").sum() == 2
    ok = req[status == "ok"]
    assert int(ok["prompt_len"].sum()) == 18 * 64 and int(ok["output_len"].sum()) == 18 * 32
    ttft_ms = 1e3 * (ok["first_token_s"] - ok["arrival_s"]).to_numpy(dtype=np.float64)
    assert ttft_ms.mean() == pytest.approx(ttft_mean_ms, abs=1e-3)


@pytest.mark.parametrize(("name", "points_to"), [
    ("aiperf/profile_export_aiperf.csv", "profile_export.jsonl"),
    ("guidellm/benchmarks.csv", "benchmarks.json"),
])
def test_summary_csvs_point_to_the_per_request_file(name: str, points_to: str) -> None:
    with pytest.raises(TraceReadError, match=f"summary table.*give the.*{points_to}") as info:
        read_trace(DATA / name)
    assert "--input-format" not in str(info.value)


@pytest.mark.parametrize(("name", "says"), [
    ("aiperf/profile_export.jsonl", "is a request trace (aiperf), not engine telemetry"),
    ("guidellm/benchmarks.csv", "guidellm's summary table"),
])
def test_given_as_metrics_they_are_sent_where_they_belong(name: str, says: str) -> None:
    from yaotu_trace.ingest.load import read_metrics

    with pytest.raises(TraceReadError, match=re.escape(says)):
        read_metrics(DATA / name)
