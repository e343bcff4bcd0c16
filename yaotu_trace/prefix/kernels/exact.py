"""Engine-exact accounting (spec §5): a finite cache replayed with its engine's own pool.

The clean model of `engine.py` keeps one list of cached full blocks. vLLM's block pool and
SGLang's radix tree spend and free capacity differently (a null block, partial blocks taken
from the free queue, duplicate copies; whole-leaf eviction, refreshed split nodes), so under the
`vllm` and `sglang` presets a finite `--capacity` is replayed by the engine's model instead:
`exact_vllm.py` and `exact_sglang.py`. Per-instance caches are independent pools, so the
requests are split by instance and each instance replayed alone.
"""

from __future__ import annotations

import numpy as np

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.exact_sglang import replay_sglang
from yaotu_trace.prefix.kernels.exact_vllm import replay_vllm
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.rules import Accounting, ReplayRules


def replay_exact(chains: BlockChains, rules: ReplayRules, codes: np.ndarray | None,
                 num_instances: int) -> ReplayResult:
    """Hits under the engine-exact accounting of `rules`; `codes` = instance per request
    (None: one pool), known before the replay (engine-exact rules never route on the cache)."""
    assert rules.capacity_blocks is not None and rules.accounting is not Accounting.CLEAN
    run = replay_vllm if rules.accounting is Accounting.VLLM else replay_sglang
    if codes is None:
        return run(chains, int(rules.capacity_blocks))
    n = chains.num_requests
    hit_blocks = np.zeros(n, dtype=np.int64)
    hit_tokens = np.zeros(n, dtype=np.int64)
    evicted = inserted = rejected = 0
    for c in range(num_instances):
        rows = np.flatnonzero(codes == c)
        if rows.size == 0:
            continue
        part = run(chains.of_requests(rows), int(rules.capacity_blocks))
        hit_blocks[rows] = part.hit_blocks
        hit_tokens[rows] = part.hit_tokens
        evicted += part.evicted_blocks
        inserted += part.inserted_blocks
        rejected += part.rejected_requests
    return ReplayResult(hit_blocks=hit_blocks, hit_tokens=hit_tokens,
                        recompute_tokens=chains.prompt_tokens - hit_tokens,
                        instance=np.asarray(codes, dtype=np.int64), num_instances=num_instances,
                        evicted_blocks=evicted, inserted_blocks=inserted,
                        rejected_requests=rejected)
