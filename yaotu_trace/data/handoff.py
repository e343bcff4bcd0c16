"""The prefill-to-decode hand-off of a disaggregated trace, per request: whether it was handed
off, when the client saw its first token, and how long it queued for the decode pool.

A request is handed off when its `prefill_instance` and `decode_instance` are both named and
differ. Its client first token is `max(first_token_s, decode_start_s)`: vLLM's P/D proxy and
Dynamo stream the response from the decode instance, so the client sees the first token once
the KV has arrived there. Its decode queue is `decode_start_s − first_token_s − kv_transfer_s`
(clipped at 0): time the KV sat on the decode instance waiting for a slot, which the user waits
through like any queue. Where `kv_transfer_s` is unknown the gap holds the transfer too and the
queue cannot be told apart from it: it is left at 0 (not counted), never guessed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def _names(requests: pd.DataFrame, column: str) -> np.ndarray:
    if column not in requests.columns:
        return np.full(len(requests), "", dtype=object)
    return requests[column].astype("string").fillna("").to_numpy(dtype=object)


def _times(requests: pd.DataFrame, column: str) -> np.ndarray:
    if column not in requests.columns:
        return np.full(len(requests), np.nan)
    return requests[column].to_numpy(dtype=np.float64, na_value=np.nan)


def handed_off(requests: pd.DataFrame) -> np.ndarray:
    """Per request, whether it prefilled on one instance and decoded on another."""
    pf, dec = _names(requests, "prefill_instance"), _names(requests, "decode_instance")
    return np.asarray((pf != "") & (dec != "") & (pf != dec), dtype=bool)


def client_first_token_s(requests: pd.DataFrame) -> np.ndarray:
    """Per request, when the client saw the first token (s, NaN where unknown): first_token_s,
    or decode_start_s when a handed-off request started decoding later."""
    first = _times(requests, "first_token_s")
    later = _times(requests, "decode_start_s")
    split = handed_off(requests) & np.isfinite(later)
    return np.where(split, np.fmax(first, later), first)


def decode_queue_s(requests: pd.DataFrame) -> np.ndarray:
    """Per request, its wait for a decode slot after the KV arrived (s; 0 where it was not
    handed off or the transfer time is unknown, see the module docstring)."""
    gap = (_times(requests, "decode_start_s") - _times(requests, "first_token_s")
           - _times(requests, "kv_transfer_s"))
    ok = handed_off(requests) & np.isfinite(gap)
    return np.where(ok, np.clip(gap, 0.0, None), 0.0)
