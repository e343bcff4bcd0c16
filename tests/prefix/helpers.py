"""Builders for tiny replays in code: prompts as lists of token ids."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from yaotu_trace.prefix.kernels.blocks import build_block_chains
from yaotu_trace.prefix.kernels.chains import BlockChains, PromptContent
from yaotu_trace.prefix.kernels.engine import replay
from yaotu_trace.prefix.kernels.result import ReplayResult
from yaotu_trace.prefix.rules import ReplayRules, rules_for


def flatten(prompts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, values, prompt_len) of a list of prompts."""
    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.array([t for p in prompts for t in p], dtype=np.int64)
    return offsets, values, lengths


def chains_of(prompts: Sequence[Sequence[int]], rules: ReplayRules,
              namespaces: Sequence[int] | None = None,
              source_block_size: int | None = None,
              prompt_len: Sequence[int] | None = None) -> BlockChains:
    offsets, values, lengths = flatten(prompts)
    if prompt_len is not None:
        lengths = np.asarray(prompt_len, dtype=np.int64)
    ns = None if namespaces is None else np.asarray(namespaces, dtype=np.int64)
    content = PromptContent(offsets=offsets, values=values, prompt_len=lengths,
                            source_block_size=source_block_size)
    return build_block_chains(content, ns, rules)


def run(prompts: Sequence[Sequence[int]], preset: str = "none", *,
        namespaces: Sequence[int] | None = None, instance_codes: Sequence[int] | None = None,
        **overrides: object) -> ReplayResult:
    rules = rules_for(preset, **overrides)
    chains = chains_of(prompts, rules, namespaces)
    codes = None if instance_codes is None else np.asarray(instance_codes, dtype=np.int64)
    return replay(chains, rules, codes)


def hits(prompts: Sequence[Sequence[int]], preset: str = "none", **kw: object) -> list[int]:
    return run(prompts, preset, **kw).hit_tokens.tolist()


def prompts_with_reuse(rng: np.random.Generator, count: int) -> list[list[int]]:
    """Random prompts over a three-token alphabet, 70 % of them starting with a cut of an
    earlier one: prefixes shared at every length, inside and across blocks."""
    prompts: list[list[int]] = []
    for i in range(count):
        if i and rng.random() < 0.7:
            j = int(rng.integers(0, i))
            cut = int(rng.integers(0, len(prompts[j]) + 1))
            prompts.append(prompts[j][:cut] + rng.integers(0, 3, int(rng.integers(0, 40))).tolist())
        else:
            prompts.append(rng.integers(0, 3, int(rng.integers(1, 80))).tolist())
    return prompts
