"""The KV pool from vLLM's `vllm:cache_config_info` info gauge, which every vLLM `/metrics`
body carries: the pool size as labels, the sample value always 1."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from conftest import FIXTURES

from yaotu_trace.commands.diagnose import diagnose
from yaotu_trace.data.metric_names import POOL_FROM_CACHE_CONFIG
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.sim.metrics_export import metrics_export


def kv_axis(metrics_path: Path) -> dict:
    doc = diagnose(None, DiagnosisOptions(metrics=metrics_path)).to_dict()
    return next(a for a in doc["axes"] if a["name"] == "kv_memory")


def test_the_pool_of_a_real_vllm_metrics_body() -> None:
    # AIBrix's docs print vLLM's /metrics: block_size 16, num_gpu_blocks 81,767; block 0 is
    # the null block, so (81,767 - 1) x 16 = 1,308,256 usable tokens.
    path = FIXTURES / "prom_text" / "vllm_cache_config_info.prom"
    metrics = read_metrics(path)
    assert metrics.name_of("max_total_tokens") == POOL_FROM_CACHE_CONFIG
    assert metrics.gauge("max_total_tokens", how="max")["value"].tolist() == [1_308_256.0]
    axis = kv_axis(path)
    assert axis["metrics"]["kv_capacity_tokens"] == 1_308_256.0
    assert axis["metrics"]["capacity_source"] == POOL_FROM_CACHE_CONFIG


def test_the_engines_own_token_count_comes_first(tmp_path: Path) -> None:
    # Newer vLLM adds kv_cache_size_tokens, which for hybrid models is not blocks x size
    # (a label set of this shape is quoted in vllm-project/vllm PR #42206's discussion).
    text = ('vllm:cache_config_info{block_size="16",kv_cache_size_tokens="123433",'
            'num_gpu_blocks="14835"} 1.0\n'
            'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="None",'
            'num_gpu_blocks="0",engine="1"} 1.0\n')
    path = tmp_path / "m.prom"
    path.write_text(text)
    pool = read_metrics(path).gauge("max_total_tokens", how="max")
    assert pool["value"].tolist() == [123_433.0]


def test_the_simulated_export_states_the_pool_as_vllm_does() -> None:
    # Two steps on one instance with 319 usable blocks of 16 tokens: vLLM's num_gpu_blocks
    # counts the null block too, 320; the reader gives back 319 x 16 = 5,104 tokens.
    steps = pd.DataFrame({"instance": ["i0", "i0"], "start_s": [0.0, 1.0], "end_s": [1.0, 2.0],
                          "num_running": [1, 1], "num_waiting": [0, 0],
                          "kv_blocks_used": [10, 12], "kv_blocks_total": [319, 319]})
    requests = pd.DataFrame({"arrival_s": [0.0], "prompt_len": [100], "output_len": [2],
                             "instance": ["i0"]})
    export = metrics_export(requests, steps, block_size_tokens=16)
    info = export[export["metric"] == "vllm:cache_config_info"]
    assert set(info["labels"]) == {'{instance="i0",block_size="16",num_gpu_blocks="320"}'}
    assert (info["value"] == 1.0).all()
    assert export[export["metric"] == "vllm:cache_config_info"].shape[0] == len(
        export["timestamp"].unique())
    without = metrics_export(requests, steps)
    assert "vllm:cache_config_info" not in set(without["metric"])
