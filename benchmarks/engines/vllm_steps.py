"""`trace simulate` against vLLM's own scheduler, step by step, with the same step time.

Builds the requests the simulator runs (`sim.summary.request_arrays`: arrivals, lengths, and
the identity of every KV block, output blocks included when the trace gives output tokens),
hands them to `drive_vllm_scheduler.py` in an environment with vLLM (its `Scheduler` or
`AsyncScheduler` on CPU with a fake model; token ids derived from the block identities, so
its prefix cache sees what the simulator's sees), runs `sim.simulate_requests` with the same
limits and the same step time (`a + per_token·tokens + per_context·Σcontext`), and compares:

    golden    the small fixtures of tests/fixtures/sim_vllm/ (six workload shapes, synchronous and
              async), written with --write; without it, checked against the stored ones
    vcr-stats two of those cases run again with the scheduler's statistics on, written as
              vllm-vcr's tap records them (tests/fixtures/captures/vcr/stats/: the trace and
              the step-stats sidecar), with --write; without it, checked against the stored
    accuracy  the accuracy table of docs/simulate.md: six workloads and two more at vLLM 0.33's
              default settings, TTFT/E2E percentiles, makespan, preemptions and hit tokens
    sweep     random configurations (pool, seats, budget, chunking, threshold, caching,
              sync/async) on small traces, every step compared

    python benchmarks/engines/vllm_steps.py golden [--write]
    python benchmarks/engines/vllm_steps.py vcr-stats [--write]
    python benchmarks/engines/vllm_steps.py accuracy
    python benchmarks/engines/vllm_steps.py sweep --configs 80

(`--vllm-python PATH` or `VLLM_PYTHON` names the environment with vLLM, by default the one
README.md makes, /work/venv-vllm.)

The driver runs in its own process (vLLM is never imported here), so the project's
environment needs no vLLM. The step time is shared on purpose: the comparison measures the
scheduler and cache model, not the GPU model (a separate error, see docs/simulate.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from yaotu_trace.data.schema import RawTrace, Trace, normalize  # noqa: E402
from yaotu_trace.sim import (  # noqa: E402
    RequestArrays,
    SimConfig,
    StepCost,
    block_identities,
    simulate_requests,
)
from yaotu_trace.sim.generate import GenerateOptions, generate_requests  # noqa: E402
from yaotu_trace.sim.run import SimResult, _runnable, _token_budget  # noqa: E402
from yaotu_trace.sim.summary import request_arrays  # noqa: E402
from yaotu_trace.sim.workloads import WorkloadKind as WorkloadName  # noqa: E402

DRIVER = Path(__file__).resolve().parent / "drive_vllm_scheduler.py"
FIXTURES = ROOT / "tests" / "fixtures" / "sim_vllm"
DEFAULT_PYTHON = os.environ.get("VLLM_PYTHON", "/work/venv-vllm/bin/python")  # README.md
BLOCK = 16
# The shared step time: 5 ms fixed, 30 µs a token, 50 ns a context token (an 8B model on an
# H100 within a factor of two; the scheduler comparison does not depend on the values).
STEP = {"a_s": 0.005, "per_token_s": 3e-5, "per_context_token_s": 5e-8}


@dataclass(frozen=True)
class Engine:
    """The limits both sides run with (vLLM 0.33's defaults unless a case says otherwise)."""

    kv_blocks: int
    max_num_seqs: int = 1024
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    prefix_caching: bool = True
    async_scheduling: bool = True

    def sim_config(self, step: dict[str, float]) -> SimConfig:
        return SimConfig(kv_blocks=self.kv_blocks, block_size_tokens=BLOCK,
                         max_num_seqs=self.max_num_seqs,
                         max_batched_tokens=self.max_batched_tokens,
                         chunked_prefill=self.chunked_prefill,
                         long_prefill_token_threshold=self.long_prefill_token_threshold,
                         prefix_caching=self.prefix_caching,
                         async_scheduling=self.async_scheduling,
                         step_cost=StepCost.fixed(step["a_s"], 0.0, step["per_context_token_s"],
                                                  per_token_s=step["per_token_s"]))


@dataclass(frozen=True)
class Workload:
    """A generated trace: `trace generate SCENARIO --requests N --seed S --rate R`."""

    scenario: str
    requests: int
    seed: int = 0
    rate_per_s: float | None = None
    tenants: int | None = None
    max_output_tokens: int | None = None  # answers cut short (a later turn keeps the whole)
    time_scale: float = 1.0  # arrivals compressed (< 1) so that the requests overlap

    def trace(self) -> Trace:
        table = generate_requests(GenerateOptions(
            scenario=WorkloadName(self.scenario), seed=self.seed, requests=self.requests,
            rate_per_s=self.rate_per_s, tenants=self.tenants))
        if self.max_output_tokens is not None:
            cut = self.max_output_tokens
            table["output_len"] = table["output_len"].clip(upper=cut)
            if "output_tokens" in table:
                table["output_tokens"] = [list(t)[:cut] for t in table["output_tokens"]]
        table["arrival_s"] = (table["arrival_s"] * self.time_scale).round(6)
        return normalize(RawTrace(requests=table, format_name="canonical"), "generated")


# ---- the two sides


def prepared(trace: Trace, engine: Engine) -> tuple[RequestArrays, SimConfig, np.ndarray,
                                                    np.ndarray]:
    """(the runnable requests, the config, block offsets, identities) both sides run."""
    config = engine.sim_config(STEP)
    requests, _ = request_arrays(trace, BLOCK)
    _, runnable = _runnable(requests, config)
    offsets, ident, _, _ = block_identities(runnable, runnable.output_tokens, BLOCK,
                                            config.prefix_caching)
    return runnable, config, offsets, ident


def driver_input(runnable: RequestArrays, config: SimConfig, offsets: np.ndarray,
                 ident: np.ndarray, step: dict[str, float]) -> dict[str, Any]:
    """What `drive_vllm_scheduler.py` reads."""
    budget = _token_budget(runnable, config)
    longest = int((runnable.prompt_tokens + runnable.output_tokens).max())
    max_model_len = budget if not config.chunked_prefill else max(131072, longest + 1)
    return {
        "config": {"block_size": BLOCK, "num_gpu_blocks": config.kv_blocks,
                   "max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": budget,
                   "max_model_len": max_model_len,
                   "enable_chunked_prefill": config.chunked_prefill,
                   "long_prefill_token_threshold": config.long_prefill_token_threshold,
                   "enable_prefix_caching": config.prefix_caching,
                   "async_scheduling": config.async_scheduling},
        "step_time": step,
        "requests": [{"arrival_s": float(runnable.arrival_s[i]),
                      "prompt_len": int(runnable.prompt_tokens[i]),
                      "output_len": int(runnable.output_tokens[i]),
                      "block_ids": ident[offsets[i]:offsets[i + 1]].tolist()}
                     for i in range(runnable.num_requests)],
    }


def run_driver(spec: dict[str, Any], python: str) -> dict[str, Any]:
    """vLLM's run of `spec`, from the driver in its own environment."""
    return run_driver_many([spec], python)[0]


def run_driver_many(specs: list[dict[str, Any]], python: str) -> list[dict[str, Any]]:
    """vLLM's runs of `specs`, in one driver process (vLLM is imported once)."""
    with tempfile.TemporaryDirectory() as folder:
        src, dst = Path(folder) / "in.json", Path(folder) / "out.json"
        src.write_text(json.dumps({"cases": specs}))
        done = subprocess.run([python, str(DRIVER), str(src), str(dst)], capture_output=True,
                              text=True, cwd=folder)
        if done.returncode != 0:
            raise SystemExit(f"the vLLM driver failed:\n{done.stderr[-3000:]}")
        return list(json.loads(dst.read_text())["cases"])


def simulate_first_copy_wins(runnable: RequestArrays, config: SimConfig) -> SimResult:
    """`simulate_requests` with one cached copy per block identity (a block computed a second
    time at once stays private): what the simulator did before it kept vLLM's copies."""
    from yaotu_trace.sim.engine import simulate_cluster
    from yaotu_trace.sim.engine_params import engine_params, step_cost_params
    from yaotu_trace.sim.run import _engine_inputs, _result

    keep, runnable = _runnable(runnable, config)
    inputs = _engine_inputs(runnable, config)
    params = engine_params(config, _token_budget(runnable, config))._replace(
        duplicate_copies=False)
    out = simulate_cluster(inputs, params, step_cost_params(config.step_cost))
    return _result(runnable, keep, inputs.tt_off, runnable.output_tokens, out, config)


def real_side(real: dict[str, Any]) -> dict[str, Any]:
    """The engine's run as arrays: the step log and per-request timing."""
    steps = np.array([row[:9] for row in real["steps"]], dtype=np.float64).reshape(-1, 9)
    reqs = real["requests"]
    tokens = [np.asarray(r["token_times_s"], dtype=np.float64) for r in reqs]
    return {
        "start": steps[:, 1], "end": steps[:, 2], "tokens": steps[:, 3].astype(np.int64),
        "requests": steps[:, 4].astype(np.int64), "preempted": steps[:, 5].astype(np.int64),
        "kv_used": steps[:, 6].astype(np.int64), "running": steps[:, 7].astype(np.int64),
        "waiting": steps[:, 8].astype(np.int64),
        "scheduled_s": np.array([np.nan if r["first_scheduled_s"] is None
                                 else r["first_scheduled_s"] for r in reqs]),
        "hit_tokens": np.array([r["hit_tokens"] or 0 for r in reqs], dtype=np.int64),
        "preemptions": np.array([r["preemptions"] for r in reqs], dtype=np.int64),
        "token_times": tokens,
    }


def sim_side(result: SimResult) -> dict[str, Any]:
    """The simulator's run in the same shape."""
    off = result.token_offsets
    return {
        "start": result.step_start_s, "end": result.step_end_s,
        "tokens": result.step_prefill_tokens + result.step_decode_tokens,
        "requests": result.step_num_scheduled, "preempted": result.step_num_preempted,
        "kv_used": result.step_kv_blocks_used, "running": result.step_num_running,
        "waiting": result.step_num_waiting, "scheduled_s": result.scheduled_s,
        "hit_tokens": result.cached_tokens, "preemptions": result.num_preemptions,
        "token_times": [result.token_times_s[off[i]:off[i + 1]]
                        for i in range(len(off) - 1)],
    }


STEP_FIELDS = ("tokens", "requests", "preempted", "kv_used", "running", "waiting")


def first_difference(sim: dict[str, Any], real: dict[str, Any], tol_s: float = 1e-9
                     ) -> str | None:
    """Where the two runs part (None: identical in every field of every step and request)."""
    n_sim, n_real = len(sim["start"]), len(real["start"])
    for k in range(min(n_sim, n_real)):
        for name in STEP_FIELDS:
            if sim[name][k] != real[name][k]:
                return f"step {k}: {name} sim {sim[name][k]} vLLM {real[name][k]}"
        for name in ("start", "end"):
            if abs(sim[name][k] - real[name][k]) > tol_s:
                return f"step {k}: {name} sim {sim[name][k]:.9f} vLLM {real[name][k]:.9f}"
    if n_sim != n_real:
        return f"steps: sim {n_sim} vLLM {n_real}"
    for name in ("hit_tokens", "preemptions"):
        bad = np.flatnonzero(sim[name] != real[name])
        if bad.size:
            r = int(bad[0])
            return f"request {r}: {name} sim {sim[name][r]} vLLM {real[name][r]}"
    bad = np.flatnonzero(np.abs(sim["scheduled_s"] - real["scheduled_s"]) > tol_s)
    if bad.size:
        return f"request {int(bad[0])}: scheduled_s differs"
    for r, (a, b) in enumerate(zip(sim["token_times"], real["token_times"], strict=True)):
        if len(a) != len(b) or (len(a) and np.abs(a - b).max() > tol_s):
            return f"request {r}: token times differ ({len(a)} vs {len(b)} tokens)"
    return None


# ---- metrics of the accuracy table


def metrics(side: dict[str, Any], arrival: np.ndarray) -> dict[str, float]:
    """TTFT and E2E percentiles (s), makespan (s), preemptions and hit tokens of one run."""
    first = np.array([t[0] for t in side["token_times"]])
    last = np.array([t[-1] for t in side["token_times"]])
    ttft, e2e = first - arrival, last - arrival
    out = {f"ttft_p{q}": float(np.percentile(ttft, q)) for q in (50, 90, 99)}
    out |= {f"e2e_p{q}": float(np.percentile(e2e, q)) for q in (50, 90, 99)}
    out["makespan"] = float(last.max() - arrival.min())
    out["preemptions"] = float(side["preemptions"].sum())
    out["hit_tokens"] = float(side["hit_tokens"].sum())
    return out


# ---- the golden fixtures

GOLDEN: tuple[tuple[str, Workload, Engine], ...] = (
    ("chat", Workload("chat", 24, seed=3, rate_per_s=0.2, max_output_tokens=120,
                       time_scale=0.05),
     Engine(kv_blocks=300)),
    ("multi_tenant", Workload("multi-tenant", 24, seed=5, rate_per_s=60.0, tenants=4,
                               max_output_tokens=100),
     Engine(kv_blocks=300, max_batched_tokens=2048)),
    ("rag", Workload("rag", 20, seed=7, rate_per_s=60.0, max_output_tokens=100),
     Engine(kv_blocks=500)),
    ("bursty", Workload("bursty", 50, seed=11, rate_per_s=20.0), Engine(kv_blocks=700)),
    ("agentic", Workload("agentic", 11, seed=3, rate_per_s=0.1, time_scale=0.1),
     Engine(kv_blocks=2500, max_batched_tokens=4096)),
    ("long_prefill", Workload("long-prefill", 12, seed=17, rate_per_s=20.0,
                               max_output_tokens=150),
     Engine(kv_blocks=2200, max_batched_tokens=4096, long_prefill_token_threshold=1024)),
)


def fixture_document(name: str, workload: Workload, engine: Engine,
                     reals: dict[str, dict[str, Any]], requests: dict[str, Any]
                     ) -> dict[str, Any]:
    """Both modes of one golden case (vLLM's runs `reals`), with the requests the simulator
    replays."""
    runs: dict[str, Any] = {}
    for mode, real in reals.items():
        ends = np.array([row[2] for row in real["steps"]])
        runs[mode] = {
            "scheduler": real["scheduler"], "batch_queue": real["batch_queue"],
            "steps": [[_ns(row[1]), _ns(row[2]), *row[3:9]] for row in real["steps"]],
            "first_scheduled_ns": [_ns(r["first_scheduled_s"]) for r in real["requests"]],
            "hit_tokens": [r["hit_tokens"] for r in real["requests"]],
            "preemptions": [r["preemptions"] for r in real["requests"]],
            # the step whose end each token came out at (its time is that step's end)
            "token_steps": [np.searchsorted(ends, r["token_times_s"]).tolist()
                            for r in real["requests"]],
        }
    head = {k: reals["sync"][k] for k in ("engine", "engine_version", "torch_version")}
    return {**head, "case": name,
            "command": "python benchmarks/engines/vllm_steps.py golden --write",
            "workload": workload.__dict__, "engine_limits": engine.__dict__,
            "block_size": BLOCK, "step_time": STEP, "step_columns": STEP_COLUMNS,
            "requests": requests, "runs": runs}


# A fixture's step rows: GPU start and end in integer nanoseconds, then the counts after
# scheduling (tokens, requests and preemptions of the step, KV blocks in use, running, waiting).
STEP_COLUMNS = ["start_ns", "end_ns", "tokens", "requests", "preempted", "kv_blocks_used",
                "running", "waiting"]


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def compact_requests(runnable: RequestArrays) -> dict[str, Any]:
    """The request arrays of a case, small: lengths, arrivals and the shared block ids."""
    assert runnable.chain_offsets is not None and runnable.chain_ids is not None
    out: dict[str, Any] = {
        "arrival_s": runnable.arrival_s.tolist(),
        "prompt_tokens": runnable.prompt_tokens.tolist(),
        "output_tokens": runnable.output_tokens.tolist(),
        "num_chain_ids": int(runnable.num_chain_ids),
        "chain_ids": [runnable.chain_ids[runnable.chain_offsets[i]:runnable.chain_offsets[i + 1]]
                      .tolist() for i in range(runnable.num_requests)],
    }
    if runnable.output_ids is not None and runnable.output_offsets is not None:
        o = runnable.output_offsets
        out["output_ids"] = [runnable.output_ids[o[i]:o[i + 1]].tolist()
                             for i in range(runnable.num_requests)]
    return out


def dump_fixture(document: dict[str, Any], path: Path) -> None:
    """One key a line, one step or request list a line: diffable, the same bytes every run."""
    lines = ["{"]
    items = list(document.items())
    for n, (key, value) in enumerate(items):
        comma = "," if n < len(items) - 1 else ""
        if key in ("requests", "runs"):
            lines.append(f"  {json.dumps(key)}: {{")
            lines += _nested(value, "    ")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}{comma}")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def _nested(value: dict[str, Any], pad: str) -> list[str]:
    lines = []
    items = list(value.items())
    for n, (key, sub) in enumerate(items):
        comma = "," if n < len(items) - 1 else ""
        if isinstance(sub, dict):
            lines.append(f"{pad}{json.dumps(key)}: {{")
            lines += _nested(sub, pad + "  ")
            lines.append(f"{pad}}}{comma}")
        elif isinstance(sub, list) and sub and isinstance(sub[0], list):
            lines.append(f"{pad}{json.dumps(key)}: [")
            rows = [f"{pad}  {json.dumps(row, separators=(',', ':'))}" for row in sub]
            lines.append(",\n".join(rows))
            lines.append(f"{pad}]{comma}")
        else:
            lines.append(f"{pad}{json.dumps(key)}: {json.dumps(sub, separators=(',', ':'))}{comma}")
    return lines


