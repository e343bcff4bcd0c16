"""The closing note of the queueing windows, reproduced: the first 1,000 Mooncake conversation
requests simulated on a pool of 2,000 blocks queue 99 % of their latency with the GPU busy,
the seats a quarter full and the pool 74 % used where they wait. Judged with the step log's
admission signal the queue is admission blocked by KV capacity (Q005), and without it the
cause is `admission_blocked` (Q011), never `unidentified`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import shared_trace

from yaotu_trace.commands.diagnose import diagnose_trace
from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.data.steplog import StepLog
from yaotu_trace.ingest import read_trace
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import run_scenario


@pytest.mark.slow
def test_mooncake_conversations_on_a_small_pool_are_kv_admission(tmp_path: Path) -> None:
    source = shared_trace("mooncake/conversation_trace.jsonl")
    first = tmp_path / "mc1k.jsonl"
    with source.open(encoding="utf-8") as f:
        first.write_text("".join(next(f) for _ in range(1000)), encoding="utf-8")
    run = run_scenario(read_trace(first),
                       Scenario(model="Llama-3.1-8B", gpu="H100", kv_blocks=2000))
    trace = normalize(RawTrace(requests=run.requests, format_name="canonical",
                               source_block_size=512), "sim")
    with_steps = replace(trace, steps=StepLog.from_frame(run.steps, "steps"))
    doc = diagnose_trace(with_steps).to_dict()
    queueing = next(a for a in doc["axes"] if a["name"] == "queueing")
    assert queueing["status"] == "bottleneck" and queueing["cause"] == "kv_admission"
    assert queueing["metrics"]["kv_blocked_queued"] > 0.9
    assert queueing["metrics"]["kv_usage_queued"] < 0.9  # usage alone would not say it
    assert doc["verdict"]["principal_axis"] == "kv_memory"
    assert doc["verdict"]["outcome"].startswith("successful requests only (905 of 1,000)")
    # the same steps without the signal, and the table alone: admission_blocked
    plain = run.steps.drop(columns=["head_blocks_needed", "kv_blocks_free"])
    for judged in (replace(trace, steps=StepLog.from_frame(plain, "steps")), trace):
        got = diagnose_trace(judged).to_dict()
        assert (got["verdict"]["principal_axis"], got["verdict"]["principal_cause"]) == (
            "queueing", "admission_blocked")
