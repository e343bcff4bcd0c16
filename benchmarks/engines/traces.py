"""The small token traces the real engines' cache code is driven on (`golden_*.py`).

Each trace is deterministic (a seed), has several tenants, system prompts shared within a tenant
and copied across tenants (same tokens, another tenant: isolation must stop the hit), multi-turn
sessions whose prompts extend the previous turn, and prompt lengths that are and are not
multiples of the block size. Written as canonical Parquet under `tests/fixtures/engines/`, so the
tests replay the very file the engines saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where used: an engine's environment may lack it
    import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "fixtures" / "engines"


@dataclass(frozen=True)
class TraceShape:
    """What one generated trace looks like."""

    name: str
    seed: int
    requests: int
    tenants: int
    block_size_tokens: int  # lengths are biased to multiples of this (and to one off it)
    max_prompt_tokens: int
    vocabulary: int = 1000


SHAPES: tuple[TraceShape, ...] = (
    TraceShape("mixed", seed=7, requests=400, tenants=3, block_size_tokens=16,
               max_prompt_tokens=640),
    TraceShape("sessions", seed=11, requests=300, tenants=2, block_size_tokens=16,
               max_prompt_tokens=900),
)
# For the tier drivers (`golden_tiers_*.py`): blocks of 4 and 8 tokens and a small vocabulary,
# so the tiers are checked at block and chunk sizes the 16-token traces above do not have, on
# prompts that share prefixes more often.
TIER_SHAPES: tuple[TraceShape, ...] = (
    TraceShape("blocks4", seed=101, requests=300, tenants=2, block_size_tokens=4,
               max_prompt_tokens=160, vocabulary=40),
    TraceShape("blocks8", seed=202, requests=300, tenants=3, block_size_tokens=8,
               max_prompt_tokens=400, vocabulary=60),
)


def generate(shape: TraceShape) -> pd.DataFrame:
    """One trace as a canonical table: request_id, arrival_s, tenant, prompt_len, output_len,
    prompt_tokens (int64 lists)."""
    rng = np.random.default_rng(shape.seed)
    b = shape.block_size_tokens
    systems = [rng.integers(0, shape.vocabulary, size=int(rng.integers(b, 12 * b))).tolist()
               for _ in range(4)]
    sessions: list[tuple[int, list[int]]] = []  # (tenant, prompt so far)
    rows = []
    for i in range(shape.requests):
        tenant = int(rng.integers(0, shape.tenants))
        roll = rng.random()
        if sessions and roll < 0.45:  # next turn of an open session: its prompt extends
            j = int(rng.integers(0, len(sessions)))
            tenant, prompt = sessions[j]
            prompt = prompt + _suffix(rng, shape)
            sessions[j] = (tenant, prompt)
        elif roll < 0.8:  # a system prompt, then a fresh question
            prompt = list(systems[int(rng.integers(0, len(systems)))]) + _suffix(rng, shape)
            sessions.append((tenant, prompt))
        else:  # unrelated
            prompt = _suffix(rng, shape)
        prompt = prompt[: shape.max_prompt_tokens]
        if len(prompt) < 2:
            prompt = [*prompt, 1, 2]
        rows.append({"request_id": f"{shape.name}-{i:04d}", "arrival_s": 0.25 * i,
                     "tenant": f"t{tenant}", "prompt_len": len(prompt),
                     "output_len": int(rng.integers(1, 64)),
                     "prompt_tokens": [int(t) for t in prompt]})
        if len(sessions) > 12:
            sessions.pop(0)
    import pandas as pd

    return pd.DataFrame(rows)


def _suffix(rng: np.random.Generator, shape: TraceShape) -> list[int]:
    """New tokens for a turn: a whole number of blocks, or that and one token off either way."""
    b = shape.block_size_tokens
    blocks = int(rng.integers(1, 8))
    length = blocks * b + int(rng.choice([0, 0, 1, -1, int(rng.integers(2, b))]))
    return rng.integers(0, shape.vocabulary, size=max(length, 1)).tolist()


def trace_path(shape: TraceShape) -> Path:
    """Where the trace of `shape` is written."""
    return DATA / f"trace_{shape.name}.parquet"


def write_traces() -> list[Path]:
    """Write every shape's trace (deterministic: the same bytes each run)."""
    DATA.mkdir(parents=True, exist_ok=True)
    paths = []
    for shape in SHAPES + TIER_SHAPES:
        path = trace_path(shape)
        generate(shape).to_parquet(path, index=False)
        paths.append(path)
    return paths


def load_prompts(path: Path) -> tuple[list[str], list[list[int]]]:
    """Tenants and prompt token lists of a written trace, in file (arrival) order."""
    import pandas as pd

    frame = pd.read_parquet(path)
    return frame["tenant"].astype(str).tolist(), [list(map(int, p)) for p in
                                                  frame["prompt_tokens"]]


if __name__ == "__main__":
    for written in write_traces():
        print(written.relative_to(ROOT))
