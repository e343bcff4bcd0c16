"""A small unlimited replay in numpy: the engine's answer without loading numba.

One global unlimited cache is a first-occurrence test (`engine._unlimited_hits`); up to
`numpy_passes.SMALL_UNLIMITED_BLOCKS` blocks its numpy twin (`numpy_passes.small_unlimited`,
the same hits) costs less than compiling that kernel on a fresh install, or importing numba and
loading it from the cache. `replay` sends everything else to the engine.
"""

from __future__ import annotations

from typing import Any

from yaotu_trace.prefix.kernels.chains import BlockChains
from yaotu_trace.prefix.kernels.numpy_passes import small_unlimited
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.rules import ReplayRules


def replay(chains: BlockChains, rules: ReplayRules, instance_codes: Any = None,
           **times: Any) -> ReplayResult:
    """`engine.replay`, with a small unlimited replay in numpy."""
    small = small_unlimited(chains, rules)
    if small is not None:
        return small
    # NOTE: the engine starts numba, which a small unlimited replay never needs.
    from yaotu_trace.prefix.kernels.engine import replay as compiled

    return compiled(chains, rules, instance_codes, **times)
