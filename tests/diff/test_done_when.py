"""The four cases `trace diff` exists for, on the requests of sample_traces/diag-kv-churn.parquet
served by `trace simulate` with a small and then a large KV pool (docs/diff.md walks through the
same pair on a public trace)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from yaotu_trace.cli import main
from yaotu_trace.data.run_diff import RunDiff
from yaotu_trace.data.schema import Trace
from yaotu_trace.diff import diff_traces
from yaotu_trace.errors import ExitCode
from yaotu_trace.ingest import read_trace

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
# 320 blocks of 16 tokens: the pool diag-kv-churn was generated with; the default pool of
# Llama-3.1-8B on one H100 holds ~420k tokens.
SMALL_POOL_BLOCKS = 320


def _simulate(root: Path, name: str, *extra: str) -> Trace:
    out, steps = root / f"{name}.parquet", root / f"{name}.steps.parquet"
    assert main(["simulate", str(SAMPLES / "diag-kv-churn.parquet"), "--model", "Llama-3.1-8B",
                 "--gpu", "H100", "--out", str(out), "--steps-out", str(steps),
                 "-o", str(root / f"{name}.txt"), *extra]) == ExitCode.OK
    return read_trace(out, steps_path=steps)


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, Trace]:
    """The same 200 requests served with a 320-block pool, then with the default pool."""
    root = tmp_path_factory.mktemp("pools")
    small = _simulate(root, "small", "--kv-blocks", str(SMALL_POOL_BLOCKS))
    large = _simulate(root, "large")
    return small, large


def _differing(result: RunDiff) -> set[str]:
    return {c.name for c in result.conditions if c.status == "differs"}


def test_small_then_large_kv_pool_is_comparable_and_saves_recompute(pools) -> None:
    small, large = pools
    assert small.requests["num_preemptions"].sum() > 0  # the small pool does preempt
    assert large.requests["num_preemptions"].sum() == 0
    result = diff_traces(small, large)
    assert result.comparable, [(c.name, c.detail) for c in result.conditions]
    assert result.fairness == ()
    assert result.matched.basis == "request_id" and result.matched.count == 200
    axes = {a.name: a for a in result.axes}
    assert axes["kv_memory"].change == "improved"
    recompute = {m.name: m for m in axes["kv_memory"].measures}["recompute_token_share"]
    assert recompute.after == 0.0 and recompute.before > recompute.noise > 0
    # the headline measure is the axis' score: the engine's count over all tokens
    assert small.steps is not None
    req = small.requests
    assert recompute.before == pytest.approx(
        float(small.steps.frame()["recomputed_tokens"].sum())
        / float((req["prompt_len"] + req["output_len"]).sum()))
    saved = {i.name: i for i in result.ledger.saved}
    assert saved["recomputed_prefill_tokens"].value > 0
    # Recomputed tokens are priced as the diagnosis prices them: what the small pool's engine
    # computed again (its step log's recomputed_tokens: readmissions less their prefix-cache
    # hits), all gone with the large one; the estimate from the preemption counts,
    # Σ preemptions · (prompt_len + output_len / 2), is more than twice that here.
    assert small.steps is not None
    engine = float(small.steps.frame()["recomputed_tokens"].sum())
    assert saved["recomputed_prefill_tokens"].value == pytest.approx(engine)
    req = small.requests
    estimate = float((req["num_preemptions"] * (req["prompt_len"] + req["output_len"] / 2)).sum())
    assert estimate > 2 * engine


def test_a_run_against_itself_is_comparable_and_unchanged(pools) -> None:
    small, _ = pools
    result = diff_traces(small, small)
    assert result.comparable and result.judged_on == "all requests"
    assert [a.change for a in result.axes] == ["unchanged"] * 4
    assert all(m.change == "unchanged" for a in result.axes for m in a.measures)
    assert result.ledger.saved == () and result.ledger.added == ()


def test_ten_percent_failed_after_is_not_comparable_on_success_rate(pools) -> None:
    small, large = pools
    req = large.requests.copy()
    failed = np.arange(len(req)) % 10 == 0  # 20 of 200
    req["status"] = np.where(failed, "error", "ok")
    req["status"] = req["status"].astype("string")
    for column in ("first_token_s", "finish_s"):
        req.loc[failed, column] = np.nan
    broken = replace(large, table=req)
    result = diff_traces(small, broken)
    assert not result.comparable
    assert _differing(result) == {"success_rate"}
    success = next(c for c in result.conditions if c.name == "success_rate")
    assert success.before["rate"] == 1.0 and success.after["rate"] == pytest.approx(0.9)
    assert any(f.startswith("success_rate:") for f in result.fairness)
    added = {i.name: i.value for i in result.ledger.added}
    assert added["failed_requests"] == 20


def test_two_unrelated_traces_are_not_comparable() -> None:
    healthy = read_trace(SAMPLES / "diag-healthy.parquet")
    long_prefill = read_trace(SAMPLES / "diag-long-prefill.parquet")
    result = diff_traces(healthy, long_prefill)
    assert not result.comparable
    assert _differing(result) & {"request_chain", "io_distribution"}
    chain = next(c for c in result.conditions if c.name == "request_chain")
    assert chain.status == "differs"


def test_matched_only_compares_the_shared_requests(pools) -> None:
    # The after run lost its last 50 requests: the chain differs, unless the comparison is
    # restricted to the 150 both runs served.
    small, large = pools
    shorter = replace(large, table=large.requests.iloc[:150].reset_index(drop=True))
    plain = diff_traces(small, shorter)
    assert "request_chain" in _differing(plain)
    matched = diff_traces(small, shorter, matched_only=True)
    assert "request_chain" not in _differing(matched)
    assert matched.matched.count == 150 and matched.judged_on == "matched requests"


def test_the_bootstrap_is_deterministic(pools) -> None:
    small, large = pools
    assert diff_traces(small, large, seed=3) == diff_traces(small, large, seed=3)


@pytest.mark.slow
def test_the_walkthrough_of_docs_diff_md(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/diff.md: the first 400 Mooncake conversation requests of at most 16,000 tokens, served
    # with a 1,200-block and then the default KV pool; the numbers the page quotes.
    import json

    from tests.conftest import shared_trace

    source = shared_trace("mooncake/conversation_trace.jsonl")
    kept = []
    with source.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row["input_length"] + row["output_length"] <= 16000:
                kept.append(line)
            if len(kept) == 400:
                break
    sample = tmp_path / "short.jsonl"
    sample.write_text("".join(kept), encoding="utf-8")
    runs = []
    for name, extra in (("small-pool", ["--kv-blocks", "1200"]), ("large-pool", [])):
        out, steps = tmp_path / f"{name}.parquet", tmp_path / f"{name}.steps.parquet"
        assert main(["simulate", str(sample), "--model", "Llama-3.1-8B", "--gpu", "H100",
                     "--out", str(out), "--steps-out", str(steps), "-o",
                     str(tmp_path / f"{name}.txt"), *extra]) == ExitCode.OK
        runs.append(read_trace(out, steps_path=steps))
    result = diff_traces(*runs)
    assert result.comparable
    changes = {a.name: a.change for a in result.axes}
    assert changes == {"queueing": "improved", "kv_memory": "improved",
                       "prefix_reuse": "unchanged", "pd_interference": "regressed"}
    saved = {i.name: i.value for i in result.ledger.saved}
    # the small run's engine count (its step log), not the 171,390.5 its preemption counts
    # would estimate: the readmissions hit most of their own blocks in the prefix cache
    assert saved["recomputed_prefill_tokens"] == 4131
    assert {i.name for i in result.ledger.added} >= {"decode_seconds_lost_to_stalls"}
    # the page's output block is what the command prints (at 100 columns)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)
    shown = tmp_path / "diff.txt"
    assert main(["diff", "small-pool.parquet", "large-pool.parquet", "--steps-before",
                 "small-pool.steps.parquet", "--steps-after", "large-pool.steps.parquet", "--model",
                 "Llama-3.1-8B", "--gpu", "H100", "--out", "matched.parquet",
                 "-o", str(shown)]) == ExitCode.OK
    page = (REPO / "docs" / "diff.md").read_text(encoding="utf-8")
    block = page.split("The output (about 5 s):\n\n```\n", 1)[1].split("```\n", 1)[0]
    printed = shown.read_text(encoding="utf-8")
    assert [line.rstrip() for line in printed.splitlines()] == [
        line.rstrip() for line in block.splitlines()]


def test_with_no_request_in_common_the_fairness_steps_do_not_offer_a_subset() -> None:
    healthy = read_trace(SAMPLES / "diag-healthy.parquet")
    long_prefill = read_trace(SAMPLES / "diag-long-prefill.parquet")
    result = diff_traces(healthy, long_prefill)
    assert result.matched.count == 0 and result.matched.basis == "none"
    assert [s.split(":")[0] for s in result.fairness] == ["request_chain", "io_distribution"]
    assert not any("--matched-only" in step for step in result.fairness)
