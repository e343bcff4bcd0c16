"""The prefix replay replays every request, failed or not (docs/replay.md, "Failed requests")."""

from __future__ import annotations

from diag_factories import make_trace

from yaotu_trace.prefix import replay_trace
from yaotu_trace.prefix.rules import rules_for


def _columns(status: list[str | None] | None) -> dict[str, list[object]]:
    # Three prompts of 32 tokens sharing their first 16 (one 16-token block): with every
    # request replayed, requests 2 and 3 each hit that block: 32 hit tokens of 96.
    shared = list(range(16))
    columns: dict[str, list[object]] = {
        "arrival_s": [0.0, 1.0, 2.0],
        "prompt_tokens": [shared + list(range(100, 116)), shared + list(range(200, 216)),
                          shared + list(range(300, 316))],
        "output_len": [4, 4, 4],
    }
    if status is not None:
        columns["status"] = status
    return columns


def test_a_failed_request_still_fills_the_cache() -> None:
    rules = rules_for("vllm", block_size_tokens=16)
    clean = replay_trace(make_trace(_columns(None)), rules)
    failing = replay_trace(make_trace(_columns(["error", "rejected", "ok"])), rules)
    assert clean.saved_prefill_tokens == 32 and clean.prompt_tokens == 96
    assert (failing.saved_prefill_tokens, failing.requests) == (clean.saved_prefill_tokens,
                                                                    clean.requests)
