"""A request too large for one instance's empty KV pool never runs: the simulated table says
so in `status`/`error` (vLLM refuses such a request too), and the diagnosis of the run, step
log included, reads its missing instance without failing."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from yaotu_trace.commands.diagnose import diagnose_trace
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import REJECTED_ERROR, run_scenario


def _run(prompts: list[int]):
    # 10 blocks of 16 tokens, block 0 the null block: 9 × 16 = 144 tokens per sequence at most.
    table = pd.DataFrame({"arrival_s": [0.1 * i for i in range(len(prompts))],
                          "prompt_len": prompts, "output_len": [4] * len(prompts)})
    trace = normalize(RawTrace(requests=table, format_name="canonical"), "t")
    return run_scenario(trace, Scenario(model="Llama-3.1-8B", gpu="H100-SXM", kv_blocks=10,
                                        block_size=16))


def test_a_request_larger_than_the_pool_is_rejected_with_its_reason() -> None:
    # 500 + 4 tokens need 32 blocks > 9: rejected; 100 + 4 and 60 + 4 fit (7 and 4 blocks).
    run = _run([100, 500, 60])
    df = run.requests
    assert df["status"].tolist() == ["ok", "rejected", "ok"]
    assert df["error"].isna().tolist() == [True, False, True]
    assert df["error"].iloc[1] == REJECTED_ERROR
    assert pd.isna(df["instance"].iloc[1]) and pd.isna(df["finish_s"].iloc[1])
    trace = normalize(RawTrace(requests=df, format_name="canonical"), "sim")
    trace = replace(trace, steps=StepLog.from_frame(run.steps, "steps"))
    doc = diagnose_trace(trace).to_dict()
    assert doc["command"] == "diagnose"


def test_a_run_where_every_request_ran_has_no_status_column() -> None:
    run = _run([100, 60])
    assert "status" not in run.requests.columns and "error" not in run.requests.columns
