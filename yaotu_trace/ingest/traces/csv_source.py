"""A published trace's CSV, read once for every CSV format: stripped header names, and a
one-line refusal naming the missing columns, what the file has, and what the format expects."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from yaotu_trace.data.canonical import read_csv_frame
from yaotu_trace.data.values import names_of
from yaotu_trace.errors import TraceSchemaError


def read_source_csv(path: Path, required: Sequence[str], layout: str, *,
                    dtype: dict[str, Any] | None = None) -> pd.DataFrame:
    """The CSV at `path` with its header names stripped; `layout` ends the error when a
    `required` column is missing ("a Vidur trace has arrived_at,...")."""
    df = read_csv_frame(path, dtype=dtype, skipinitialspace=True)
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceSchemaError(
            f"{path}: missing column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(c) for c in missing)} (have: {names_of(df.columns)}); {layout}"
        )
    return df
