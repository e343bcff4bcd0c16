"""KV data types and the models of kvcache-simulator's table: bytes per token, names, options.

Hand-computed cases follow docs/reference/cost-model.md §1.1 and the models' config.json
numbers in yaotu_trace/resources/models.json; the fp4 layout is vLLM's
`nvfp4_kv_cache_full_dim` (head_dim // 2 bytes of 4-bit values + head_dim // 16 fp8 scales per
head, vllm/utils/torch_utils.py, used by `FullAttentionSpec.real_page_size_bytes`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yaotu_trace.catalog.models import (
    KV_DTYPES,
    find_model,
    kv_bytes_by_dtype,
    kv_bytes_per_token,
    load_catalog,
    parse_kv_dtype,
)
from yaotu_trace.errors import ConfigError

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.parametrize(("model", "dtype", "expected"), [
    # 2 · 32 layers · 8 KV heads · 128 · 2 bytes
    ("Llama-3.1-8B", "bf16", 131_072),
    ("Llama-3.1-8B", "fp16", 131_072),
    ("Llama-3.1-8B", "fp8", 65_536),
    # 2 · 32 · 8 · (64 + 8): NVFP4 packs 128 values in 64 bytes plus 8 one-byte scales
    ("Llama-3.1-8B", "fp4", 36_864),
    # MLA latent: (512 + 64) · 61 layers · 2 bytes, no head dimension
    ("DeepSeek-V3", "bf16", 70_272),
    ("DeepSeek-V3", "fp8", 35_136),
    # DeepSeek sparse attention: the latent plus a 128-wide indexer key on each of 61 layers
    ("DeepSeek-V3.2", "bf16", 61 * (512 + 64) * 2 + 61 * 128 * 2),
    # only the 15 full-attention layers of 60 cache per token (the rest are linear attention)
    ("Qwen3.5-397B-A17B", "bf16", 15 * 2 * 2 * 256 * 2),
    # 10 full layers of 4 × 512 plus 50 sliding layers of 16 × 256, K and V
    ("Gemma-4-31B", "bf16", 10 * 4 * 1024 * 2 + 50 * 16 * 512 * 2),
    # K 192 and V 128 wide: 9 full layers of 4 heads, 39 sliding layers of 8 heads
    ("MiMo-V2.5", "fp8", 9 * 4 * 320 + 39 * 8 * 320),
    # the indexer of MiniMax-M3 stays bf16 whatever the KV dtype (57 sparse layers × 128)
    ("MiniMax-M3", "fp8", 60 * 2 * 4 * 128 + 57 * 128 * 2),
])
def test_kv_bytes_per_token_by_dtype_hand_computed(model: str, dtype: str, expected: int) -> None:
    """Hand-computed from the config numbers; fp4 from vLLM's NVFP4 page layout."""
    assert kv_bytes_per_token(find_model(model), kv_dtype=dtype) == expected


def test_fp8_is_half_of_bf16_for_every_model_without_a_fixed_indexer() -> None:
    """An fp8 element is one byte, a bf16 element two (cost-model §1.1.6)."""
    for spec in load_catalog():
        if spec.indexer_dtype is None:
            assert 2 * spec.kv_bytes_at("fp8") == spec.kv_bytes_at("bf16"), spec.name


def test_the_default_dtype_is_the_models_own() -> None:
    spec = find_model("Llama-3.1-8B")
    assert spec.kv_dtype == "bf16"
    assert spec.kv_bytes_at(None) == spec.kv_bytes_per_token == 131_072
    assert kv_bytes_per_token(spec, kv_dtype_bytes=1) == spec.kv_bytes_at("fp8")


def test_fp4_has_no_mla_layout_and_says_so_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^--kv-dtype fp4 has no plain MLA layout") as info:
        find_model("deepseek-v3").kv_bytes_at("fp4")
    assert "\n" not in str(info.value)
    assert kv_bytes_by_dtype(find_model("DeepSeek-V3"))["fp4"] is None


@pytest.mark.parametrize(("typed", "dtype"), [("bf16", "bf16"), ("BF16", "bf16"),
                                              ("bfloat16", "bf16"), ("half", "fp16"),
                                              ("fp8_e4m3", "fp8"), ("e5m2", "fp8"),
                                              ("nvfp4", "fp4"), (" fp4 ", "fp4")])
