"""`--tier` on the command line: the tiered replay's outputs (--out columns, the JSON, the
waterfall step, the sweep's two-dimensional curve, the analyze and diagnose sections) and its
one-line refusals (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, shared_trace

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode
from yaotu_trace.render.json_report import json_schema

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")

TRACE = str(FIXTURES / "engines" / "trace_mixed.parquet")
GOLDEN = FIXTURES / "tiers_vllm" / "vllm_offload_mixed.json"


def _golden(name: str, gpu_blocks: int, cpu_chunks: int) -> dict:
    """One recorded configuration of vLLM's offload (one block per chunk)."""
    configs = json.loads((GOLDEN.parent / name).read_text())["configs"]
    return next(c for c in configs if (c["num_gpu_blocks"], c["cpu_chunks"],
                                       c["blocks_per_chunk"]) == (gpu_blocks, cpu_chunks, 1))


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main([*args, "--format", "json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(doc))
    assert not errors, errors[0].message
    return doc


def test_replay_with_a_cpu_tier_writes_hits_by_source(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 blocks and a CPU tier of 176 chunks, as one golden config
    config = _golden(GOLDEN.name, 66, 176)
    out = tmp_path / "hits.csv"
    # WHEN replayed from the command line with the model's KV size
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=176blocks", "--model", "Llama-3.1-8B", "--out", str(out)], capsys)
    # THEN the columns are vLLM's per request, the total is their sum, bytes follow the hits
    table = pd.read_csv(out)
    assert table["gpu_hit_tokens"].tolist() == config["gpu_hit_tokens"]
    assert table["cpu_hit_tokens"].tolist() == config["cpu_hit_tokens"]
    assert (table["hit_tokens"] == table["gpu_hit_tokens"] + table["cpu_hit_tokens"]).all()
    assert (table["disk_hit_tokens"] == 0).all() and (table["remote_hit_tokens"] == 0).all()
    assert (table["cpu_loaded_bytes"] == table["cpu_hit_tokens"] * 131_072).all()
    assert (table["loss_cpu_tier_tokens"] == -table["cpu_hit_tokens"]).all()
    reuse = doc["prefix_reuse"]
    assert reuse["tiers"]["tiers"][0]["hit_tokens"] == sum(config["cpu_hit_tokens"])
    assert reuse["saved_prefill_tokens"] == sum(config["gpu_hit_tokens"]) + sum(
        config["cpu_hit_tokens"])
    steps = reuse["waterfall"]["steps"]
    assert steps[-1]["step"] == "cpu_tier" and steps[-1]["loss_tokens"] < 0
    assert reuse["waterfall"]["achieved_hit_tokens"] == reuse["saved_prefill_tokens"]
    assert doc["config"]["tier_policy"] == "vllm-native"
    # and the hit rates, which count the tier's hits, name it beside the pool
    rates = reuse["hit_rates"]
    assert rates["token_weighted"]["capacity"] == "66 blocks + cpu tier"
    assert rates["token_weighted"]["value"] == reuse["hit_ratio"]


@pytest.mark.parametrize(("fixture", "gpu_blocks", "cpu_chunks", "args", "key", "value"), [
    ("vllm_offload_mixed_arc.json", 35, 64, ["--tier-policy", "vllm-native-arc"],
     "tier_policy", "vllm-native-arc"),
    ("vllm_offload_mixed_threshold2.json", 66, 176, ["--tier-store-threshold", "2"],
     "tier_store_threshold", 2),
])
def test_replay_with_vllms_arc_or_store_threshold_is_vllms_per_request(
        fixture: str, gpu_blocks: int, cpu_chunks: int, args: list[str], key: str,
        value: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a pool and CPU tier recorded with the manager's eviction_policy arc (or its
    # store_threshold 2), where vLLM's CPU hits are not its plain LRU's
    config = _golden(fixture, gpu_blocks, cpu_chunks)
    assert config["cpu_hit_tokens"] != _golden(GOLDEN.name, gpu_blocks, cpu_chunks)[
        "cpu_hit_tokens"]
    out = tmp_path / "hits.csv"
    # WHEN replayed from the command line with the same option
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", str(gpu_blocks), "--tier",
                 f"cpu={cpu_chunks}blocks", *args, "--out", str(out)], capsys)
    # THEN every request's CPU hit is vLLM's, and the config says what ran
    assert pd.read_csv(out)["cpu_hit_tokens"].tolist() == config["cpu_hit_tokens"]
    assert doc["config"][key] == value


@pytest.mark.parametrize(("threshold", "said"), [(2, False), (1000, True)])
def test_a_store_threshold_no_chunk_reaches_is_said(threshold: int, said: bool,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the golden pool and CPU tier, WHEN replayed with a threshold some chunks reach
    # (2) and with one none of the 400 requests' chunks reaches (1,000)
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=176blocks", "--tier-store-threshold", str(threshold)], capsys)
    cpu = doc["prefix_reuse"]["tiers"]["tiers"][0]
    notes = [n for n in doc["prefix_reuse"]["tiers"]["notes"] if "stored nothing" in n]
    # THEN an empty tier is said to be the threshold's doing, in one note, and only then
    assert (cpu["stored_chunks"] == 0) == said and (cpu["hit_tokens"] == 0) == said
    assert notes == ([f"the cpu tier stored nothing: no chunk was offered {threshold:,} times "
                      f"(--tier-store-threshold {threshold:,}; vLLM stores a chunk from its "
                      f"{threshold:,}th offer on)"] if said else [])


@pytest.mark.parametrize(("cpu", "args", "said"), [
    ("64blocks", [], "1,024"), ("66blocks", ["--tier-policy", "lmcache"], "1,024"),
    ("176blocks", [], None), ("64blocks", ["--tier-policy", "vllm-native-arc"], None),
    ("64blocks", ["--tier-store-threshold", "2"], None),
    ("64blocks", ["--tier", "disk=unlimited"], None)])
def test_a_tier_no_larger_than_the_gpu_pool_is_said_to_hold_what_the_pool_holds(
        cpu: str, args: list[str], said: str | None,
        capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 blocks (1,056 tokens) and a CPU tier of 64 chunks below it,
    # where vLLM itself (the golden config 66/64) served 96 CPU tokens beside 24,816 GPU ones,
    # and of 176 chunks, where it served 4.5 times more; ARC and a store threshold of 2 keep
    # the reused chunks instead (vLLM: 2,032 and 8,032 CPU tokens at 66/64); LMCache's 66
    # blocks are four of its 256-token chunks; with vLLM's fs tier below, the CPU tier stages
    # what the disk serves
    # WHEN replayed under LRU rules (vLLM's, LMCache's) and under ARC and the threshold
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 f"cpu={cpu}", *args], capsys)
    tiers = doc["prefix_reuse"]["tiers"]
    notes = [n for n in tiers["notes"] if "no larger than the GPU pool" in n]
    # THEN the small LRU tier is said to hold what the pool holds, in the tiers section's notes
    # (not again among the replay's), and nothing is said of the larger tier or of ARC's and
    # the threshold's
    assert len(notes) == (0 if said is None else 1)
    if said is not None:
        assert notes[0].startswith(f"the cpu tier ({said} tokens) is no larger than the GPU "
                                   "pool above it (1,056 tokens)")
        assert notes[0] not in doc["prefix_reuse"]["notes"]  # said once, beside its table
    if not args:  # vLLM's own hits, as said
        config = _golden(GOLDEN.name, 66, int(cpu.removesuffix("blocks")))
        assert tiers["tiers"][0]["hit_tokens"] == sum(config["cpu_hit_tokens"])


def test_analyze_prints_the_notes_on_its_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a CPU tier of 64 chunks below vLLM's pool of 66 blocks, with Llama-3.1-8B's KV
    capsys.readouterr()
    # WHEN analyzed as a table
    assert main(["analyze", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=64blocks", "--model", "Llama-3.1-8B"]) == ExitCode.OK
    out = " ".join(capsys.readouterr().out.split())
    # THEN the tiers section says why the tier serves little, with the pool's size in GiB
    # (1,056 tokens × 128 KiB)
    section = out[out.index("Tiers below the GPU"):]
    assert "note: the cpu tier (1,024 tokens) is no larger than the GPU pool" in section
    assert "size it above the pool's 0.1 GiB (--tier cpu=...)" in section


@pytest.mark.parametrize(("cpu", "sizes", "axis"), [
    (64, [64, 128, 256, 512, 1024, 2048], "doublings"),
    (1767, [55, 110, 220, 441, 883, 1767], "halvings")])
def test_analyzes_curve_looks_above_a_tier_no_larger_than_the_pool(
        cpu: int, sizes: list[int], axis: str, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 blocks and a CPU tier of 64 chunks (no larger: it serves little)
    # or of 1,767 chunks (larger)
    # WHEN analyzed
    doc = _json(["analyze", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 f"cpu={cpu}blocks"], capsys)
    curve = doc["tier_curve"]
    # THEN the small tier's curve runs over its doublings, the large one's over its halvings,
    # and the cell at the pool and the given size is vLLM's own total (golden 66/64, 66/1767)
    assert curve["tier_capacity_chunks"] == sizes and curve["tier_sizes"] == axis
    row = curve["gpu_capacity_blocks"].index(66)
    config = _golden(GOLDEN.name, 66, cpu)
    assert curve["hit_tokens"][row][sizes.index(cpu)] == sum(config["gpu_hit_tokens"]) + sum(
        config["cpu_hit_tokens"])


def test_the_small_tier_of_docs_tiers_md_on_mooncake(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/tiers.md, "The curve around your pool": Llama-3.1-8B's 8,544-block pool over the
    Mooncake conversation trace (Mooncake's own file) with a 64 GiB CPU tier."""
    trace = shared_trace("mooncake/conversation_trace.jsonl")
    doc = _json(["analyze", str(trace), "--preset", "vllm", "--capacity", "8544", "--model",
                 "llama-3.1-8b", "--tier", "cpu=64GiB"], capsys)
    cpu = doc["tiers"]["tiers"][0]
    assert (cpu["stored_chunks"], cpu["evicted_chunks"], cpu["hit_tokens"]) == (
        263_457, 262_433, 0)
    assert any("size it above the pool's 534.0 GiB" in n for n in doc["tiers"]["notes"])
    curve = doc["tier_curve"]
    assert curve["tier_capacity_chunks"] == [1024 * 2**k for k in range(6)]
    rows = dict(zip(curve["gpu_capacity_blocks"], curve["hit_ratio"], strict=True))
    assert [round(100 * r, 1) for r in rows[8544]] == [19.8, 19.8, 19.8, 19.8, 27.6, 34.6]
    assert [round(100 * r, 1) for r in rows[2136]] == [5.7, 5.7, 9.3, 19.2, 27.6, 34.6]


@pytest.mark.parametrize("command", [["replay", "--no-waterfall"], ["analyze"]])
def test_the_tier_table_gives_the_gpu_pool_in_tokens_as_the_tiers(
        command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 16-token blocks and a CPU tier of 176 chunks of one block
    capsys.readouterr()
    # WHEN the replay (or the analysis) is printed as a table
    assert main([command[0], TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=176blocks", *command[1:]]) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    # THEN the GPU row's size is in tokens, as each tier's (66 × 16, 176 × 16)
    start = next(i for i, line in enumerate(out) if line.startswith("Tiers below the GPU"))
    rows = {line.split()[0]: line.split() for line in out[start:start + 12]
            if line.split()[:1] in (["gpu"], ["cpu"])}
    assert rows["gpu"][1:3] == ["1.06k", "tok"] and rows["cpu"][1:3] == ["2.82k", "tok"]


def test_replay_without_tier_has_no_tier_keys(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(["replay", TRACE, "--capacity", "66"], capsys)
    assert "tiers" not in doc["prefix_reuse"] and "tier_policy" not in doc["config"]


@pytest.mark.parametrize(("tier", "args", "said"), [
    ("64blocks", [], True), ("64blocks", ["--tier-policy", "vllm-native-arc"], False),
    ("67blocks", [], False)])
def test_sweep_says_when_no_tier_size_outgrows_the_smallest_pool(
        tier: str, args: list[str], said: bool, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN GPU pools of 66 and 132 16-token blocks and a CPU tier of 64 chunks at most (its
    # sizes 2 to 64 chunks), or of 67 (just over the smaller pool)
    doc = _json(["sweep", TRACE, "--preset", "vllm", "--capacities", "66,132", "--tier",
                 f"cpu={tier}", *args], capsys)
    # THEN under vLLM's LRU offload the curve says its tier holds what the pools hold; not
    # under ARC, which keeps the reused chunks, nor once a size outgrows a pool
    note = doc["tier_curve"]["note"]
    assert (note == "no cpu size here (1,024 tokens at most) is larger than the smallest GPU "
            "pool (1,056 tokens): such a tier holds the most recent chunks, most of which the "
            "pool still holds, and serves little; a --tier larger than the pools shows where "
            "it starts to serve") if said else note is None


def test_sweep_draws_gpu_size_by_tier_size(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(["sweep", TRACE, "--capacities", "35,66", "--tier", "cpu=1767blocks"], capsys)
    curve = doc["tier_curve"]
    assert curve["gpu_capacity_blocks"] == [35, 66]
    assert len(curve["tier_capacity_chunks"]) == 6 and curve["tier_capacity_chunks"][-1] == 1767
    assert curve["hit_tokens"][0][-1] == 14_880 + 42_944  # the golden config (35, 1767)


@pytest.mark.parametrize("policy", ["vllm-native", "lmcache"])
def test_sweep_jobs_gives_the_curve_of_one_thread(policy: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the 2 × 6 curve priced per point, WHEN its tier passes run on 3 threads THEN
    # every number, priced points included and in their order, is that of one thread
    args = ["sweep", TRACE, "--capacities", "35,66", "--tier", "cpu=1767blocks",
            "--tier-policy", policy, "--model", "llama-3.1-8b", "--gpu", "H100",
            "--gpu-price", "2.5", "--memory-price", "3"]
    one = _json(args, capsys)
    three = _json([*args, "--jobs", "3"], capsys)
    assert three["tier_curve"] == one["tier_curve"]
    assert three["curve_pricing"] == one["curve_pricing"]
    assert three["curve_pricing"]["tier_points"]


@pytest.mark.parametrize("command", [["analyze", TRACE, "--capacity", "66"],
                                     ["diagnose", TRACE, "--kv-capacity", "1056tok"]])
def test_analyze_and_diagnose_add_the_tiers_section(command: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json([*command, "--tier", "cpu=176blocks"], capsys)
    assert doc["tiers"]["gpu_capacity_blocks"] == 66
    assert doc["tiers"]["tiers"][0]["name"] == "cpu"


def test_diagnoses_tiers_sit_below_the_pool_the_diagnosis_reads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--kv-capacity 64` is 64 of the diagnosis's 16-token blocks (1,024 tokens), as its KV
    memory and prefix axes read it; tests/fixtures/aiperf_tiny_mooncake.jsonl's hash ids are
    of 512 tokens, so the prefix replay's pool is 2 of its blocks. The tiers' GPU pool was 64
    of them (32,768 tokens), 32 times the diagnosis's, silently."""
    trace = str(FIXTURES / "aiperf_tiny_mooncake.jsonl")
    doc = _json(["diagnose", trace, "--preset", "vllm", "--kv-capacity", "64",
                 "--tier", "cpu=8blocks"], capsys)
    prefix = next(a for a in doc["axes"] if a["name"] == "prefix_reuse")
    assert doc["config"]["settings"]["kv_capacity_tokens"] == 1024
    assert prefix["metrics"]["rules"]["capacity_blocks"] == 2
    assert doc["tiers"]["gpu_capacity_blocks"] == 2
    assert doc["tiers"]["block_size_tokens"] == 512


def test_a_diagnosis_pool_too_large_for_the_tiers_names_the_option_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """10^15 blocks of 16 tokens are beyond the 10^15 tokens a pool can be: the one line names
    `--kv-capacity` as given, not the tokens the tiers were handed."""
    capsys.readouterr()
    code = main(["diagnose", TRACE, "--kv-capacity", "999999999999999blocks", "--tier",
                 "cpu=176blocks"])
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE and len(err.splitlines()) == 1
    assert err.startswith("error: --kv-capacity '999999999999999blocks' is 15999999999999984 "
                          "tokens of 16-token blocks")


def test_analyze_refuses_a_capacity_without_a_tier(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a GPU pool but no tier below it, WHEN analyzed
    capsys.readouterr()
    assert main(["analyze", TRACE, "--preset", "vllm", "--capacity", "66"]) == ExitCode.USAGE
    # THEN one line says the pool sizes a tier's GPU and where the pool itself is replayed,
    # rather than a profile whose unlimited prefix reuse reads as that pool's
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "add --tier" in err
    assert "trace replay --capacity 66" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--tier", "cpu=1GiB"], "give --model"),
    (["--tier", "cpu=3", "--tier-chunk", "64"], "holds less than one 64-token chunk"),
    (["--preset", "sglang", "--tier", "cpu=100", "--tier-policy", "vllm-native"],
     "not one of preset sglang's engine"),
    (["--preset", "sglang", "--tier", "cpu=100", "--tier-policy", "vllm-native-arc"],
     "not one of preset sglang's engine"),
    (["--tier-store-threshold", "2"], "add one with --tier"),
    (["--tier", "cpu=100", "--tier", "disk=200", "--tier-store-threshold", "2"],
     "TieringOffloadingSpec refuses it"),
    (["--preset", "sglang", "--tier", "cpu=100", "--tier-store-threshold", "2"],
     "--tier-store-threshold is vLLM's store_threshold"),
    (["--tier", "cpu=100", "--grid", "block-size=16,32"], "cannot be combined with --grid"),
    (["--tier-policy", "lmcache"], "add one with --tier"),
    (["--tier", "cpu=abc"], "--tier 'cpu=abc': cannot read capacity 'abc'"),
    (["--tier", "cpu=1e30blocks"], "or 'unlimited' for a tier below the first"),
    (["--tier", "cpu=unlimited"], "the first tier below the GPU needs a size"),
])
def test_bad_tier_options_are_one_line_usage_errors(args: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["replay", TRACE, *args]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_sglang_tiers_name_the_gpu_hits_the_host_moved_per_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN SGLang's pool and host as one recorded configuration whose GPU hits HiCache moves
    # (tests/fixtures/tiers_sglang: the pool of 526 one-token pages, a host of 527)
    document = json.loads((FIXTURES / "tiers_sglang" / "sglang_hicache_mixed.json").read_text())
    config = next(c for c in document["configs"]
                  if (c["page_size"], c["pool_tokens"], c["host_tokens"], c["write_policy"])
                  == (1, 526, 527, "write_back"))
    out = tmp_path / "hits.csv"
    # WHEN replayed from the command line
    doc = _json(["replay", TRACE, "--preset", "sglang", "--block-size", "1", "--capacity", "526",
                 "--tier", "cpu=527tokens", "--tier-policy", "write_back", "--out", str(out)],
                capsys)
    # THEN every request's GPU and host hits are SGLang's
    table = pd.read_csv(out)
    assert table["gpu_hit_tokens"].tolist() == config["gpu_hit_tokens"]
    assert table["cpu_hit_tokens"].tolist() == config["cpu_hit_tokens"]
    # and the GPU hits moved by the load-backs are a loss column of their own, so every
    # request's losses still sum to ideal minus achieved, and a waterfall step
    assert (table["loss_gpu_moved_by_tiers_tokens"] != 0).any()
    losses = table[[c for c in table.columns if c.startswith("loss_")]].sum(axis=1)
    assert ((table["ideal_hit_tokens"] - losses) == table["hit_tokens"]).all()
    steps = [s["step"] for s in doc["prefix_reuse"]["waterfall"]["steps"]]
    assert steps[-2:] == ["gpu_moved_by_tiers", "cpu_tier"]
    # and no note calls it an approximation
    assert not any("approximation" in n for n in doc["prefix_reuse"]["tiers"]["notes"])


def test_hicache_off_sglangs_pool_is_named_an_approximation(
        capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN HiCache's rules behind the clean accounting's pool (not SGLang's own)
    doc = _json(["replay", TRACE, "--preset", "none", "--capacity", "60", "--tier",
                 "cpu=100blocks", "--tier-policy", "write_through"], capsys)
    # THEN the output says the host ran as a pass over the GPU pool's hits
    assert any("approximation" in n and "--preset sglang" in n
               for n in doc["prefix_reuse"]["tiers"]["notes"])


def test_residency_beside_sglangs_tree_says_which_gpu_hits_it_follows(
        capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the recorded configuration whose GPU hits HiCache moves, with --residency
    doc = _json(["replay", TRACE, "--preset", "sglang", "--block-size", "1", "--capacity", "526",
                 "--tier", "cpu=527tokens", "--tier-policy", "write_back", "--residency"], capsys)
    # THEN the residency section says it follows the GPU pool alone, and how many requests
    # the tree gives other GPU hits
    notes = doc["kv_residency"]["notes"]
    assert any("residency is its replay alone" in n and "requests get other GPU hits" in n
               for n in notes)


def test_sglang_tree_curve_on_threads_is_the_curve_of_one_and_its_replays(
        capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN SGLang's pool at two sizes under a host of six sizes (the compiled tree per point)
    args = ["sweep", TRACE, "--preset", "sglang", "--block-size", "16", "--capacities",
            "35,66", "--tier", "cpu=1767blocks", "--tier-policy", "write_back"]
    one = _json(args, capsys)
    # WHEN its points run on 3 threads THEN the curve is that of one thread
    three = _json([*args, "--jobs", "3"], capsys)
    assert three["tier_curve"] == one["tier_curve"]
    # and its largest cell is the tiered replay of that point: GPU and host hits of the tree
    replayed = _json(["replay", TRACE, "--preset", "sglang", "--block-size", "16", "--capacity",
                      "66", "--tier", "cpu=1767blocks", "--tier-policy", "write_back"], capsys)
    assert one["tier_curve"]["hit_tokens"][1][-1] == replayed["prefix_reuse"][
        "saved_prefill_tokens"]
    # and, every point being the tree's, the curve is not called an approximation
    assert one["tier_curve"]["note"] is None


def _golden_hits(gpu_blocks: int, cpu_chunks: int) -> int:
    """vLLM's own hits (GPU plus CPU) at one golden configuration of one-block chunks."""
    config = next(c for c in json.loads(GOLDEN.read_text())["configs"]
                  if (c["num_gpu_blocks"], c["cpu_chunks"], c["blocks_per_chunk"])
                  == (gpu_blocks, cpu_chunks, 1))
    return sum(config["gpu_hit_tokens"]) + sum(config["cpu_hit_tokens"])


def test_report_adds_the_tiers_and_the_curve_around_the_pool(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 blocks and CPU tier of 176 chunks, with vLLM's own scrape of
    # that run (tests/fixtures/tier_metrics)
    args = ["report", TRACE, "--preset", "vllm", "--kv-capacity", "66", "--tier",
            "cpu=176blocks", "--metrics", str(FIXTURES / "tier_metrics" /
                                               "vllm_offload_mixed.metrics.txt")]
    # WHEN reported as JSON
    doc = _json(args, capsys)
    # THEN the tiers section is the tiered replay, and the scrape is held against it
    assert doc["tiers"]["gpu_capacity_blocks"] == 66
    assert doc["tiers"]["hit_tokens"] == _golden_hits(66, 176)
    seen = {t["name"]: t for t in doc["observed_tiers"]["tiers"]}
    assert seen["cpu"]["observed_hit_tokens"] == seen["cpu"]["replayed_hit_tokens"] == 25_168
    # and the curve's GPU sizes are a quarter, half, once and twice the pool, each cell at the
    # full tier size the hits vLLM's scheduler reached at that size (Python's round: 16)
    curve = doc["tier_curve"]
    assert curve["gpu_capacity_blocks"] == [16, 33, 66, 132]
    assert curve["tier_capacity_chunks"] == [5, 11, 22, 44, 88, 176]
    for row, gpu in enumerate(curve["gpu_capacity_blocks"][1:], start=1):
        assert curve["hit_tokens"][row][-1] == _golden_hits(gpu, 176)
    # and the HTML page draws the three tables
    page = tmp_path / "r.html"
    assert main([*args, "-o", str(page)]) == ExitCode.OK
    html = page.read_text()
    assert "Tiers below the GPU" in html and "GPU size × cpu tier size" in html
    assert html.count("25,168") >= 2  # the engine's CPU hits beside the replay's


def test_report_of_a_change_replays_the_tiers_of_each_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(["report", TRACE, "--before", TRACE, "--preset", "vllm", "--kv-capacity", "66",
                 "--tier", "cpu=1767blocks"], capsys)
    assert doc["tiers"]["hit_tokens"] == _golden_hits(66, 1767)
    assert doc["before"]["tiers"] == doc["tiers"]


def test_the_curve_around_the_pool_needs_one_tier_and_a_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN analyze with one tier under a pool: the curve, as the report draws it
    one = _json(["analyze", TRACE, "--capacity", "66", "--tier", "cpu=176blocks"], capsys)
    assert one["tier_curve"]["gpu_capacity_blocks"] == [16, 33, 66, 132]
    assert one["tier_curve"]["hit_tokens"][2][-1] == one["tiers"]["hit_tokens"]
    # WHEN two tiers are given, or no pool THEN the tiers alone (no curve of one tier of two;
    # nothing reaches a tier under an unlimited pool)
    two = _json(["analyze", TRACE, "--capacity", "66", "--tier", "cpu=176blocks", "--tier",
                 "disk=1767blocks"], capsys)
    unlimited = _json(["report", TRACE, "--tier", "cpu=176blocks"], capsys)
    assert "tier_curve" not in two and "tiers" in two
    assert "tier_curve" not in unlimited and unlimited["tiers"]["gpu_capacity_blocks"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--tier-policy", "lmcache"], "add one with --tier"),
    (["--tier", "cpu=1GiB"], "give --model"),
])
def test_reports_bad_tier_options_are_refused_before_reading(
        args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["report", TRACE, "--kv-capacity", "66", *args]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_hot_prefixes_count_what_no_tier_served(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 blocks, alone and above a CPU tier that holds the whole trace
    alone = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66"], capsys)
    tiered = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                    "cpu=2000blocks"], capsys)
    # THEN the pool alone recomputes its hot prefixes for want of room; with the tier every
    # eviction is served from it, and what stays lost is tenant isolation only
    hot = alone["prefix_reuse"]["hot_prefixes"]
    assert sum(h["by_reason_tokens"].get("eviction", 0) for h in hot) > 10_000
    for h in tiered["prefix_reuse"]["hot_prefixes"]:
        assert set(h["by_reason_tokens"]) == {"isolation"}
        assert h["recomputed_tokens"] == h["by_reason_tokens"]["isolation"]


@pytest.mark.parametrize(("disk", "said"), [("unlimited", False), ("100000blocks", False),
                                           ("50blocks", True)])
def test_vllm_fs_tier_from_the_command_line(disk: str, said: bool, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool of 66 blocks, a CPU tier of 64 and its fs tier below (recorded by
    # benchmarks/engines/golden_tiers_vllm.py --secondary fs: the fs tier never evicts)
    config = _golden("vllm_offload_mixed_fs.json", 66, 64)
    assert sum(config["disk_hit_tokens"]) > 0 and sum(config["cpu_hit_tokens"]) > 0
    out = tmp_path / "hits.csv"
    # WHEN replayed with an unlimited disk (vLLM's), one larger than the trace, a small one
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=64blocks", "--tier", f"disk={disk}", "--out", str(out)], capsys)
    hits = pd.read_csv(out)
    notes = [n for n in doc["prefix_reuse"]["tiers"]["notes"] if "never evict" in n]
    # THEN the large one gives vLLM's hits per request, CPU and disk alike, and only the small
    # one is said to be an LRU store vLLM's tiers are not
    if not said:
        assert hits["cpu_hit_tokens"].tolist() == config["cpu_hit_tokens"]
        assert hits["disk_hit_tokens"].tolist() == config["disk_hit_tokens"]
        assert notes == []
        disk_row = doc["prefix_reuse"]["tiers"]["tiers"][1]
        assert disk_row["unlimited"] == (disk == "unlimited")
        assert disk_row["evicted_chunks"] == 0
    else:
        assert len(notes) == 1 and notes[0].startswith("vLLM 0.33's tiers below the CPU")
        assert "disk (" in notes[0]


@pytest.mark.parametrize("disk", ["100000blocks", "unlimited"])
def test_a_request_vllm_would_never_start_is_refused_by_name(
        disk: str, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the first 40 requests of the sessions trace, 39 GPU blocks and a CPU tier of 19
    # above vLLM's fs tier: vLLM 0.33's scheduler, driven over them, never finished request 29
    # (its disk chunks promoted into the CPU evict each other, a step at a time)
    trace = FIXTURES / "tiers_vllm" / "sessions_first40.parquet"
    capsys.readouterr()
    # WHEN replayed
    code = main(["replay", str(trace), "--preset", "vllm", "--capacity", "39", "--tier",
                 "cpu=19blocks", "--tier", f"disk={disk}"])
    # THEN it is refused in one line naming that request and the CPU size it needs (exit 2)
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE
    assert len(err.splitlines()) == 1
    assert err.startswith("error: request sessions-0029 would never start")
    assert err.endswith("at least its 31 chunks")


def test_an_unlimited_disk_is_priced_at_what_it_holds(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN vLLM's pool and CPU tier with its fs tier below, which has no size, and prices
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=64blocks", "--tier", "disk=unlimited", "--model", "llama-3.1-8b",
                 "--gpu", "H100", "--gpu-price", "2.5", "--memory-price", "3"], capsys)
    disk = doc["prefix_reuse"]["tiers"]["tiers"][1]
    priced = doc["prefill_pricing"]["tiers"][1]
    # THEN its memory is priced at the chunks it holds at the end (it never evicts), in the
    # model's KV bytes (Llama-3.1-8B: 131,072 bytes a token)
    held = (disk["stored_chunks"] - disk["evicted_chunks"]) * disk["chunk_tokens"]
    assert disk["unlimited"] and disk["evicted_chunks"] == 0 and held > 0
    assert priced["size_bytes"] == held * 131_072
    assert priced["memory_money_per_day"] == pytest.approx(
        held * 131_072 / 2**30 * 3 / (365.25 / 12))
    assert priced["size_held_at_end"] and not doc["prefill_pricing"]["tiers"][0][
        "size_held_at_end"]


def test_each_tier_is_priced_at_its_own_memory_price(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN host memory at $3 and the disk at $0.08 per GiB-month
    doc = _json(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier",
                 "cpu=64blocks", "--tier", "disk=2000blocks", "--model", "llama-3.1-8b",
                 "--gpu", "H100", "--gpu-price", "2.5", "--memory-price", "3,disk=0.08"], capsys)
    cpu, disk = doc["prefill_pricing"]["tiers"]
    # THEN each tier's memory money is its size at its own price, and the prices are said
    per_day = 2**30 * 30.4375
    assert cpu["memory_money_per_day"] == pytest.approx(cpu["size_bytes"] * 3 / per_day)
    assert disk["memory_money_per_day"] == pytest.approx(disk["size_bytes"] * 0.08 / per_day)
    assert doc["prefill_pricing"]["prices"]["memory_per_gib_month_by_tier"] == {"disk": 0.08}
    # and the table says which price each tier's memory took
    capsys.readouterr()
    main(["replay", TRACE, "--preset", "vllm", "--capacity", "66", "--tier", "cpu=64blocks",
          "--tier", "disk=2000blocks", "--model", "llama-3.1-8b", "--gpu", "H100",
          "--memory-price", "3,disk=0.08"])
    assert "memory priced per GiB-month (--memory-price): cpu $3, disk $0.08" in " ".join(
        capsys.readouterr().out.split())


def test_an_unlimited_gpu_pool_says_what_its_tiers_can_serve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN three requests of the same two 16-token blocks, under vLLM's rules
    trace = tmp_path / "same.jsonl"
    trace.write_text("".join(json.dumps({"request_id": f"r{i}", "arrival_s": float(i),
                                         "prompt_len": 32, "output_len": 2,
                                         "prompt_tokens": list(range(32))}) + "\n"
                             for i in range(3)))
    args = ["replay", str(trace), "--preset", "vllm", "--block-size", "16", "--tier",
            "cpu=10blocks"]
    # WHEN the GPU pool is unlimited
    reuse = _json(args, capsys)["prefix_reuse"]
    # THEN the CPU tier serves only the block the last-token rule leaves (vLLM caps the GPU
    # hit at 31 tokens: one block; the tier holds the second and loads it whole), 16 tokens
    # for each repeat, and the note says so and names the option that asks the real question
    assert reuse["tiers"]["tiers"][0]["hit_tokens"] == 32
    said = [n for n in reuse["tiers"]["notes"] if "GPU pool is unlimited" in n]
    assert len(said) == 1 and "(32 tokens)" in said[0] and "--capacity" in said[0]
    # AND with the engine's pool the note is gone
    bounded = _json([*args, "--capacity", "10"], capsys)["prefix_reuse"]
    assert not [n for n in bounded["tiers"]["notes"] if "GPU pool is unlimited" in n]