def golden(args: argparse.Namespace) -> int:
    """Write (--write) or check the golden fixtures; print what matches."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    cases = [c for c in GOLDEN if not args.only or args.only in c[0]]
    specs, stored = [], []
    for _, workload, engine in cases:
        trace = workload.trace()
        for flag in (False, True):
            runnable, config, offsets, ident = prepared(trace,
                                                        replace(engine, async_scheduling=flag))
            specs.append(driver_input(runnable, config, offsets, ident, STEP))
        stored.append(compact_requests(runnable))
    reals = run_driver_many(specs, args.vllm_python)
    status = 0
    for k, (name, workload, engine) in enumerate(cases):
        document = fixture_document(name, workload, engine,
                                    {"sync": reals[2 * k], "async": reals[2 * k + 1]}, stored[k])
        path = FIXTURES / f"{name}.json"
        if args.write:
            dump_fixture(document, path)
        for mode in ("sync", "async"):
            verdict = compare_fixture(document, mode)
            run = document["runs"][mode]
            print(f"{name:<14}{mode:<7}{len(document['requests']['arrival_s']):>4} req"
                  f"{len(run['steps']):>6} steps{sum(run['preemptions']):>5} preempted"
                  f"{sum(run['hit_tokens']):>8} hit tokens  {verdict or 'identical'}")
            status |= verdict is not None
        if path.exists():
            print(f"{'':<14}{path.relative_to(ROOT)}: {path.stat().st_size / 1e3:.0f} kB")
    return status


VCR_STATS = ROOT / "tests" / "fixtures" / "captures" / "vcr" / "stats"
VCR_STATS_CASES = ("multi_tenant", "long_prefill")  # a queue, and preemptions with chunking


def vcr_stats(args: argparse.Namespace) -> int:
    """vLLM's synchronous run of `VCR_STATS_CASES` with `log_stats`, as vllm-vcr's tap writes
    it: `<case>.trace.jsonl` (the trace, in finish order) and `<case>.step-stats.jsonl` (the
    sidecar: the stats vLLM attached to each step's outputs), beside `<case>.json` (the run:
    steps, token steps, hits, preemptions), `<case>.metrics.prom` (the /metrics text vLLM's
    own Prometheus logger makes of the sidecar, `vcr_stats_prometheus.py`) and
    `<case>.vllm.log` (what vLLM's LoggingStatLogger logs of the same steps with
    `--enable-logging-iteration-details`). Written with --write, else compared."""
    sys.path.insert(0, str(VCR_STATS.parent))
    from tap import scheduler_json, step_stats_lines, tap_records

    VCR_STATS.mkdir(parents=True, exist_ok=True)
    specs, docs, hashes = [], [], []
    for name in VCR_STATS_CASES:
        doc = json.loads((FIXTURES / f"{name}.json").read_text())
        requests = fixture_requests(doc["requests"])
        engine = Engine(**{**doc["engine_limits"], "async_scheduling": False})
        config = engine.sim_config(doc["step_time"])
        offsets, ident, _, _ = block_identities(requests, requests.output_tokens, BLOCK,
                                                config.prefix_caching)
        spec = driver_input(requests, config, offsets, ident, doc["step_time"])
        spec["config"]["log_stats"] = spec["config"]["kv_cache_metrics"] = True
        spec["config"]["iteration_details"] = True
        specs.append(spec)
        docs.append(doc)
        hashes.append([ident[offsets[i]:offsets[i] + int(requests.prompt_tokens[i]) // BLOCK]
                       .tolist() for i in range(requests.num_requests)])
    status = 0
    for name, doc, real, prompts in zip(VCR_STATS_CASES, docs,
                                        run_driver_many(specs, args.vllm_python), hashes,
                                        strict=True):
        run = fixture_document(name, Workload(**doc["workload"]),
                               Engine(**doc["engine_limits"]), {"sync": real},
                               doc["requests"])["runs"]["sync"]
        if len(real["stats"]) != len(run["steps"]):
            raise SystemExit(f"{name}: {len(real['stats'])} stats for {len(run['steps'])} steps")
        run["stats"] = [scheduler_json(stats) for _, stats in real["stats"]]
        meta = {"meta": {"source": "tap", "vllm_version": real["engine_version"],
                         "max_num_seqs": doc["engine_limits"]["max_num_seqs"],
                         "block_size": BLOCK,
                         "ready_response_hex": real["ready_response_hex"]}}
        records = tap_records(run, doc["requests"], prompts)
        records.sort(key=lambda r: r["arrival_ms"] + r["ttft_ms"] + sum(r["itl_ms"]))
        files = {
            f"{name}.json": json.dumps({"engine_version": real["engine_version"],
                                        "command": "python benchmarks/engines/vllm_steps.py "
                                                   "vcr-stats --write",
                                        "step_columns": STEP_COLUMNS,
                                        "run": {k: v for k, v in run.items() if k != "stats"}},
                                       separators=(",", ":")) + "\n",
            f"{name}.trace.jsonl": "".join(json.dumps(x) + "\n" for x in [meta, *records]),
            f"{name}.step-stats.jsonl": "".join(json.dumps(x, separators=(",", ":")) + "\n"
                                                for x in step_stats_lines(run)),
            # vLLM's own log of the same steps (--enable-logging-iteration-details), its clock
            # the run's from 2026-01-01 00:00:00 UTC
            f"{name}.vllm.log": "".join(line + "\n" for line in real["log_lines"]),
        }
        # What vLLM's own Prometheus logger makes of the sidecar: the /metrics text to read
        # it as --metrics against.
        with tempfile.TemporaryDirectory() as folder:
            sidecar, prom = Path(folder) / "s.jsonl", Path(folder) / "m.prom"
            sidecar.write_text(files[f"{name}.step-stats.jsonl"])
            done = subprocess.run([args.vllm_python, str(DRIVER.parent / "vcr_stats_prometheus.py"),
                                   str(sidecar), str(prom)], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"vLLM's logger failed:\n{done.stderr[-3000:]}")
            files[f"{name}.metrics.prom"] = prom.read_text()
        for file, text in files.items():
            path = VCR_STATS / file
            same = path.exists() and path.read_text() == text
            if args.write:
                path.write_text(text)
            status |= not (same or args.write)
            print(f"{path.relative_to(ROOT)}: {len(text) / 1e3:.0f} kB, "
                  f"{'written' if args.write else ('same' if same else 'DIFFERS')}")
        print(f"{name}: {len(run['steps'])} steps, {sum(run['preemptions'])} preempted, "
              f"most waiting {max(s['num_waiting_reqs'] for s in run['stats'])}")
    return status


def compare_fixture(document: dict[str, Any], mode: str) -> str | None:
    """Replay one fixture's mode through the simulator; where it parts from vLLM, or None."""
    run = document["runs"][mode]
    requests = fixture_requests(document["requests"])
    engine = Engine(**{**document["engine_limits"], "async_scheduling": mode == "async"})
    result = simulate_requests(requests, engine.sim_config(document["step_time"]))
    return first_difference(sim_side(result), fixture_run(run), tol_s=2e-9)