def test_kv_dtype_names_engines_use_are_accepted(typed: str, dtype: str) -> None:
    assert parse_kv_dtype(typed) == dtype


@pytest.mark.parametrize(("typed", "needle"), [("int3", "choose one of bf16, fp16, fp8, fp4"),
                                               ("mxfp4", "not a KV cache format")])
def test_an_unknown_kv_dtype_is_a_one_line_error(typed: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        parse_kv_dtype(typed)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("typed", "name"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("llama-3.3-70b", "Llama-3.3-70B"),
    ("meta-llama/Llama-3.3-70B-Instruct", "Llama-3.3-70B"),
    ("Qwen/Qwen3-8B", "Qwen3-8B"),
    ("qwen3-30b-a3b", "Qwen3-30B-A3B"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B"),
    ("Qwen/Qwen2.5-Coder-32B-Instruct", "Qwen2.5-Coder-32B"),
    ("deepseek-ai/DeepSeek-R1", "DeepSeek-R1"),
    ("moonshotai/Kimi-K2.5", "Kimi-K2.5"),
    ("google/gemma-4-31B-it", "Gemma-4-31B"),
    ("gemma 4 31b", "Gemma-4-31B"),
    ("CohereLabs/c4ai-command-r-plus", "Command-R-Plus"),
    ("cohere-command-r-plus", "Command-R-Plus"),
    ("MiniMaxAI/MiniMax-M2.5", "MiniMax-M2.5"),
    ("zai-org/GLM-5.1", "GLM-5.1"),
])
def test_hugging_face_ids_and_peer_ids_resolve(typed: str, name: str) -> None:
    assert find_model(typed).name == name


def test_an_unknown_model_suggests_the_closest_names_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"did you mean .*Qwen3-8B") as info:
        find_model("Qwen3-9B")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"known: .* and \d+ more") as info:
        find_model("zzzz")
    assert "\n" not in str(info.value)


def test_every_name_a_user_types_means_one_model() -> None:
    from yaotu_trace.catalog.models import _keys

    owner: dict[str, str] = {}
    for spec in load_catalog():
        for key in _keys(spec):
            assert owner.setdefault(key, spec.name) == spec.name, key


def test_every_model_names_its_source() -> None:
    for spec in load_catalog():
        assert spec.source, spec.name
        if spec.source_status == "peer table":
            assert "kvcache-simulator 0.1.3" in spec.source and "config.json" in spec.source
        if spec.source_status == "config":
            assert spec.source.startswith("HF config.json keys of "), spec.name


def test_a_model_without_parameter_counts_cannot_be_simulated_but_sizes_its_kv() -> None:
    from yaotu_trace.sim.scenario import Scenario, resolve_scenario

    spec = find_model("Qwen3-8B")
    assert spec.total_params is None and spec.kv_bytes_per_token == 147_456
    with pytest.raises(ConfigError, match="no parameter count") as info:
        resolve_scenario(Scenario(model="Qwen3-8B", gpu="H100"))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("sliding_layers", 40, "exceed its 32 layers"),
    ("indexer_head_dim", 128, "indexer_layers and indexer_head_dim go together"),
    ("kv_dtype_bytes", 4, "must be 2 .bf16/fp16. or 1 .fp8."),
])
def test_an_inconsistent_entry_is_refused(field: str, value: int, needle: str) -> None:
    from dataclasses import replace

    spec = replace(find_model("Llama-3.1-8B"), sliding_window_tokens=4096)
    with pytest.raises(ConfigError, match=needle):
        replace(spec, **{field: value})


# --- kvcache-simulator 0.1.3's own calculator as the reference --------------------------------

def _peer_models() -> tuple[object, dict[str, dict[str, object]]]:
    calculator = pytest.importorskip("kvcache_sim.calculator")
    data = calculator.load_models_data()
    return calculator, {m["id"]: m for m in data["models"]}


