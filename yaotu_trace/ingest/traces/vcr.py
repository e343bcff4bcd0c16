"""vllm-vcr traces (neuralmagic/vllm-vcr, `crates/sim-trace/src/trace.rs`): what its tap records
off vLLM's engine-core link (`vllm-vcr record --trace-out trace.jsonl`), one JSON line per
completed request (in finish order), after an optional `{"meta": {...}}` line. Plain or
gzipped.

Mapping and decisions:

- `arrival_s` = `arrival_ms` / 1000 (ms since the capture's first request). A record without
  it has no place in the arrival schedule: it is skipped and counted, as vllm-vcr's own
  `replay_subset` does. None with one is a lengths-only table.
- `first_token_s` = arrival + `ttft_ms`; `token_times_s` = the first token's time, then the
  running sum of `itl_ms`: one time per output chunk, as the tap measures a gap (a chunk of
  several tokens, `itl_tokens`, is one gap; a note counts such requests). A record with
  `itl_summary` only has no token times; its `finish_s` = first token + mean × count. A
  request with no output (`output_tokens` 0, an abort before the first token) has no times.
- `prompt_len` = `prompt_tokens` (a count here), `output_len` = `output_tokens`,
  `output_tokens` (ids) = `output_token_ids` where the tap recorded them, `cached_tokens` the
  engine's own; `status` from `finish_reason` (`abort` → aborted, `error` → error).
- `prompt_block_ids` = `block_hashes` (vllm-vcr's chained FNV-1a hashes of the full blocks,
  kept as their 64 bits), `source_block_size` = the meta's `block_size`. With `mm_hashes` the
  request's images are folded into every block id: two requests share a prefix only with the
  same images (where in the prompt an image sits is not recorded; vLLM keys a block on the
  images inside it, so this shares less than vLLM can: the notes say how many requests).
- `model` = the meta's `model`; its `vllm_version`, `gpu`, `tp`, `config_hash` are named in a
  note. `concurrency` has no column: counted and named, like every other field not read.
- The engine's limits (`Trace.engine_limits`): the meta's `ready_response_hex` is the msgpack of
  vLLM's registration reply (`EngineCoreReadyResponse`, decoded by `msgpack_value`); its
  `max_num_seqs`, `max_num_batched_tokens` and pool ((`num_gpu_blocks` − 1) × `block_size`
  tokens: the null block is never used), else the meta's own `max_num_seqs`, are what the
  diagnosis judges against where no option gives them. A reply that does not decode is refused.
- The engine's own steps (`step_table`), when the tap wrote `itl_ctx` and every request's
  arrival and gaps are in the file: the outputs of one engine step reach the tap in one
  message, so the distinct output times are the steps' ends (each starts at the one before,
  or at the first arrival in flight after an idle spell); a step's `prefill_tokens` are the
  uncached prompt tokens of the requests whose first token it carried (as the tap attributes a
  chunked prompt), its `decode_tokens` the chunks' tokens, its `num_running` the engine's
  count after it (`itl_ctx.num_running`). The trace carries them as its step log (`--steps`
  replaces them), so the interference axis reads co-located prefill from the engine itself.
  On vLLM 0.33.0's own scheduler runs (`tests/fixtures/sim_vllm`, as the tap would record
  them) every step that emitted a token comes back with its end, start and decode tokens;
  what the tap cannot see is a step that emitted none (a prompt's earlier chunk: its tokens
  are counted in the step of its first token) and a preempted request's recompute.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yaotu_trace.catalog.units import MAX_COUNT
from yaotu_trace.errors import TraceSchemaError
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.common import (
    as_int64,
    count_keys,
    fail,
    json_record,
    number,
    text_lines,
    unused_note,
    whole,
)
from yaotu_trace.ingest.traces.msgpack_value import decode

if TYPE_CHECKING:
    import pandas as pd

    from yaotu_trace.data.schema import EngineLimits, RawTrace

RECORD_KEYS: Final = frozenset({"prompt_tokens", "output_tokens", "ttft_ms"})
USED: Final = frozenset({"prompt_tokens", "cached_tokens", "output_tokens", "ttft_ms", "itl_ms",
                         "itl_tokens", "itl_summary", "itl_ctx", "arrival_ms", "block_hashes",
                         "mm_hashes", "output_token_ids", "finish_reason"})
META_SHOWN: Final = ("vllm_version", "gpu", "tp", "max_num_seqs", "source", "config_hash")
META_USED: Final = frozenset({"model", "block_size", "ready_response_hex", *META_SHOWN})
# What the diagnosis takes of vLLM's registration reply (`EngineCoreReadyResponse`), shown in
# a note with the rest of its limits.
READY_SHOWN: Final = ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                      "max_model_len", "tensor_parallel_size", "data_parallel_size", "dtype",
                      "vllm_version")
STATUS: Final = {"stop": "ok", "length": "ok", "repetition": "ok", "abort": "aborted",
                 "error": "error"}
FIX: Final = "pass the trace `vllm-vcr record --trace-out` wrote"
SAME_STEP_S: Final = 1e-6  # outputs of one engine step reach the tap in one message
STEPS_NOTE: Final = (
    "engine steps from the tap's own outputs (its itl_ctx): one step per engine message, "
    "ending when it reached the tap, starting at the one before (or at the first arrival in "
    "flight after an idle spell); prefill_tokens the prompt tokens not cached of the requests "
    "whose first token it carried (a chunked prompt's earlier chunks are counted there too), "
    "decode_tokens the chunk tokens it carried, num_running the engine's count after it; "
    "--steps replaces them")


@dataclass(slots=True)
class _Events:
    """Every output of every request, in the engine step that emitted it (parallel lists): a
    first token (the prompt tokens computed for it) or a later chunk (its tokens, and the
    running count the engine reported after that step, −1 when unknown)."""

    time_s: list[float] = field(default_factory=list)
    prefill_tokens: list[int] = field(default_factory=list)
    decode_tokens: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)

    def add(self, time_s: float, prefill: int, decode: int, running: int) -> None:
        self.time_s.append(time_s)
        self.prefill_tokens.append(prefill)
        self.decode_tokens.append(decode)
        self.running.append(running)


def read_vcr(path: Path) -> RawTrace:
    """Every record with an arrival (see the module docstring)."""
    import pandas as pd

    from yaotu_trace.data.schema import RawTrace
    from yaotu_trace.data.values import SOURCE_ROW

    meta: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    unused: Counter[str] = Counter()
    tally: Counter[str] = Counter()
    events = _Events()
    for line, text in text_lines(path):
        if not text.strip():
            continue
        record = json_record(text, path, "line", line)
        if "meta" in record:  # the header, first when present
            if rows or meta:
                raise fail(path, "line", line, "meta", "a second header or one after the "
                           "records (vllm-vcr writes it first); join the traces apart", FIX)
            meta = _meta(record["meta"], path, line, unused)
            continue
        count_keys(unused, record, USED)
        rows.append(_row(record, path, line, meta, tally, events))
    if not rows:
        raise TraceSchemaError(f"{path}: no request record after the meta line; {FIX}")
    placed = [r for r in rows if "arrival_s" in r]
    unplaced = [r["_line"] for r in rows if "arrival_s" not in r]
    df = pd.DataFrame.from_records(placed or rows).rename(columns={"_line": SOURCE_ROW})
    if meta.get("model"):
        df["model"] = str(meta["model"])
    # The engine's steps need every output's time: a record with a summary of its gaps, or
    # without an arrival, hides the steps it ran in.
    hidden = tally["summarised"] + len(unplaced)
    steps = step_table(events, placed) if tally["context"] and placed and not hidden else None
    notes = _notes(meta, tally, unplaced, bool(placed))
    if tally["context"] and hidden:
        notes += (f"no engine steps are derived from itl_ctx: {hidden:,} record(s) hide the "
                  "times of their outputs (itl_summary only, or no arrival_ms)",)
    block = meta.get("block_size")
    return RawTrace(requests=df, format_name="vllm-vcr", row_label="line",
                    steps=steps, steps_note=None if steps is None else STEPS_NOTE,
                    engine_limits=engine_limits(meta),
                    source_block_size=int(block) if tally["hashed"] and block else None,
                    notes=notes + unused_note(unused, len(rows), "fields"),
                    source_names={"arrival_s": "arrival_ms", "prompt_len": "prompt_tokens",
                                  "output_len": "output_tokens", "first_token_s": "ttft_ms",
                                  "token_times_s": "itl_ms", "prompt_block_ids": "block_hashes",
                                  "output_tokens": "output_token_ids"},
                    source_units={"arrival_s": "ms", "first_token_s": "ms",
                                  "token_times_s": "ms"})


def _meta(value: Any, path: Path, line: int, unused: Counter[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(path, "line", line, "meta", "not an object", FIX)
    count_keys(unused, value, META_USED, "meta.")
    if value.get("block_size") is not None:
        whole(value["block_size"], path, "line", line, "meta.block_size", FIX)
        if value["block_size"] < 1:
            raise fail(path, "line", line, "meta.block_size", "0 tokens a block", FIX)
    if value.get("max_num_seqs") is not None:
        whole(value["max_num_seqs"], path, "line", line, "meta.max_num_seqs", FIX)
    if value.get("ready_response_hex") is not None:
        value = {**value, "ready": _ready(value["ready_response_hex"], path, line)}
    return value


def _ready(text: Any, path: Path, line: int) -> dict[str, Any]:
    """vLLM's registration reply, decoded, with the limits the diagnosis takes checked."""
    key = "meta.ready_response_hex"
    try:
        reply = decode(bytes.fromhex(text)) if isinstance(text, str) else None
    except ValueError as exc:
        raise fail(path, "line", line, key, f"not the msgpack of vLLM's reply ({exc})",
                   FIX) from None
    if not isinstance(reply, dict):
        raise fail(path, "line", line, key, "not the msgpack map of vLLM's reply", FIX)
    for name in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens"):
        if reply.get(name) is not None:
            value = whole(reply[name], path, "line", line, f"{key} {name}", FIX)
            if value > MAX_COUNT:
                raise fail(path, "line", line, f"{key} {name}", f"{value:.3g} is beyond "
                           f"{MAX_COUNT:.0e}, more than any engine has", FIX)
    return reply


