"""The names of `trace generate`'s synthetic workloads, apart from their (heavy) generators.

The command line needs the names before any work; the generators in `yaotu_trace.sim.generate`
need NumPy, pandas and pyarrow.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

DEFAULT_MODEL: Final = "llama-3.1-8b"


class WorkloadKind(StrEnum):
    """Named synthetic workloads; `trace generate SCENARIO` takes these names."""

    CHAT = "chat"
    MULTI_TENANT = "multi-tenant"
    RAG = "rag"
    BURSTY = "bursty"
    AGENTIC = "agentic"
    LONG_PREFILL = "long-prefill"
    DIAG_HEALTHY = "diag-healthy"
    DIAG_BURST = "diag-burst"
    DIAG_DISPATCH = "diag-dispatch"
    DIAG_KV_CHURN = "diag-kv-churn"
    DIAG_LONG_PREFILL = "diag-long-prefill"
    DIAG_PREFIX_RECOMPUTE = "diag-prefix-recompute"
    DIAG_MINUTE_BURST = "diag-minute-burst"
