"""The ideal reuse: token-granular longest common prefix with any earlier prompt."""

from __future__ import annotations

import numpy as np
from helpers import chains_of, flatten, prompts_with_reuse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.kernels.ideal import ideal_hit_tokens
from yaotu_trace.prefix.rules import rules_for


def brute_force(prompts: list[list[int]]) -> list[int]:
    def lcp(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    return [max((lcp(p, q) for q in prompts[:i]), default=0) for i, p in enumerate(prompts)]


def ideal(prompts: list[list[int]], block: int) -> list[int]:
    rules = rules_for("none", block_size_tokens=block)
    chains = chains_of(prompts, rules)
    offsets, values, _ = flatten(prompts)
    hits = replay(chains, rules).hit_blocks
    return ideal_hit_tokens(offsets, values, chains, hits).tolist()


def test_worked_example() -> None:
    prompts = [[1, 2, 3, 4], [1, 2, 3, 8], [9, 2, 3, 4]]
    assert ideal(prompts, 2) == [0, 3, 0]
    assert ideal(prompts, 16) == [0, 3, 0]


def test_a_prompt_that_is_a_prefix_of_an_earlier_one() -> None:
    assert ideal([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5]], 4) == [0, 5]
    assert ideal([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8]], 4) == [0, 7]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 2), max_size=14), min_size=1, max_size=12),
       st.integers(1, 6), st.data())
def test_agrees_with_brute_force(prompts, block, data) -> None:
    for i in range(1, len(prompts)):
        if data.draw(st.booleans()):
            j = data.draw(st.integers(0, i - 1))
            prompts[i] = prompts[j][: data.draw(st.integers(0, len(prompts[j])))] + prompts[i]
    assert ideal(prompts, block) == brute_force(prompts)


def test_large_random_trace_agrees_with_block_size_one() -> None:
    prompts = prompts_with_reuse(np.random.default_rng(5), 300)
    one = rules_for("none", block_size_tokens=1)
    exact = replay(chains_of(prompts, one), one).hit_tokens.tolist()
    for block in (2, 7, 16, 64):
        assert ideal(prompts, block) == exact