def engine_limits(meta: dict[str, Any]) -> EngineLimits | None:
    """The limits the capture states: the registration reply's (the pool is its usable
    blocks, vLLM's `num_gpu_blocks` − 1 for the null block, × its block size), else the meta's
    own max_num_seqs."""
    from yaotu_trace.data.schema import EngineLimits

    ready = meta.get("ready", {})
    blocks, block = ready.get("num_gpu_blocks"), ready.get("block_size")
    pool = (blocks - 1) * block if blocks and block and blocks > 1 else None
    seats = ready.get("max_num_seqs") or meta.get("max_num_seqs") or None
    budget = ready.get("max_num_batched_tokens") or None
    if pool is None and seats is None and budget is None:
        return None
    return EngineLimits(max_num_seqs=seats, max_batched_tokens=budget, kv_capacity_tokens=pool,
                        num_gpu_blocks=blocks if pool is not None else None)


def _row(record: dict[str, Any], path: Path, line: int, meta: dict[str, Any],
         tally: Counter[str], events: _Events) -> dict[str, Any]:
    """One record as canonical columns (times in s), `arrival_s` absent when it has none."""
    def count(key: str) -> int:
        return whole(record.get(key), path, "line", line, key, FIX)

    prompt, output = count("prompt_tokens"), count("output_tokens")
    row: dict[str, Any] = {"prompt_len": prompt, "output_len": output, "_line": line}
    if record.get("cached_tokens") is not None:
        row["cached_tokens"] = count("cached_tokens")
        if row["cached_tokens"] > prompt:
            raise fail(path, "line", line, "cached_tokens",
                       f"{row['cached_tokens']:,} cached of a {prompt:,}-token prompt", FIX)
    reason = record.get("finish_reason")
    if reason is not None:
        if reason not in STATUS:
            raise fail(path, "line", line, "finish_reason", f"{str(reason)[:40]!r} is not one "
                       f"of {', '.join(STATUS)}", FIX)
        row["status"] = STATUS[reason]
    ids = _block_ids(record, path, line, meta, prompt, tally)
    if ids is not None:
        row["prompt_block_ids"] = ids
    if record.get("output_token_ids") is not None:
        row["output_tokens"] = _ints(record["output_token_ids"], path, line, "output_token_ids")
        if len(row["output_tokens"]) != output:
            raise fail(path, "line", line, "output_token_ids", f"{len(row['output_tokens'])} "
                       f"ids for output_tokens={output}", FIX)
    if record.get("arrival_ms") is not None:
        row["arrival_s"] = _ms(record, "arrival_ms", path, line) / 1000.0
        if output > 0:
            _times(row, record, path, line, tally, events)
    return row


