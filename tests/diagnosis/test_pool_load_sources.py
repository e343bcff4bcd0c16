"""A disaggregated run whose prefill pool queues next to an idle decode pool, judged from the
request table alone, with its metrics export and with its step log (`trace simulate --pd
--metrics-out --steps-out`): the decode pool's load comes from the export's per-instance KV
usage and from the step log alike, and from the table alone it is unknown, never the union of
the decode intervals (≈ 1 while anything decodes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_json


@pytest.fixture(scope="module")
def pd_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from yaotu_trace.cli import main

    d = tmp_path_factory.mktemp("pd")
    assert main(["generate", "long-prefill", "--requests", "120", "--seed", "1", "--out",
                 str(d / "lp.parquet"), "--quiet"]) == 0
    assert main(["simulate", str(d / "lp.parquet"), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--pd", "1:1", "--link-gbps", "400", "--out", str(d / "pd.parquet"),
                 "--steps-out", str(d / "pd.steps.parquet"), "--metrics-out",
                 str(d / "pd.metrics.csv"), "--quiet", "-o", str(d / "sim.txt")]) == 0
    return d


def _placement(doc: dict) -> tuple[str, dict]:
    axis = next(a for a in doc["axes"] if a["name"] == "pd_interference")
    return axis["status"], axis["metrics"]["placement"]


@pytest.mark.slow
def test_decode_pool_load_from_each_source(pd_run: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    base = ["diagnose", str(pd_run / "pd.parquet"), "--format", "json", "--model",
            "Llama-3.1-8B", "--gpu", "H100", "--link-gbps", "400"]
    alone = run_json(base, capsys)
    status, pm = _placement(alone)
    assert pm["prefill_wait_share"] >= 0.2
    assert pm["decode_busy_share"] is None and status == "insufficient_data"
    metrics = run_json([*base, "--metrics", str(pd_run / "pd.metrics.csv")], capsys)
    steps = run_json([*base, "--steps", str(pd_run / "pd.steps.parquet")], capsys)
    _, from_metrics = _placement(metrics)
    _, from_steps = _placement(steps)
    assert from_metrics["busy_source"].startswith("prefill pool: request intervals")
    assert "metrics (decode pool: KV usage of 1 of 1 instance(s)" in from_metrics["busy_source"]
    assert from_steps["busy_source"].startswith("step log")
    # the export's scrapes and the step log agree on an idle decode pool
    assert from_metrics["decode_busy_share"] < 0.5 and from_steps["decode_busy_share"] < 0.5
    assert from_metrics["decode_busy_share"] == pytest.approx(
        from_steps["decode_busy_share"], abs=0.05)
