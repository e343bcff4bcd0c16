"""Routes fixed before the run: `--route trace` (the trace's instance column), `--route
weighted --route-weights` (fixed shares, interleaved deterministically) and `--route random`
(a uniform draw per request from a fixed seed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_json

from yaotu_trace.data.canonical import read_parquet
from yaotu_trace.data.schema import RawTrace, Trace, normalize
from yaotu_trace.errors import ConfigError, ConfigFileError
from yaotu_trace.sim.run import random_assignment, simulate_requests, weighted_assignment
from yaotu_trace.sim.scenario import Scenario, load_scenario, resolve_scenario
from yaotu_trace.sim.summary import run_scenario

BASE = Scenario(model="Llama-3.1-8B", gpu="H100", kv_blocks=2000, max_num_seqs=8)


def test_weighted_assignment_interleaves_the_shares() -> None:
    # Shares 0.85/0.15: instance 0's m-th request sits at (m + ½)/0.85 = 0.59, 1.76, 2.94,
    # 4.12, ...; instance 1's at (m + ½)/0.15 = 3.33, 10, ...: the 4th request goes to 1.
    order = weighted_assignment(20, (0.85, 0.15))
    assert order[:7].tolist() == [0, 0, 0, 1, 0, 0, 0]
    assert np.bincount(order).tolist() == [17, 3]
    # Equal shares alternate, ties to the lower instance; unnormalised weights are shares.
    assert weighted_assignment(5, (1.0, 1.0)).tolist() == [0, 1, 0, 1, 0]
    assert np.array_equal(weighted_assignment(50, (17.0, 3.0)), weighted_assignment(
        50, (0.85, 0.15)))


def test_random_assignment_is_uniform_and_the_same_every_run() -> None:
    order = random_assignment(4000, 4)
    assert np.array_equal(order, random_assignment(4000, 4))
    counts = np.bincount(order, minlength=4)
    # 1,000 expected per instance, standard deviation √(4000 · ¼ · ¾) ≈ 27.
    assert counts.min() > 900 and counts.max() < 1100
    # Independent draws: consecutive requests share an instance a quarter of the time, which
    # round-robin (never) and weighted (never for equal shares) do not.
    same = float((order[1:] == order[:-1]).mean())
    assert 0.2 < same < 0.3


def test_random_route_spreads_a_session_over_the_instances() -> None:
    run = run_scenario(_trace([None] * 40), BASE.merged(Scenario(route="random", instances=4)))
    assert run.resolved.config.instances == 4
    assert run.requests["instance"].tolist() == [f"i{k}" for k in random_assignment(40, 4)]


def test_weighted_routing_has_one_instance_per_share() -> None:
    weighted = Scenario(route="weighted", route_weights="0.85,0.15")
    cfg = resolve_scenario(BASE.merged(weighted)).config
    assert cfg.instances == 2 and cfg.route_weights == (0.85, 0.15)


@pytest.mark.parametrize(("changes", "message"), [
    ({"route": "weighted"}, "--route weighted needs --route-weights"),
    ({"route": "weighted", "route_weights": "0.5,0.5", "instances": 3},
     "gives 2 shares for 3 instance"),
    ({"route_weights": "0.5,0.5", "instances": 2}, "applies to --route weighted only"),
    ({"route": "weighted", "route_weights": "0.5,x"}, "one share per instance"),
    ({"route": "weighted", "route_weights": "1,0"}, "every share must be a positive"),
    ({"route": "trace", "pd": "1:1"}, "assigns requests to colocated instances"),
    ({"route": "random", "pd": "1:1"}, "assigns requests to colocated instances"),
])
def test_fixed_route_misuse_is_a_one_line_error(changes: dict[str, object], message: str
                                                ) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_scenario(BASE.merged(Scenario(**changes)))  # type: ignore[arg-type]


def test_scenario_file_takes_route_weights_as_a_list(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('route = "weighted"\nroute_weights = [0.85, 0.15]\n', encoding="utf-8")
    assert load_scenario(path).route_weights == "0.85,0.15"
    path.write_text('route_weights = [0.85, -1]\n', encoding="utf-8")
    with pytest.raises(ConfigFileError, match="key 'route_weights'"):
        load_scenario(path)


def _trace(instances: list[str | None]) -> Trace:
    n = len(instances)
    frame = pd.DataFrame({"arrival_s": 0.1 * np.arange(n), "prompt_len": [64] * n,
                          "output_len": [8] * n,
                          "instance": pd.array(instances, dtype="string")})
    return normalize(RawTrace(requests=frame, format_name="canonical"), "test")


def test_trace_route_keeps_each_request_on_its_instance() -> None:
    names = ["pod-b", "pod-a", "pod-b", "pod-b", "pod-c", "pod-b"]
    run = run_scenario(_trace(names), BASE.merged(Scenario(route="trace")))
    assert run.requests["instance"].tolist() == names
    assert run.resolved.config.instances == 3
    assert set(run.steps["instance"]) == {"pod-a", "pod-b", "pod-c"}


def test_trace_route_refuses_a_request_without_instance() -> None:
    with pytest.raises(ConfigError, match=r"column 'instance', row 1: no instance given"):
        run_scenario(_trace(["a", None, "b"]), BASE.merged(Scenario(route="trace")))
    with pytest.raises(ConfigError, match="conflicts with --route trace"):
        run_scenario(_trace(["a", "b"]), BASE.merged(Scenario(route="trace", instances=3)))


def test_cli_weighted_route_sends_the_shares(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.csv"
    pd.DataFrame({"arrival_s": 0.05 * np.arange(40), "prompt_len": [64] * 40,
                  "output_len": [8] * 40}).to_csv(src, index=False)
    out = tmp_path / "out.parquet"
    report = run_json(["simulate", str(src), "--model", "Llama-3.1-8B", "--gpu", "H100",
                       "--kv-blocks", "2000", "--route", "weighted", "--route-weights",
                       "0.75,0.25", "--out", str(out), "--quiet", "--format", "json"], capsys)
    assert report["simulation"]["route"] == "weighted 0.75,0.25"  # type: ignore[index]
    counts = read_parquet(out).requests["instance"].value_counts()
    assert (counts["i0"], counts["i1"]) == (30, 10)


@pytest.mark.parametrize("scheduler", ["vllm", "sglang"])
def test_weighted_route_keeps_the_engine_invariants(scheduler: str) -> None:
    from test_sim_validation import check_invariants, config, workload

    req = workload(60, seed=4, rate=30.0, prompt=(1, 300), output=(0, 60))
    cfg = config(kv_blocks=120, max_num_seqs=6, scheduler=scheduler, instances=3,
                 route="weighted", route_weights=(0.6, 0.3, 0.1))
    r = simulate_requests(req, cfg)
    check_invariants(req, r, cfg)
    assert (r.instance >= 0).all()  # every request fits a pool and is routed as dealt
    np.testing.assert_array_equal(r.instance, weighted_assignment(60, (0.6, 0.3, 0.1)))