def _times(row: dict[str, Any], record: dict[str, Any], path: Path, line: int,
           tally: Counter[str], events: _Events) -> None:
    """First token, each chunk's time and the finish of a request that produced output; the
    engine steps they were emitted in go to `events`."""
    first = row["arrival_s"] + _ms(record, "ttft_ms", path, line) / 1000.0
    row["first_token_s"] = first
    computed = row["prompt_len"] - row.get("cached_tokens", 0)
    events.add(first, computed, 0, -1)
    gaps = record.get("itl_ms")
    summary = record.get("itl_summary")
    if gaps is not None:
        if not isinstance(gaps, list):
            raise fail(path, "line", line, "itl_ms", "not a list of gaps", FIX)
        seconds = [number(g, path, "line", line, "itl_ms", FIX) / 1000.0 for g in gaps]
        if any(s < 0 for s in seconds):
            raise fail(path, "line", line, "itl_ms", "a negative gap", FIX)
        chunks = record.get("itl_tokens")
        if chunks is not None and len(_ints(chunks, path, line, "itl_tokens")) != len(gaps):
            raise fail(path, "line", line, "itl_tokens", f"{len(chunks)} chunks for "
                       f"{len(gaps)} gaps in itl_ms", FIX)
        times = list(accumulate(seconds, initial=first))
        row["token_times_s"] = times
        row["finish_s"] = times[-1]
        if len(times) != row["output_len"]:
            tally["chunked"] += 1
        running = _context(record, len(gaps), path, line)
        tally["context"] += running is not None
        for k, end in enumerate(times[1:]):
            events.add(end, 0, chunks[k] if chunks is not None else 1,
                       -1 if running is None else running[k])
    elif isinstance(summary, dict):
        mean = number(summary.get("mean_ms"), path, "line", line, "itl_summary.mean_ms", FIX)
        gaps_n = whole(summary.get("count"), path, "line", line, "itl_summary.count", FIX)
        row["finish_s"] = first + mean * gaps_n / 1000.0
        tally["summarised"] += 1
    elif row["output_len"] > 1:
        raise fail(path, "line", line, "itl_ms", f"output_tokens={row['output_len']} but "
                   "neither itl_ms nor itl_summary is present", FIX)
    else:
        row["finish_s"] = first