def fixture_run(run: dict[str, Any]) -> dict[str, Any]:
    """A fixture's stored vLLM run in the shape `first_difference` compares."""
    steps = np.array(run["steps"], dtype=np.int64).reshape(-1, len(STEP_COLUMNS))
    ends = steps[:, 1] / 1e9
    return {
        "start": steps[:, 0] / 1e9, "end": ends, "tokens": steps[:, 2],
        "requests": steps[:, 3], "preempted": steps[:, 4], "kv_used": steps[:, 5],
        "running": steps[:, 6], "waiting": steps[:, 7],
        "scheduled_s": np.array(run["first_scheduled_ns"], dtype=np.float64) / 1e9,
        "hit_tokens": np.array(run["hit_tokens"], dtype=np.int64),
        "preemptions": np.array(run["preemptions"], dtype=np.int64),
        "token_times": [ends[np.asarray(s, dtype=np.int64)] for s in run["token_steps"]],
    }


def fixture_requests(stored: dict[str, Any]) -> RequestArrays:
    """A fixture's requests as the simulator takes them."""
    chains = stored["chain_ids"]
    offsets = np.zeros(len(chains) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in chains], out=offsets[1:])
    ids = np.array([x for c in chains for x in c], dtype=np.int64)
    out_offsets = out_ids = None
    if "output_ids" in stored:
        outs = stored["output_ids"]
        out_offsets = np.zeros(len(outs) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in outs], out=out_offsets[1:])
        out_ids = np.array([x for c in outs for x in c], dtype=np.int64)
    return RequestArrays(
        arrival_s=np.array(stored["arrival_s"], dtype=np.float64),
        prompt_tokens=np.array(stored["prompt_tokens"], dtype=np.int64),
        output_tokens=np.array(stored["output_tokens"], dtype=np.int64),
        chain_offsets=offsets, chain_ids=ids, chain_block_tokens=BLOCK,
        num_chain_ids=int(stored["num_chain_ids"]), output_offsets=out_offsets,
        output_ids=out_ids)