def test_bytes_per_token_equal_kvcache_simulators_for_every_model_both_know() -> None:
    """Source: kvcache-simulator 0.1.3 `calculate_cache_size` on its models.yaml, at bf16 and
    fp8 (its default precision and the indexer following the KV's). A sliding-window model is
    compared at a request as long as its window, where the window caps nothing (its figure
    per token falls past the window; ours counts the windowed layers at every token)."""
    calculator, peer = _peer_models()
    data = calculator.load_models_data()
    compared = 0
    for model_id, model in peer.items():
        try:
            spec = find_model(model_id)
        except ConfigError:
            continue
        window = int(model["fields"].get("sliding_window", 1024))
        default = calculator.calculate_cache_size(model, tokens=window, models_data=data)
        assert default.precision == "bf16_fp16" and spec.kv_dtype == "bf16", model_id
        for dtype, precision in (("bf16", "bf16_fp16"), ("fp8", "fp8_int8")):
            theirs = calculator.calculate_cache_size(model, tokens=window, precision=precision,
                                                     models_data=data)
            assert spec.kv_bytes_at(dtype) == theirs.bytes_per_token, (model_id, dtype)
        compared += 1
    assert compared == 55


def test_fp4_adds_vllms_scales_to_kvcache_simulators_half_byte() -> None:
    """Source: kvcache-simulator 0.1.3 prices fp4 at 0.5 bytes per element with no scales;
    vLLM's NVFP4 page adds one fp8 scale per 16 values, 9/8 of that (head dims are multiples of
    16). MLA models have no fp4 layout here (refused)."""
    calculator, peer = _peer_models()
    data = calculator.load_models_data()
    for model_id, model in peer.items():
        try:
            spec = find_model(model_id)
        except ConfigError:
            continue
        if spec.attention == "mla" or spec.indexer_layers is not None:
            continue
        window = int(model["fields"].get("sliding_window", 1024))
        theirs = calculator.calculate_cache_size(model, tokens=window, precision="fp4_int4",
                                                 models_data=data).bytes_per_token
        assert spec.kv_bytes_at("fp4") * 8 == theirs * 9, model_id


# --- the options ----------------------------------------------------------------------------

def _capacity_blocks(capsys: pytest.CaptureFixture[str], *extra: str) -> int:
    from conftest import run_cli

    code, out, err = run_cli(["replay", str(SAMPLES / "chat.parquet"), "--preset", "vllm",
                              "--capacity", "1GiB", "--model", "Llama-3.1-8B", *extra,
                              "--no-waterfall", "--format", "json"], capsys)
    assert code == 0, err
    blocks: int = json.loads(out)["config"]["rules"]["capacity_blocks"]
    return blocks


def test_replay_capacity_in_bytes_follows_the_kv_dtype(capsys) -> None:
    """1 GiB at 131,072 B/token is 8,192 tokens, 512 blocks of 16; fp8 holds twice as many."""
    assert _capacity_blocks(capsys) == 512
    assert _capacity_blocks(capsys, "--kv-dtype", "fp8") == 1024
    assert _capacity_blocks(capsys, "--kv-dtype", "fp4") == 2**30 // 36_864 // 16