def _context(record: dict[str, Any], gaps: int, path: Path, line: int) -> list[int] | None:
    """The engine's running count after each gap's step (`itl_ctx`, parallel to `itl_ms`), or
    None when the record has no context."""
    ctx = record.get("itl_ctx")
    if ctx is None:
        return None
    if not isinstance(ctx, dict):
        raise fail(path, "line", line, "itl_ctx", "not an object", FIX)
    running = _ints(ctx.get("num_running"), path, line, "itl_ctx.num_running")
    prefill = _ints(ctx.get("prefill_tokens"), path, line, "itl_ctx.prefill_tokens")
    if len(running) != gaps or len(prefill) != gaps:
        raise fail(path, "line", line, "itl_ctx", f"{len(running)} running and {len(prefill)} "
                   f"prefill counts for {gaps} gaps in itl_ms", FIX)
    return running


def step_table(events: _Events, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The engine's steps as step-log columns: the outputs that reached the tap together (one
    engine message), each step from the one before (or from the first arrival still in flight
    when the engine had been idle) to its own end."""
    import numpy as np
    import pandas as pd

    time_s = np.asarray(events.time_s, dtype=np.float64)
    order = np.argsort(time_s, kind="stable")
    time_s = time_s[order]
    step = np.concatenate(([0], np.cumsum(np.diff(time_s) > SAME_STEP_S)))
    firsts = np.flatnonzero(np.concatenate(([True], step[1:] != step[:-1])))
    end_s = time_s[firsts]
    n = end_s.size

    def total(values: list[int]) -> np.ndarray:
        return np.bincount(step, weights=np.asarray(values, dtype=np.float64)[order],
                           minlength=n).astype(np.int64)

    running = np.maximum.reduceat(np.asarray(events.running, dtype=np.int64)[order], firsts)
    # Busy since the step before unless every request in flight came after it.
    arrivals = np.array([r["arrival_s"] for r in rows], dtype=np.float64)
    finishes = np.array([r.get("finish_s", r["arrival_s"]) for r in rows], dtype=np.float64)
    by_arrival = np.argsort(arrivals, kind="stable")
    arrivals, latest_finish = arrivals[by_arrival], np.maximum.accumulate(finishes[by_arrival])
    previous = np.concatenate(([-np.inf], end_s[:-1]))
    came = np.searchsorted(arrivals, previous, side="right")  # requests arrived by then
    busy = (came > 0) & (latest_finish[np.maximum(came - 1, 0)] > previous)
    start_s = np.where(busy, previous, arrivals[np.minimum(came, arrivals.size - 1)])
    return pd.DataFrame({
        "start_s": np.minimum(start_s, end_s), "end_s": end_s,
        "prefill_tokens": total(events.prefill_tokens),
        "decode_tokens": total(events.decode_tokens),
        "num_running": pd.Series(running, dtype="Int64").mask(running < 0),  # −1: unknown
    })


def _block_ids(record: dict[str, Any], path: Path, line: int, meta: dict[str, Any],
               prompt: int, tally: Counter[str]) -> list[int] | None:
    hashes = record.get("block_hashes")
    if hashes is None:
        return None
    block = meta.get("block_size")
    if block is None:
        raise fail(path, "line", line, "block_hashes", "the trace has no meta.block_size to "
                   "say how many tokens each hash covers", FIX)
    ids = [as_int64(v) for v in _ints(hashes, path, line, "block_hashes")]
    if len(ids) > prompt // int(block):
        raise fail(path, "line", line, "block_hashes", f"{len(ids)} full {block}-token blocks "
                   f"in a {prompt}-token prompt", FIX)
    tally["hashed"] += 1
    images = record.get("mm_hashes")
    if images:
        salt = int.from_bytes(hashlib.blake2b("\x1f".join(map(str, images)).encode(),
                                              digest_size=8).digest(), "little")
        ids = [as_int64(v ^ salt) for v in ids]
        tally["images"] += 1
    return ids


def _ints(value: Any, path: Path, line: int, key: str) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise fail(path, "line", line, key, "not a list of whole numbers", FIX)
    return value


def _ms(record: dict[str, Any], key: str, path: Path, line: int) -> float:
    value = number(record.get(key), path, "line", line, key, FIX)
    if value < 0:
        raise fail(path, "line", line, key, f"{value} ms is negative", FIX)
    return value


def _notes(meta: dict[str, Any], tally: Counter[str], unplaced: list[int],
           placed: bool) -> tuple[str, ...]:
    notes: list[str] = []
    if not placed:
        notes.append("no record has arrival_ms: read as a lengths-only table")
    else:
        notes.append("arrival_s is arrival_ms / 1000 (since the capture's first request); "
                     "first_token_s adds ttft_ms, token_times_s the itl_ms gaps")
        if unplaced:
            notes.append(f"records without arrival_ms, skipped (vllm-vcr's replay_subset "
                         f"leaves them out too): {len(unplaced):,} (first: line "
                         f"{unplaced[0]})")
    shown = [f"{k} {meta[k]}" for k in META_SHOWN if meta.get(k) is not None]
    if shown:
        notes.append(f"captured by vllm-vcr: {', '.join(shown)}")
    ready = meta.get("ready", {})
    said = [f"{k} {ready[k]}" for k in READY_SHOWN if ready.get(k) is not None]
    if said:
        notes.append(f"the engine's registration reply (meta.ready_response_hex): "
                     f"{', '.join(said)}")
    if engine_limits(meta) is not None:
        notes.append("the diagnosis takes the capture's max_num_seqs, max_num_batched_tokens "
                     "and KV pool ((num_gpu_blocks − 1) × block_size tokens) where "
                     "--max-num-seqs, --max-batched-tokens or --kv-capacity do not give them")
    if tally["chunked"]:
        notes.append(f"{tally['chunked']:,} request(s) streamed a chunk count other than "
                     "output_len: their token_times_s hold one time per chunk (itl_tokens)")
    if tally["summarised"]:
        notes.append(f"{tally['summarised']:,} request(s) carry itl_summary only: finish_s "
                     "is the first token plus mean × count, with no token times")
    if tally["images"]:
        notes.append(f"{tally['images']:,} request(s) carry images (mm_hashes), folded into "
                     "their block ids: they share a prefix only with requests of the same "
                     "images (vLLM can share the text before an image; the trace does not say "
                     "where it sits)")
    return tuple(notes)


def _is_vcr(keys: set[str]) -> bool:
    return keys == {"meta"} or (keys >= RECORD_KEYS and "arrival_s" not in keys)


FORMAT = TraceFormatSpec(
    name=TraceFormat.VLLM_VCR,
    description="vllm-vcr trace (its tap on vLLM's engine-core link): TTFT, gaps, cached "
                "tokens, block hashes",
    reader=read_vcr,
    row_label="line",
    json_keys=_is_vcr,
)