# ---- the accuracy table at vLLM 0.33's defaults

ACCURACY: tuple[tuple[str, Workload, int], ...] = (
    # (label, trace, KV blocks): each pool makes its workload preempt now and then (an H100
    # holds ~26,000 blocks of Llama-3.1-8B, where these small traces never preempt; the last
    # rows add a roomy pool and two tight ones)
    ("chat", Workload("chat", 300, seed=1, rate_per_s=6.0), 1000),
    ("multi-tenant", Workload("multi-tenant", 300, seed=2, rate_per_s=8.0), 2500),
    ("RAG", Workload("rag", 300, seed=3, rate_per_s=6.0), 2500),
    ("bursty", Workload("bursty", 300, seed=4, rate_per_s=5.0), 400),
    ("agentic", Workload("agentic", 120, seed=5, rate_per_s=2.0), 8000),
    ("long prefill", Workload("long-prefill", 120, seed=6, rate_per_s=2.0), 1500),
    ("chat, roomy", Workload("chat", 300, seed=1, rate_per_s=6.0), 26000),
    ("multi-tenant, tight", Workload("multi-tenant", 300, seed=2, rate_per_s=8.0), 600),
    ("RAG, tight", Workload("rag", 300, seed=3, rate_per_s=6.0), 1000),
)
COLUMNS = ("ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50", "e2e_p99", "makespan")


