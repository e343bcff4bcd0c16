"""One verdict whatever the evidence source: each diagnosis fixture judged from its request
table alone, with its step log, with its metrics export, and with both.

The metrics export is the one `trace simulate --metrics-out` writes, built from the fixture's
own request table and step log (`yaotu_trace.sim.metrics_export`). The full evidence (step
log and metrics) gives the reference verdict; every other source must give the same principal
axis and cause, or, where it cannot tell the cause apart, leave the queueing axis undecided
(a warning with cause `unidentified`, or insufficient_data) and no principal, or, when the queue
is most of latency, name queueing with cause `admission_blocked` (the reason is not in the
data) — never another axis or cause.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from yaotu_trace.commands.diagnose import diagnose_trace
from yaotu_trace.commands.simulate import write_metrics_csv
from yaotu_trace.data.canonical import write_trace
from yaotu_trace.files import all_or_nothing
from yaotu_trace.ingest import read_trace
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.sim.generate import ENGINE_BLOCK_SIZE_TOKENS, GenerateOptions, generate_with_steps
from yaotu_trace.sim.workloads import WorkloadKind

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SOURCES = ("requests", "steps", "metrics", "both")
# The reference verdict (step log and metrics): principal axis and cause.
EXPECTED = {
    "diag-healthy": (None, None),
    "diag-burst": ("queueing", "arrival_burst"),
    "diag-dispatch": ("queueing", "dispatch_overhead"),
    "diag-kv-churn": ("kv_memory", "kv_capacity"),
    "diag-long-prefill": ("pd_interference", "prefill_interference"),
    "diag-prefix-recompute": ("prefix_reuse", "prefix_recompute"),
    "diag-minute-burst": ("queueing", "arrival_burst"),
}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, Path]]:
    """(request table, step log, metrics export) of every fixture; diag-minute-burst is
    generated (too large for sample_traces)."""
    folder = tmp_path_factory.mktemp("agreement")
    out: dict[str, tuple[Path, Path, Path]] = {}
    for name in EXPECTED:
        table, steps = SAMPLES / f"{name}.parquet", SAMPLES / f"{name}.steps.parquet"
        if not table.exists():
            requests, log = generate_with_steps(GenerateOptions(scenario=WorkloadKind(name),
                                                                seed=1))
            assert log is not None
            table, steps = folder / f"{name}.parquet", folder / f"{name}.steps.parquet"
            with all_or_nothing():
                write_trace(requests, table)
                write_trace(log, steps)
        metrics = folder / f"{name}.metrics.csv"
        with all_or_nothing():
            write_metrics_csv(pd.read_parquet(table), pd.read_parquet(steps), metrics,
                              block_size_tokens=ENGINE_BLOCK_SIZE_TOKENS)
        out[name] = (table, steps, metrics)
    return out


def verdict(paths: tuple[Path, Path, Path], source: str) -> dict[str, Any]:
    table, steps, metrics = paths
    trace = read_trace(table, steps_path=steps if source in ("steps", "both") else None)
    exported = read_metrics(metrics) if source in ("metrics", "both") else None
    doc = diagnose_trace(trace, metrics=exported).to_dict()
    axes = {a["name"]: a for a in doc["axes"]}
    return {"principal": doc["verdict"]["principal_axis"],
            "cause": doc["verdict"]["principal_cause"], "queueing": axes["queueing"]}


def undecided(queueing: dict[str, Any]) -> bool:
    return (queueing["status"] == "insufficient_data"
            or (queueing["status"] == "warning" and queueing["cause"] == "unidentified"))


def cases() -> list[Any]:
    out = []
    for name in EXPECTED:
        for source in SOURCES:
            marks = []
            if name == "diag-kv-churn" and source == "requests":
                # NOTE: kv_memory names kv_capacity (K004) only with the pool size, which a
                # request table lacks (the step log's kv_blocks_total and vLLM's
                # cache_config_info give it); it says preemption there instead.
                marks.append(pytest.mark.xfail(strict=True, reason="kv_memory: cause needs "
                                               "kv_blocks_total"))
            out.append(pytest.param(name, source, marks=marks, id=f"{name}-{source}"))
    return out


@pytest.mark.parametrize(("name", "source"), cases())
def test_every_source_gives_the_same_verdict_or_none(
    fixtures: dict[str, tuple[Path, Path, Path]], name: str, source: str
) -> None:
    principal, cause = EXPECTED[name]
    got = verdict(fixtures[name], source)
    if (got["principal"], got["cause"]) == (principal, cause):
        return
    # A source that cannot tell the queue's cause apart leaves it undecided, and names no
    # other principal.
    assert principal == "queueing", (source, got["principal"], got["cause"])
    if (got["principal"], got["cause"]) == ("queueing", "admission_blocked"):
        return
    assert got["principal"] is None, (source, got["principal"], got["cause"])
    assert undecided(got["queueing"]), got["queueing"]["status"]


def test_the_full_evidence_gives_the_reference_verdict(
    fixtures: dict[str, tuple[Path, Path, Path]]
) -> None:
    for name, expected in EXPECTED.items():
        got = verdict(fixtures[name], "both")
        assert (got["principal"], got["cause"]) == expected, name


@pytest.mark.parametrize("source", SOURCES)
def test_minute_burst_is_an_arrival_burst_from_every_source(
    fixtures: dict[str, tuple[Path, Path, Path]], source: str
) -> None:
    got = verdict(fixtures["diag-minute-burst"], source)
    assert (got["principal"], got["cause"]) == ("queueing", "arrival_burst")
    q = got["queueing"]
    assert q["status"] == "bottleneck"
    m = q["metrics"]
    # the queue grows for about the burst minute (11 of the 5 s windows), by ~260 requests,
    # with arrivals 4.4 × the rest (12.1 against 2.7 requests/s) and the seats full
    assert m["growing_windows"] == 11
    assert m["growth_requests"] == pytest.approx(263, abs=2)
    assert m["burst_ratio"] == pytest.approx(4.39, abs=0.01)
    assert m["running_fill_queued"] >= 0.99
    # offered work there (prompt tokens the cache does not supply, plus output) is 1.4–1.5 ×
    # the busiest window's service rate, from the step log's tokens or the request table's
    # work spread over each request's service
    assert 1.3 <= m["growth_rho"] <= 1.6
    expected_source = {"requests": "requests", "metrics": "metrics"}.get(source, "steps")
    assert m["queue_source"] == expected_source


def test_whole_trace_averages_hide_the_minute(
    fixtures: dict[str, tuple[Path, Path, Path]]
) -> None:
    # The reason the causes are judged in windows: over the whole step log the batch is far
    # from its cap and few steps leave anybody waiting (the old gates of Q001 and Q006), yet
    # in the queued windows every seat is taken and most of the latency is queueing.
    q = verdict(fixtures["diag-minute-burst"], "steps")["queueing"]["metrics"]
    assert q["running_fill_p75"] < 0.9
    assert q["waiting_share"] < 0.25
    assert q["running_fill_queued"] >= 0.99
    assert q["busy_queued"] >= 0.99
    assert q["queue_share_of_latency"] > 0.7


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, Path]]:
    """The other sample traces run through `trace simulate` with its three outputs."""
    from yaotu_trace.cli import main

    folder = tmp_path_factory.mktemp("simulated")
    out = {}
    for name in ("chat.parquet", "bursty.jsonl", "multitenant.csv"):
        stem = name.split(".")[0]
        paths = (folder / f"{stem}.parquet", folder / f"{stem}.steps.parquet",
                 folder / f"{stem}.metrics.csv")
        code = main(["simulate", str(SAMPLES / name), "--model", "Llama-3.1-8B", "--gpu",
                     "H100", "--out", str(paths[0]), "--steps-out", str(paths[1]),
                     "--metrics-out", str(paths[2]), "-q", "-o", str(folder / "report.txt")])
        assert code == 0
        out[stem] = paths
    return out


@pytest.mark.parametrize("name", ["chat", "bursty", "multitenant"])
def test_simulated_samples_give_one_queueing_verdict(
    simulated: dict[str, tuple[Path, Path, Path]], name: str
) -> None:
    # The sample workloads on the default engine: the whole queueing panel (status and cause)
    # and the verdict are the same from every source.
    seen = {source: verdict(simulated[name], source) for source in SOURCES}
    judged = {(v["principal"], v["cause"], v["queueing"]["status"], v["queueing"]["cause"])
              for v in seen.values()}
    assert len(judged) == 1, seen
