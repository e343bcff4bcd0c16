"""Hot prefixes: the shared prefixes whose reuse is lost most, which tenants lose it, and why.

Derived from the block-level waterfall (all at block size B). For each of the last three steps
(tenant isolation, routing, capacity) a request that hit `a` blocks after the step but `b > a`
before it recomputed blocks `a..b-1` because of that rule; with tiers below the GPU pool, `a`
after capacity counts what they served too (a tier's hit is no recomputation). The lost span is
attributed to the prefix it completes: blocks 1..b in one shared namespace (so the same content
lost by several tenants is one prefix). A prefix's weight is Σ recomputed tokens over requests
(tokens × times).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yaotu_trace.prefix.kernels.compact import CompactChains
from yaotu_trace.prefix.waterfall import Waterfall

REASONS: tuple[tuple[str, str], ...] = (
    ("tenant_isolation", "isolation"),
    ("routing", "routing"),
    ("capacity", "eviction"),
)
_BEFORE = {"tenant_isolation": "last_token_rule", "routing": "tenant_isolation",
           "capacity": "routing"}


@dataclass(frozen=True, slots=True, kw_only=True)
class HotPrefix:
    """One shared prefix whose reuse was lost."""

    prefix_tokens: int  # length of the shared prefix (blocks 1..b)
    prefix_blocks: int
    recomputed_tokens: int  # Σ tokens recomputed that this prefix would have saved
    times: int  # requests that lost (part of) it
    by_reason_tokens: dict[str, int]  # isolation / routing / eviction
    tenants: tuple[str, ...]  # tenants of those requests (empty without a tenant column)
    example_request_id: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready builtins."""
        return {
            "prefix_tokens": self.prefix_tokens,
            "prefix_blocks": self.prefix_blocks,
            "recomputed_tokens": self.recomputed_tokens,
            "times": self.times,
            "by_reason_tokens": dict(self.by_reason_tokens),
            "tenants": list(self.tenants),
            "example_request_id": self.example_request_id,
        }


def hot_prefixes(
    waterfall: Waterfall,
    request_id: np.ndarray,
    tenant_codes: np.ndarray | None,
    tenant_labels: tuple[str, ...],
    top: int = 10,
) -> tuple[HotPrefix, ...]:
    """The `top` prefixes by recomputed tokens across the isolation, routing and capacity steps."""
    chains = waterfall.shared_chains
    start = chains.offsets[:-1]
    keys, tokens, reasons, requests, depth = [], [], [], [], []
    for code, (step, _) in enumerate(REASONS):
        before = waterfall.hit_blocks[_BEFORE[step]]
        after = waterfall.hit_blocks[step]
        if step == "capacity" and "tiers" in waterfall.hit_blocks:
            after = np.maximum(after, waterfall.hit_blocks["tiers"])
        lost = np.flatnonzero(before > after)
        if lost.size == 0:
            continue
        b = before[lost]
        keys.append(chains.ids_at(start[lost] + b - 1).astype(np.int64))
        # Tokens of the leading blocks per request, not a running sum over every block (5 GB at
        # 1e10 tokens, the peak of `diagnose`).
        tokens.append(chains.leading_tokens(lost, before[lost])
                      - chains.leading_tokens(lost, after[lost]))
        reasons.append(np.full(lost.size, code, dtype=np.int64))
        requests.append(lost)
        depth.append(b)
    if not keys:
        return ()
    key = np.concatenate(keys)
    tok = np.concatenate(tokens)
    why = np.concatenate(reasons)
    req = np.concatenate(requests)
    blocks = np.concatenate(depth)
    uniq, inverse = np.unique(key, return_inverse=True)
    total = np.bincount(inverse, weights=tok, minlength=uniq.size)
    order = np.argsort(-total, kind="stable")[:top]
    out = []
    for g in order:
        rows = np.flatnonzero(inverse == g)
        r = req[rows]
        by_reason = {
            label: int(tok[rows][why[rows] == code].sum())
            for code, (_, label) in enumerate(REASONS)
            if (why[rows] == code).any()
        }
        tenants: tuple[str, ...] = ()
        if tenant_codes is not None:
            tenants = tuple(tenant_labels[t] for t in np.unique(tenant_codes[r]))
        depth_blocks = int(blocks[rows[0]])
        first = int(r.min())
        out.append(HotPrefix(
            prefix_tokens=int(_leading_tokens(chains, first, depth_blocks)),
            prefix_blocks=depth_blocks,
            recomputed_tokens=int(total[g]),
            times=int(np.unique(r).size),
            by_reason_tokens=by_reason,
            tenants=tenants,
            example_request_id=str(request_id[first]),
        ))
    return tuple(out)


def _leading_tokens(chains: CompactChains, request: int, blocks: int) -> int:
    """Tokens of the first `blocks` blocks of one request."""
    return int(chains.leading_tokens(np.array([request]), np.array([blocks]))[0])
