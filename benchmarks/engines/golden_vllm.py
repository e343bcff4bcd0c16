"""Golden per-request hits from vLLM's own KV cache manager, driven on CPU with no model.

Builds a real `vllm.v1.core.kv_cache_manager.KVCacheManager` the way vLLM's
`tests/v1/core/test_prefix_caching.py` does (a `KVCacheConfig` with one `FullAttentionSpec`
group, `num_blocks = num_gpu_blocks`, prefix caching on, `hash_block_size = block_size`) and
replays the traces of `traces.py` through it, one request at a time in file order:
`get_computed_blocks`, then `allocate_slots` for the whole prompt (`None` means the request is
rejected: recorded, hit 0), then `free`. The tenant is the request's `cache_salt`.

Writes `tests/fixtures/engines/vllm_<trace>.json` (per configuration: the hit tokens of every
request and the rejected rows) and prints a table beside the clean model
(`accounting="clean"`) and the engine-exact replay (`prefix.kernels.exact_vllm`), so the difference
the clean model makes is measured. Installs nothing: run it with an environment that has
`vllm` (see README.md), e.g.

    PYTHONPATH=. /work/venv-vllm/bin/python benchmarks/engines/golden_vllm.py

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_json import dump_configs
from traces import DATA, SHAPES, load_prompts, trace_path

PROTOCOL = ("one request at a time in file order: get_computed_blocks(req), then "
            "allocate_slots(req, n - num_computed_tokens, num_computed_tokens, blocks) for the "
            "whole prompt (None = rejected, hit 0), then free(req); tenant as cache_salt; "
            "KVCacheManager over one FullAttentionSpec group, num_blocks = num_gpu_blocks, "
            "caching on, sha256 block hashes")


@dataclass(frozen=True)
class Config:
    """One engine configuration: block size and pool size."""

    block_size_tokens: int
    num_gpu_blocks: int


def _import_vllm():  # type: ignore[no-untyped-def]
    """The vLLM pieces the driver needs, or a one-line exit that says how to get them."""
    try:
        import torch
        import vllm
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.request import Request
    except ImportError as exc:
        raise SystemExit(f"golden_vllm.py needs vllm importable ({exc}); install it in its own "
                         "environment as benchmarks/engines/README.md says") from None
    return (torch, vllm, SamplingParams, sha256, KVCacheManager, get_request_block_hasher,
            init_none_hash, FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, Request)


def drive_vllm(tenants: list[str], prompts: list[list[int]], config: Config
               ) -> tuple[list[int], list[int]]:
    """Hit tokens per request and the rejected rows, from vLLM's KVCacheManager."""
    (torch, _, SamplingParams, sha256, KVCacheManager, get_request_block_hasher,
     init_none_hash, FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, Request) = _import_vllm()
    init_none_hash(sha256)
    b = config.block_size_tokens
    spec = FullAttentionSpec(block_size=b, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv_config = KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[],
                              kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    manager = KVCacheManager(kv_config, max_model_len=1 << 16, scheduler_block_size=b,
                             hash_block_size=b, enable_caching=True)
    hasher = get_request_block_hasher(b, sha256)
    hits: list[int] = []
    rejected: list[int] = []
    for row, (tenant, prompt) in enumerate(zip(tenants, prompts, strict=True)):
        params = SamplingParams(max_tokens=1)
        params.update_from_generation_config({}, eos_token_id=100)
        request = Request(request_id=str(row), prompt_token_ids=prompt, sampling_params=params,
                          pooling_params=None, cache_salt=tenant, block_hasher=hasher)
        blocks, computed, _ = manager.get_computed_blocks(request)
        allocated = manager.allocate_slots(request, len(prompt) - computed, computed, blocks)
        if allocated is None:
            rejected.append(row)
            hits.append(0)
        else:
            hits.append(int(computed))
        manager.free(request)
    return hits, rejected


def configs_for(prompts: list[list[int]], block_size: int) -> list[Config]:
    """Pool sizes from one below the largest request (it is rejected) and just above it, through
    multiples of it where the two models part, to a pool that never evicts."""
    blocks = [-(-len(p) // block_size) for p in prompts]
    largest = max(blocks)
    ample = sum(blocks) + 2  # more than every block ever allocated: nothing is evicted
    middle = [m * largest for m in (2, 3, 4, 6, 8, 12)]
    return [Config(block_size, n) for n in (largest, largest + 1, *middle, ample)
            if n <= ample]


def _chains(path: Path, block_size: int):  # type: ignore[no-untyped-def]
    from yaotu_trace.ingest import read_trace
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.rules import rules_for

    prepared = prepare(read_trace(path))
    return prepared.chains(rules_for("vllm", block_size_tokens=block_size))


def ours(path: Path, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """(clean-model hits, engine-exact hits) per request from yaotu_trace."""
    from yaotu_trace.prefix.kernels.engine import replay
    from yaotu_trace.prefix.kernels.exact_vllm import replay_vllm
    from yaotu_trace.prefix.rules import rules_for

    chains = _chains(path, config.block_size_tokens)
    clean = rules_for("vllm", block_size_tokens=config.block_size_tokens,
                      capacity_blocks=config.num_gpu_blocks, accounting="clean")
    return replay(chains, clean).hit_tokens, replay_vllm(chains, config.num_gpu_blocks).hit_tokens


def main(argv: list[str] | None = None) -> int:
    """Drive vLLM on every trace and configuration, write the fixtures, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=DATA)
    args = parser.parse_args(argv)
    torch, vllm = _import_vllm()[:2]
    extra_block_sizes = {"mixed": (16, 32)}
    header = (f"{'trace':<9} {'B':>3} {'N':>6} {'requests':>8} {'engine hits':>11} "
              f"{'rejected':>8} {'exact':>9} {'differ':>6} {'clean':>9} {'differ':>6}")
    print(header)
    print("-" * len(header))
    for shape in SHAPES:
        path = trace_path(shape)
        tenants, prompts = load_prompts(path)
        configs = []
        for block_size in extra_block_sizes.get(shape.name, (16,)):
            for config in configs_for(prompts, block_size):
                hits, rejected = drive_vllm(tenants, prompts, config)
                engine = np.asarray(hits, dtype=np.int64)
                clean, exact = ours(path, config)
                print(f"{shape.name:<9} {config.block_size_tokens:>3} "
                      f"{config.num_gpu_blocks:>6} {len(prompts):>8} {int(engine.sum()):>11} "
                      f"{len(rejected):>8} {int(exact.sum()):>9} "
                      f"{int((exact != engine).sum()):>6} {int(clean.sum()):>9} "
                      f"{int((clean != engine).sum()):>6}")
                configs.append({"block_size_tokens": config.block_size_tokens,
                                "num_gpu_blocks": config.num_gpu_blocks,
                                "hit_tokens": hits, "rejected": rejected})
        document = {"engine": "vllm", "engine_version": vllm.__version__,
                    "torch_version": torch.__version__, "trace": path.name,
                    "protocol": PROTOCOL, "configs": configs}
        dump_configs(document, args.out_dir / f"vllm_{shape.name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
