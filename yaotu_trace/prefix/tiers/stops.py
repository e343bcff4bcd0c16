"""Runs an engine cannot finish: the request it never gets past, where the replay stops too.

vLLM's tiering can defer a request for ever (`vllm_native.StalledLookup`), SGLang's allocation
can give up ("Prefill out of memory", `sglang_tree.PrefillOutOfMemory`) and LMCache's retrieve
can wait for CPU room for ever (`lmcache.WaitsForCpuRoom`). Hits printed past that request
would be those of a run that cannot happen, so the replay refuses it in one line (exit 2),
naming the request and what would let it run.
"""

from __future__ import annotations

from typing import Self

from yaotu_trace.errors import ConfigError


class EngineStops(ConfigError):
    """The request (index in arrival order) an engine never gets past; `named` gives the same
    error saying it by its id, as the commands show it."""

    def __init__(self, request: int, message: str) -> None:
        super().__init__(message)
        self.request = request

    def named(self, name: str) -> Self:
        raise NotImplementedError


def who(request: int, name: str | None) -> str:
    """The request as a message names it: by its id when known, else by its index."""
    return f"request {name}" if name is not None else f"request {request:,} (in arrival order)"