def accuracy(args: argparse.Namespace) -> int:
    """Print the accuracy table: the simulator's error against vLLM at its defaults (async
    scheduling), before this engine model (synchronous, answers and second copies private)
    and now, and whether the runs are identical step by step (async and synchronous)."""
    cases = [c for c in ACCURACY if not args.only or args.only in c[0]]
    runs = []
    for _, workload, blocks in cases:
        trace = workload.trace()
        for flag in (True, False):
            runnable, config, offsets, ident = prepared(
                trace, Engine(kv_blocks=blocks, async_scheduling=flag))
            runs.append((runnable, config, driver_input(runnable, config, offsets, ident, STEP)))
    t0 = time.perf_counter()
    reals = run_driver_many([r[-1] for r in runs], args.vllm_python)
    t_vllm = time.perf_counter() - t0
    names = {"ttft_p50": "TTFT p50", "ttft_p90": "TTFT p90", "ttft_p99": "TTFT p99",
             "e2e_p50": "E2E p50", "e2e_p99": "E2E p99", "makespan": "makespan"}
    print("| workload | requests | KV blocks | steps | "
          + " | ".join(names[c] for c in COLUMNS)
          + " | preemptions | hit tokens | step by step |")
    print("|---|" + "---:|" * (3 + len(COLUMNS) + 2) + "---|")
    t_sim = 0.0
    for k, (label, _, blocks) in enumerate(cases):
        runnable, config, _ = runs[2 * k]
        real = real_side(reals[2 * k])
        t1 = time.perf_counter()
        now = sim_side(simulate_requests(runnable, config))
        t_sim += time.perf_counter() - t1
        stripped = replace(runnable, output_ids=None, output_offsets=None)
        before = sim_side(simulate_first_copy_wins(stripped, replace(config,
                                                                     async_scheduling=False)))
        b, a, o = (metrics(x, runnable.arrival_s) for x in (real, now, before))
        sync_runnable, sync_config, _ = runs[2 * k + 1]
        same = [first_difference(now, real),
                first_difference(sim_side(simulate_requests(sync_runnable, sync_config)),
                                 real_side(reals[2 * k + 1]))]
        cells = [f"{_value(c, b[c])} ({_err(a[c], b[c])}; was {_err(o[c], b[c])})"
                 for c in COLUMNS]
        pre = (f"{int(b['preemptions'])} ({int(a['preemptions'])}; was "
               f"{int(o['preemptions'])})")
        hits = (f"{b['hit_tokens'] / 1e3:,.1f}k ({_err(a['hit_tokens'], b['hit_tokens'])}; "
                f"was {_err(o['hit_tokens'], b['hit_tokens'])})")
        verdict = " / ".join("identical" if v is None else "differ" for v in same)
        print(f"| {label} | {runnable.num_requests} | {blocks:,} | {len(real['start']):,} | "
              + " | ".join(cells) + f" | {pre} | {hits} | {verdict} |")
        for mode, v in zip(("async", "sync"), same, strict=True):
            if v is not None:
                print(f"    {mode}: {v}")
    print(f"\nvLLM's value, then (the simulator's error now; before). vLLM {t_vllm:.0f} s, "
          f"simulator {t_sim:.1f} s.")
    return 0


