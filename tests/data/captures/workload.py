"""The requests every capture fixture feeds its producer, and the engine whose counters they
report: stdlib only, so that each producer's own environment can import it.

A small multi-turn chat workload: two applications, each with its own system prompt, four
conversations each; every turn's prompt is the previous prompt, the previous answer and a new
user message, so later turns share long prefixes. Arrivals spread over ten minutes.

`Engine` stands for the serving engine the producer would report on: a prefix cache of
`block_tokens`-token blocks (the last prompt token is never a hit, as in vLLM and SGLang), with
an optional pool size in blocks (LRU) and an optional flush at a time (SGLang's /flush_cache,
an engine restart), so a capture can carry an engine's own `cached_tokens` that agree with the
replay or fall short of it for a stretch.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field

START_UNIX_S = 1_767_002_100.0  # 2025-12-29 09:55:00 UTC: the hour turns mid-run
SPAN_S = 600.0


@dataclass(frozen=True)
class Request:
    request_id: str
    arrival_s: float  # from START_UNIX_S
    tenant: str
    session: str
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    ttft_s: float
    e2e_s: float


def requests(seed: int = 29, conversations: int = 12, turns: int = 4) -> list[Request]:
    """The workload, in arrival order."""
    rng = random.Random(seed)
    systems = {app: tuple(rng.randrange(1, 5000) for _ in range(rng.randrange(60, 90)))
               for app in ("support", "coder")}
    out: list[Request] = []
    for c in range(conversations):
        app = ("support", "coder")[c % 2]
        tenant = f"team-{app}"
        start = rng.uniform(0, SPAN_S * 0.6)
        prompt = systems[app] + tuple(rng.randrange(1, 5000)
                                      for _ in range(rng.randrange(20, 60)))
        t = start
        for turn in range(turns):
            output = tuple(rng.randrange(1, 5000) for _ in range(rng.randrange(8, 40)))
            ttft = 0.05 + len(prompt) * 0.0004
            e2e = ttft + len(output) * 0.02
            out.append(Request(request_id=f"conv{c}-turn{turn}", arrival_s=round(t, 3),
                               tenant=tenant, session=f"conv{c}", prompt=prompt, output=output,
                               ttft_s=round(ttft, 4), e2e_s=round(e2e, 4)))
            t += e2e + rng.uniform(20, 90)
            prompt = prompt + output + tuple(rng.randrange(1, 5000)
                                             for _ in range(rng.randrange(10, 40)))
    return sorted(out, key=lambda r: (r.arrival_s, r.request_id))


@dataclass
class Engine:
    """A prefix cache of whole blocks keyed by the prompt's prefix, per tenant salt."""

    block_tokens: int = 16
    capacity_blocks: int | None = None
    flush_at_s: float | None = None
    salted: bool = True
    _blocks: OrderedDict[tuple[str, tuple[int, ...]], None] = field(default_factory=OrderedDict)
    _flushed: bool = False

    def serve(self, request: Request) -> int:
        """The engine's cached_tokens for `request`; its blocks are cached after it."""
        if self.flush_at_s is not None and not self._flushed and \
                request.arrival_s >= self.flush_at_s:
            self._blocks.clear()
            self._flushed = True
        salt = request.tenant if self.salted else ""
        b = self.block_tokens
        usable = (len(request.prompt) - 1) // b  # the last token is always computed
        keys = [(salt, request.prompt[:(i + 1) * b]) for i in range(len(request.prompt) // b)]
        hit = 0
        while hit < usable and keys[hit] in self._blocks:
            hit += 1
        for key in reversed(keys):  # touched tail first: the head is the most recent
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        if self.capacity_blocks is not None:
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
        return hit * b


def totals(reqs: list[Request]) -> dict[str, int]:
    """What the tests check a reader against."""
    return {"requests": len(reqs), "prompt_tokens": sum(len(r.prompt) for r in reqs),
            "output_tokens": sum(len(r.output) for r in reqs)}
