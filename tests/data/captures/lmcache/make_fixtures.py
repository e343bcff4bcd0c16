"""Write LMCache's lookup-hash log of the workload (`../workload.py`).

Run with LMCache installed (0.5.6 here; `pip install --no-deps lmcache` plus numba, numpy,
blake3, torch and opentelemetry for its imports):

    python tests/data/captures/lmcache/make_fixtures.py

What `lmcache server --lookup-hash-log-dir DIR --lookup-hash-log-rotation-max-size 8000`
writes: LMCache's `TokenHasher` (`lmcache/v1/multiprocess/token_hasher.py`, blake3, 64-token
chunks) computes each prompt's chunk hashes as the server's lookup does, and its
`LookupHashLoggingSubscriber` (`lmcache/v1/mp_observability/subscribers/logging/
lookup_hash.py`) writes the `MP_LOOKUP` events, with the metadata the lookup module publishes,
to rotating `lookup_hashes_*.jsonl` files. The events carry the workload's arrival times.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402

CHUNK = 64


def main() -> None:
    from lmcache.v1.mp_observability.event import Event, EventType
    from lmcache.v1.mp_observability.subscribers.logging.lookup_hash import (
        LookupHashLogConfig,
        LookupHashLoggingSubscriber,
    )
    from lmcache.v1.multiprocess.token_hasher import TokenHasher

    for old in HERE.glob("lookup_hashes_*.jsonl"):
        old.unlink()
    hasher = TokenHasher(chunk_size=CHUNK, hash_algorithm="blake3")
    logger = LookupHashLoggingSubscriber(LookupHashLogConfig(
        output_dir=str(HERE), rotation_max_size=8_000))
    on_lookup = logger.get_subscriptions()[EventType.MP_LOOKUP]
    reqs = workload.requests()
    for r in reqs:
        chunk_hashes = hasher.compute_chunk_hashes(list(r.prompt))
        on_lookup(Event(event_type=EventType.MP_LOOKUP, session_id=r.request_id,
                        timestamp=workload.START_UNIX_S + r.arrival_s,
                        metadata={"request_id": r.request_id, "chunk_hashes": chunk_hashes,
                                  "model_name": "Qwen/Qwen3-8B", "chunk_size": CHUNK,
                                  "seq_len": len(r.prompt), "dtypes": ["torch.bfloat16"],
                                  "shapes": [[2, 36, CHUNK, 8, 128]]}))
    logger.shutdown()
    sys.stdout.write(f"{workload.totals(reqs)}\n")


if __name__ == "__main__":
    main()
