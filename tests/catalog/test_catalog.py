"""The model catalog matches the KV-bytes column of cost-model.md §1.2."""

from __future__ import annotations

from dataclasses import replace

import pytest

from yaotu_trace.catalog.gpus import find_gpu
from yaotu_trace.catalog.models import find_model, kv_bytes_per_token, load_catalog
from yaotu_trace.errors import ConfigError

# The "KV B/token (bf16)" column of docs/reference/cost-model.md §1.2.
DOC_KV_BYTES_PER_TOKEN = {
    "Llama-3.1-8B": 131_072,
    "Llama-3.1-70B": 327_680,
    "Llama-3.1-405B": 516_096,
    "Qwen2.5-7B": 57_344,
    "Qwen2.5-72B": 327_680,
    "Qwen3-32B": 262_144,
    "Qwen3-235B-A22B": 192_512,
    "Mistral-7B-v0.1": 131_072,
    "DeepSeek-V3": 70_272,
    "Llama-2-7B": 524_288,
}


@pytest.mark.parametrize(("name", "expected"), sorted(DOC_KV_BYTES_PER_TOKEN.items()))
def test_kv_bytes_per_token_matches_doc_table(name: str, expected: int) -> None:
    assert kv_bytes_per_token(find_model(name)) == expected


def test_catalog_covers_every_model_of_the_doc_table() -> None:
    assert {m.name for m in load_catalog()} >= set(DOC_KV_BYTES_PER_TOKEN)


def test_mla_uses_latent_width_not_heads() -> None:
    ds = find_model("deepseek-v3")
    assert ds.attention == "mla"
    assert kv_bytes_per_token(ds) == (512 + 64) * 61 * 2


def test_fp8_halves_kv_bytes() -> None:
    spec = find_model("Llama-3.1-70B")
    assert kv_bytes_per_token(spec, kv_dtype_bytes=1) == 327_680 // 2


def test_qwen3_head_dim_is_not_hidden_over_heads() -> None:
    spec = find_model("qwen3-32b")
    assert spec.head_dim == 128 != spec.hidden_size // spec.query_heads


@pytest.mark.parametrize(
    "typed",
    ["llama-3.1-8b", "LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct"],
)
def test_find_model_is_case_insensitive_and_accepts_aliases(typed: str) -> None:
    assert find_model(typed).name == "Llama-3.1-8B"


def test_unknown_model_error_is_one_line_with_close_names() -> None:
    with pytest.raises(ConfigError) as info:
        find_model("llama-3.1-7b")
    message = str(info.value)
    assert "\n" not in message
    assert "Llama-3.1-8B" in message


def test_catalog_params_are_positive_and_active_at_most_total() -> None:
    for spec in load_catalog():
        if spec.name not in DOC_KV_BYTES_PER_TOKEN and spec.total_params is None:
            continue  # a model whose source gives only its KV shape has no parameter count
        assert spec.total_params is not None and spec.active_nonembedding_params is not None
        assert 0 < spec.active_nonembedding_params <= spec.total_params


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_models_command_lists_every_model_with_kv_bytes(capsys, fmt: str) -> None:
    import json

    from yaotu_trace.cli import main

    assert main(["models", "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        rows = {m["name"]: m["kv_bytes_per_token"] for m in json.loads(out)["models"]}
        assert {name: rows[name] for name in DOC_KV_BYTES_PER_TOKEN} == DOC_KV_BYTES_PER_TOKEN
    else:
        for name, kv in DOC_KV_BYTES_PER_TOKEN.items():
            assert name in out
            assert f"{kv:,}" in out


@pytest.mark.parametrize(("field", "value"), [("layers", 0), ("kv_heads", -8), ("head_dim", 0),
                                              ("total_params", 0), ("kv_dtype_bytes", True)])
def test_a_model_with_a_zero_or_negative_size_is_refused(field: str, value: object) -> None:
    spec = find_model("Llama-3.1-8B")
    with pytest.raises(ConfigError, match=rf"^model Llama-3\.1-8B: {field} .* must be a whole "
                       "number >= 1; fix its entry in models.json"):
        replace(spec, **{field: value})


@pytest.mark.parametrize(("field", "value"), [("bf16_flops", 0.0), ("hbm_bytes_per_s", -1.0),
                                              ("memory_bytes", float("inf"))])
def test_a_gpu_with_no_compute_bandwidth_or_memory_is_refused(field: str, value: float) -> None:
    gpu = find_gpu("H100")
    with pytest.raises(ConfigError, match=rf"^GPU {gpu.name}: {field} .* must be a finite "
                       "number > 0"):
        replace(gpu, **{field: value})