def _value(column: str, seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _err(ours: float, theirs: float) -> str:
    value = 100 * (ours / theirs - 1) if theirs else 0.0
    return "0 %" if abs(value) < 0.005 else f"{value:+.1f} %"


# ---- random configurations


def sweep(args: argparse.Namespace) -> int:
    """Random configurations on small traces; print each one's verdict and a summary."""
    rng = np.random.default_rng(args.seed)
    shapes = ("chat", "multi-tenant", "rag", "bursty", "agentic", "long-prefill")
    cases = []
    for k in range(args.configs):
        shape = shapes[k % len(shapes)]
        n = int(rng.integers(12, 40)) if shape not in ("agentic", "long-prefill") else int(
            rng.integers(6, 16))
        workload = Workload(shape, n, seed=int(rng.integers(0, 10_000)),
                             rate_per_s=float(rng.choice([2.0, 8.0, 30.0])))
        trace = workload.trace()
        seqs = int(rng.choice([2, 4, 16, 256]))
        longest_block = int(((trace.requests["prompt_len"] + trace.requests["output_len"])
                             // BLOCK).max()) + 2
        engine = Engine(
            kv_blocks=int(longest_block * rng.choice([1.0, 1.5, 3.0, 8.0]) + 1),
            max_num_seqs=seqs,
            max_batched_tokens=max(seqs, int(rng.choice([256, 512, 2048, 8192]))),
            chunked_prefill=bool(rng.random() < 0.75),
            long_prefill_token_threshold=int(rng.choice([0, 0, 128, 600])),
            prefix_caching=bool(rng.random() < 0.85),
            async_scheduling=bool(rng.random() < 0.5))
        runnable, config, offsets, ident = prepared(trace, engine)
        spec = driver_input(runnable, config, offsets, ident, STEP)
        spec["config"]["count_duplicates"] = True
        cases.append((shape, engine, runnable, config, spec))
    t0 = time.perf_counter()
    reals = run_driver_many([c[-1] for c in cases], args.vllm_python)
    t_vllm = time.perf_counter() - t0
    identical = with_copies = parted = 0
    t0 = time.perf_counter()
    for k, ((shape, engine, runnable, config, _), raw) in enumerate(zip(cases, reals,
                                                                        strict=True)):
        real = real_side(raw)
        sim = sim_side(simulate_requests(runnable, config))
        verdict = first_difference(sim, real)
        identical += verdict is None
        copies = raw["steps_with_duplicate_copies"]
        if copies:
            with_copies += 1
            single = sim_side(simulate_first_copy_wins(runnable, config))
            parted += first_difference(single, real) is not None
        print(f"{k:>3} {shape:<13}{runnable.num_requests:>4} req {engine.kv_blocks:>6} blk "
              f"{engine.max_num_seqs:>4} seq {engine.max_batched_tokens:>5} tok "
              f"{'chunk' if engine.chunked_prefill else 'whole':<6}"
              f"lpt {engine.long_prefill_token_threshold:<4}"
              f"{'cache' if engine.prefix_caching else 'nocache':<8}"
              f"{'async' if engine.async_scheduling else 'sync':<6}"
              f"{len(real['start']):>6} steps {int(real['preemptions'].sum()):>4} pre "
              f"{int(real['hit_tokens'].sum()):>7} hit {copies:>5} dup  "
              f"{verdict or 'identical'}", flush=True)
    print(f"{identical} of {args.configs} configurations identical in every step and request "
          f"(vLLM {t_vllm:.0f} s, simulator {time.perf_counter() - t0:.1f} s); {with_copies} "
          f"held duplicate cached copies (dup: steps with some), {parted} of them differ from "
          "vLLM when one copy wins")
    return 0 if identical == args.configs else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("golden", "accuracy", "sweep", "vcr-stats"))
    parser.add_argument("--vllm-python", default=DEFAULT_PYTHON,
                        help="a Python with vLLM installed (benchmarks/engines/README.md)")
    parser.add_argument("--write", action="store_true",
                        help="golden, vcr-stats: write the fixtures")
    parser.add_argument("--only", default="", help="cases whose name contains this")
    parser.add_argument("--configs", type=int, default=80, help="sweep: how many")
    parser.add_argument("--seed", type=int, default=0, help="sweep: the draw's seed")
    args = parser.parse_args(argv)
    return {"golden": golden, "accuracy": accuracy, "sweep": sweep,
            "vcr-stats": vcr_stats}[args.what](args)


if __name__ == "__main__":
    raise SystemExit(main())