def test_sweep_reports_the_kv_bytes_of_the_dtype(capsys) -> None:
    from conftest import run_cli

    code, out, err = run_cli(["sweep", str(SAMPLES / "chat.parquet"), "--model", "Qwen3-8B",
                              "--kv-dtype", "fp8", "--points", "3", "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["capacity_curve"]["kv_bytes_per_token"] == 73_728


def test_diagnosis_and_simulation_take_the_kv_dtype() -> None:
    from yaotu_trace.commands.settings import engine_settings
    from yaotu_trace.diagnosis.options import DiagnosisOptions
    from yaotu_trace.sim.scenario import Scenario, resolve_scenario

    settings, _ = engine_settings(DiagnosisOptions(model="Llama-3.1-8B", kv_dtype="fp8",
                                                   kv_capacity="1GiB"))
    assert settings.kv_bytes_per_token == 65_536
    assert settings.kv_capacity_tokens == 2**30 / 65_536
    bf16 = resolve_scenario(Scenario(model="Llama-3.1-8B", gpu="H100"))
    fp8 = resolve_scenario(Scenario(model="Llama-3.1-8B", gpu="H100", kv_dtype="fp8"))
    assert (bf16.kv_bytes_per_token, fp8.kv_bytes_per_token) == (131_072, 65_536)
    assert fp8.config.kv_blocks in (2 * bf16.config.kv_blocks, 2 * bf16.config.kv_blocks + 1)


@pytest.mark.parametrize(("args", "needle"), [
    (["replay", "--kv-dtype", "fp8"], "--kv-dtype scales a catalog model"),
    (["replay", "--model", "DeepSeek-V3", "--kv-dtype", "fp4"], "no plain MLA layout"),
    (["replay", "--model", "Llama-3.1-8B", "--kv-dtype", "int2"], "choose one of"),
    (["replay", "--model", "Llama-3.1-8B", "--kv-dtype", "fp8", "--kv-bytes-per-token", "9"],
     "pass only one"),
    (["sweep", "--kv-dtype", "fp8"], "--kv-dtype scales a catalog model"),
    (["diagnose", "--kv-dtype", "fp8"], "--kv-dtype scales a catalog model"),
    (["simulate", "--model", "Llama-3.1-8B", "--gpu", "H100", "--kv-dtype", "fp5", "--out",
      "never.parquet"], "choose one of"),
])
def test_a_bad_kv_dtype_combination_is_a_one_line_usage_error(capsys, args: list[str],
                                                              needle: str) -> None:
    from conftest import run_cli

    command, *rest = args
    code, _, err = run_cli([command, str(SAMPLES / "chat.parquet"), *rest], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err


def test_every_command_that_takes_model_takes_kv_dtype() -> None:
    import typer.main

    from yaotu_trace.cli import _register_commands
    from yaotu_trace.cli.app import app

    _register_commands()
    group = typer.main.get_command(app)
    takers = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        helps = {opt: getattr(param, "help", "") or "" for param in command.params
                 for opt in getattr(param, "opts", [])}
        if "Model from the catalog" in helps.get("--model", ""):
            assert "--kv-dtype" in helps, name
            takers.append(name)
    assert sorted(takers) == ["analyze", "check", "compare", "diagnose", "diff", "replay",
                              "report", "simulate", "sweep"]


def test_models_json_gives_bytes_per_token_at_every_dtype(capsys) -> None:
    from conftest import run_cli

    code, out, _ = run_cli(["models", "--format", "json"], capsys)
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)["models"]}
    assert len(rows) == len(load_catalog()) == 58
    assert rows["Llama-3.1-8B"]["kv_bytes_per_token_by_dtype"] == {
        "bf16": 131_072, "fp16": 131_072, "fp8": 65_536, "fp4": 36_864}
    assert rows["DeepSeek-V3"]["kv_bytes_per_token_by_dtype"]["fp4"] is None
    assert all(set(r["kv_bytes_per_token_by_dtype"]) == set(KV_DTYPES) for r in rows.values())


def test_docs_models_page_names_the_models_of_each_source_status() -> None:
    """docs/models.md's table of sources lists the catalog's models by `source_status`."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text("utf-8")
    for status in ("cost-model", "config"):
        row = re.search(rf"^\| `{status}` \| ([^|]*) \|", text, re.MULTILINE)
        assert row is not None, status
        listed = set()
        for item in row.group(1).split(","):
            head, _, tails = item.strip().partition("/")
            listed.add(head)
            stem = head.rsplit("-", 1)[0]
            listed.update(f"{stem}-{tail}" for tail in tails.split("/") if tail)
        wanted = {s.name for s in load_catalog() if s.source_status == status}
        assert listed == wanted, status
    peer = sum(s.source_status == "peer table" for s in load_catalog())
    assert f"| `peer table` | the other {peer} |" in text


def test_a_scenario_file_takes_kv_dtype_and_names_the_file_on_a_bad_one(tmp_path: Path) -> None:
    from yaotu_trace.errors import ConfigFileError
    from yaotu_trace.sim.scenario import load_scenario, resolve_scenario

    good = tmp_path / "fp8.toml"
    good.write_text('model = "Llama-3.1-8B"\ngpu = "H100"\nkv-dtype = "fp8_e4m3"\n', "utf-8")
    assert resolve_scenario(load_scenario(good)).kv_bytes_per_token == 65_536
    bad = tmp_path / "bad.toml"
    bad.write_text('kv-dtype = "fp3"\n', "utf-8")
    with pytest.raises(ConfigFileError) as info:
        load_scenario(bad)
    assert str(info.value).startswith(f"{bad}: key 'kv-dtype': --kv-dtype 'fp3': choose one of")
