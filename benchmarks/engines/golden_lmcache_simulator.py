"""LMCache's own cache simulator on LMCache lookup-hash logs: the hits it predicts, as golden.

`lmcache tool cache-simulator simulate` (lmcache 0.5.6, `lmcache/tools/cache_simulator/
simulator.py`, `simulate`; LRU in `lru_cache.py`) replays a server's lookup-hash log through an
LRU of chunk hashes: a request hits the longest prefix of its chunks the cache holds (whole
chunks; the tail is always a miss), then every chunk is referenced head to tail, the hit ones
refreshed and the rest inserted (refreshed when already there), evicting the least recent.
This script runs that function, at several capacities in chunks, on two logs:

- `tests/fixtures/captures/lmcache/`: the lookup-hash log LMCache's own writer made of the
  capture workload (48 lookups, 64-token chunks; `make_fixtures.py` there);
- the Mooncake conversation trace (`../shared/traces/mooncake/conversation_trace.jsonl`), each
  request's full 512-token blocks written as a lookup by LMCache's
  `LookupHashLoggingSubscriber` into a temporary folder (its hash ids as the chunk hashes),
  then loaded back by the simulator's own `load_lookup_events`.

It writes `tests/fixtures/captures/lmcache/cache_simulator.json`: per log and capacity the
total hit tokens, the evictions and, per request in the simulator's order, the hit prefix in
chunks (the Mooncake log's as a SHA-256 of the comma-joined list, with the first 200). The
capacity is passed as chunks (one byte per chunk: the fixture's records name `torch.bfloat16`,
which the simulator does not size). Run with LMCache 0.5.6 importable (its venv):

    cd / && /path/to/venv-lmcache/bin/python /work/…/benchmarks/engines/golden_lmcache_simulator.py
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "captures" / "lmcache"
MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
OUT = FIXTURE / "cache_simulator.json"
FIXTURE_CHUNKS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 1000)
MOONCAKE_CHUNKS = (1000, 4000, 16000, 64000, 1_000_000)
MOONCAKE_BLOCK = 512


def _mooncake_log(folder: Path) -> None:
    """The Mooncake trace as LMCache's lookup-hash log: one lookup a request, at its arrival."""
    from lmcache.v1.mp_observability.event import Event, EventType
    from lmcache.v1.mp_observability.subscribers.logging.lookup_hash import (
        LookupHashLogConfig,
        LookupHashLoggingSubscriber,
    )

    logger = LookupHashLoggingSubscriber(LookupHashLogConfig(output_dir=str(folder)))
    on_lookup = logger.get_subscriptions()[EventType.MP_LOOKUP]
    with MOONCAKE.open() as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            full = int(row["input_length"]) // MOONCAKE_BLOCK
            on_lookup(Event(event_type=EventType.MP_LOOKUP, session_id=f"r{i}",
                            timestamp=1_700_000_000.0 + row["timestamp"] / 1000.0,
                            metadata={"request_id": f"r{i}",
                                      "chunk_hashes": [int(h) for h in row["hash_ids"][:full]],
                                      "model_name": "mooncake", "chunk_size": MOONCAKE_BLOCK,
                                      "seq_len": int(row["input_length"]), "dtypes": [],
                                      "shapes": []}))
    logger.shutdown()


def _run(folder: Path, capacities: tuple[int, ...], whole: bool) -> dict[str, object]:
    from lmcache.tools.cache_simulator.simulator import load_lookup_events, simulate

    events = load_lookup_events([folder])
    out: dict[str, object] = {"requests": len(events)}
    for chunks in capacities:
        result = simulate(events, chunks, 1)
        prefix = [int(v) for v in result["hit_prefix_lengths"]]
        point: dict[str, object] = {"hit_tokens": int(result["total_hit_tokens"]),
                                    "total_tokens": int(result["total_tokens"]),
                                    "evictions": int(result["eviction_count"])}
        if whole:
            point["hit_prefix_chunks"] = prefix
        else:
            point["hit_prefix_sha256"] = hashlib.sha256(
                ",".join(map(str, prefix)).encode()).hexdigest()
            point["hit_prefix_first_200"] = prefix[:200]
        out[str(chunks)] = point
    return out


def main() -> int:
    import lmcache

    golden: dict[str, object] = {
        "producer": "lmcache.tools.cache_simulator.simulator.simulate",
        "lmcache": getattr(lmcache, "__version__", "0.5.6"),
        "fixture": _run(FIXTURE, FIXTURE_CHUNKS, whole=True),
    }
    if MOONCAKE.exists():
        with tempfile.TemporaryDirectory() as tmp:
            _mooncake_log(Path(tmp))
            golden["mooncake_conversation"] = _run(Path(tmp), MOONCAKE_CHUNKS, whole=False)
    OUT.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
