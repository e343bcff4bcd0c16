"""Which requests of the after run are those of the before run: the request chain.

By `request_id` when both runs carry ids and most requests pair up by them (a pair whose
prompt length differs is not the same request, so two tables numbered r0, r1, ... are not
matched on their numbering alone); else by prompt content (a hash of the token or block ids) and
arrival order: the k-th request of a given prompt in one run is the k-th of that prompt in the
other. Without content, prompt and output lengths stand in for it (a weaker match, named so).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd

from yaotu_trace.data.run_diff import MatchBasis, MatchedRequests
from yaotu_trace.data.schema import Trace, list_arrays

# Ids are the match when at least this share of the smaller run's ids is in the other run.
ID_SHARE = 0.5
# Two inter-arrival gaps agree within this relative difference, or this many seconds.
GAP_REL = 0.10
GAP_ABS_S = 0.001


def match_requests(before: Trace, after: Trace) -> MatchedRequests:
    """The matched request pairs of two runs and how well their arrivals agree."""
    b, a = before.requests, after.requests
    if _ids_shared(b, a):
        rows_b, rows_a = _by_id(b, a)
        if rows_b.size >= ID_SHARE * min(len(b), len(a)):
            return _matched(b, a, rows_b, rows_a, "request_id")
    # Ids that do not pair most requests (the `r0, r1, ...` a reader numbers rows with, shifted
    # by one dropped request) say nothing: the prompts do.
    basis: MatchBasis
    if before.content_column is not None and before.content_column == after.content_column:
        rows_b, rows_a = _by_key(content_keys(before), content_keys(after))
        basis = "content and arrival"
    else:
        rows_b, rows_a = _by_key(_length_keys(b), _length_keys(a))
        basis = "lengths and arrival"
    return _matched(b, a, rows_b, rows_a, basis if rows_b.size else "none")


def _ids_shared(b: pd.DataFrame, a: pd.DataFrame) -> bool:
    """Whether both tables carry ids and most of the smaller one's are in the other."""
    if "request_id" not in b.columns or "request_id" not in a.columns:
        return False
    ids_b = set(b["request_id"].dropna().astype(str))
    ids_a = set(a["request_id"].dropna().astype(str))
    smaller = min(len(ids_b), len(ids_a))
    return smaller > 0 and len(ids_b & ids_a) >= ID_SHARE * smaller


def _by_id(b: pd.DataFrame, a: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of rows with the same id (first occurrence) and the same prompt length."""
    pos_a: dict[str, int] = {}
    for row, rid in enumerate(a["request_id"].astype("string").tolist()):
        if rid is not pd.NA and rid not in pos_a:
            pos_a[rid] = row
    prompt_b = b["prompt_len"].to_numpy()
    prompt_a = a["prompt_len"].to_numpy()
    rows_b: list[int] = []
    rows_a: list[int] = []
    seen: set[str] = set()
    for row, rid in enumerate(b["request_id"].astype("string").tolist()):
        if rid is pd.NA or rid in seen or rid not in pos_a:
            continue
        seen.add(rid)
        other = pos_a[rid]
        if prompt_b[row] == prompt_a[other]:
            rows_b.append(row)
            rows_a.append(other)
    return np.asarray(rows_b, dtype=np.int64), np.asarray(rows_a, dtype=np.int64)


def content_keys(trace: Trace) -> list[str]:
    """Per request, a digest of its prompt's token or block ids (rows in arrival order)."""
    column = trace.content_column
    assert column is not None
    offsets, values = list_arrays(trace.requests[column])
    data = np.ascontiguousarray(values, dtype=np.int64)
    return [hashlib.blake2b(data[offsets[i]:offsets[i + 1]].tobytes(), digest_size=16).hexdigest()
            for i in range(offsets.size - 1)]


def _length_keys(table: pd.DataFrame) -> list[str]:
    """Per request, its prompt and output lengths, the key when no content is given."""
    return [f"{p}:{o}" for p, o in zip(table["prompt_len"].tolist(),
                                       table["output_len"].tolist(), strict=True)]


def _by_key(keys_b: Sequence[str], keys_a: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The k-th before request of a key paired with the k-th after request of that key."""
    queue: dict[str, list[int]] = defaultdict(list)
    for row, key in enumerate(keys_a):
        queue[key].append(row)
    taken: dict[str, int] = defaultdict(int)
    rows_b: list[int] = []
    rows_a: list[int] = []
    for row, key in enumerate(keys_b):
        k = taken[key]
        if k < len(queue.get(key, ())):
            rows_b.append(row)
            rows_a.append(queue[key][k])
            taken[key] = k + 1
    return np.asarray(rows_b, dtype=np.int64), np.asarray(rows_a, dtype=np.int64)


def _matched(b: pd.DataFrame, a: pd.DataFrame, rows_b: np.ndarray, rows_a: np.ndarray,
             basis: MatchBasis) -> MatchedRequests:
    """The match with the agreement of its arrivals: order, span and gaps."""
    arrival_b = b["arrival_s"].to_numpy(dtype=np.float64)[rows_b]
    arrival_a = a["arrival_s"].to_numpy(dtype=np.float64)[rows_a]
    return MatchedRequests(
        before_rows=tuple(int(r) for r in rows_b), after_rows=tuple(int(r) for r in rows_a),
        basis=basis, before_requests=len(b), after_requests=len(a),
        before_share=rows_b.size / len(b) if len(b) else 0.0,
        after_share=rows_a.size / len(a) if len(a) else 0.0,
        order_correlation=rank_correlation(arrival_b, arrival_a),
        span_ratio=_span_ratio(arrival_b, arrival_a),
        gap_agreement=_gap_agreement(arrival_b, arrival_a),
    )


def rank_correlation(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None below two values or when
    either side is constant."""
    if x.size < 2:
        return None
    rx = pd.Series(x).rank(method="average").to_numpy()
    ry = pd.Series(y).rank(method="average").to_numpy()
    sx, sy = rx.std(), ry.std()
    if sx == 0 or sy == 0:
        return 1.0 if sx == sy else None
    return float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy))


def _span_ratio(arrival_b: np.ndarray, arrival_a: np.ndarray) -> float | None:
    """The after run's arrival span over the before run's (None without a span)."""
    if arrival_b.size < 2:
        return None
    span_b = float(arrival_b.max() - arrival_b.min())
    span_a = float(arrival_a.max() - arrival_a.min())
    if span_b == 0:
        return 1.0 if span_a == 0 else None
    return span_a / span_b


def _gap_agreement(arrival_b: np.ndarray, arrival_a: np.ndarray) -> float | None:
    """Share of consecutive inter-arrival gaps (in the before run's order) that agree."""
    if arrival_b.size < 2:
        return None
    gap_b, gap_a = np.diff(arrival_b), np.diff(arrival_a)
    close = np.abs(gap_a - gap_b) <= np.maximum(GAP_REL * np.abs(gap_b), GAP_ABS_S)
    return float(close.mean())
