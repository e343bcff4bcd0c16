"""splitwise-sim request trace CSV (Mutinifni/splitwise-sim `traces/`): one request per row.

The simulator's README lists the columns: `request_id`, `request_type` (2 is generative LLM
inference, the only type it runs), `application_id` (the endpoint the request targets),
`arrival_timestamp` (s; its generator sums exponential inter-arrival gaps in seconds),
`batch_size` (not used), `prompt_size` and `token_size` (tokens to generate). Mapping:

- `request_id` → `request_id`;
- `arrival_timestamp` → `arrival_s`;
- `prompt_size` / `token_size` → `prompt_len` / `output_len`;
- `application_id` → `tenant`: the application is the client population a request comes
  from, which is what tenant groups by.

`request_type` and `batch_size` carry nothing the analysis uses and are not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from yaotu_trace.data.schema import RawTrace
from yaotu_trace.data.values import SOURCE_ROW
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec
from yaotu_trace.ingest.traces.csv_source import read_source_csv

REQUEST_ID: Final = "request_id"
APPLICATION_ID: Final = "application_id"
ARRIVAL: Final = "arrival_timestamp"
_PROMPT: Final = "prompt_size"
_OUTPUT: Final = "token_size"
_REQUIRED: Final = (ARRIVAL, _PROMPT, _OUTPUT)
_FIRST_DATA_LINE: Final = 2  # line 1 is the header


def read_splitwise(path: Path) -> RawTrace:
    """Map arrival_timestamp (s) → arrival_s, prompt_size/token_size → the lengths."""
    df = read_source_csv(path, _REQUIRED,
                         f"a splitwise-sim trace has {REQUEST_ID},request_type,"
                         f"{APPLICATION_ID},{ARRIVAL},batch_size,{_PROMPT},{_OUTPUT}",
                         dtype={REQUEST_ID: "string", APPLICATION_ID: "string"})
    out = pd.DataFrame(
        {
            "arrival_s": df[ARRIVAL],
            "prompt_len": df[_PROMPT],
            "output_len": df[_OUTPUT],
            SOURCE_ROW: np.arange(_FIRST_DATA_LINE, len(df) + _FIRST_DATA_LINE),
        }
    )
    if REQUEST_ID in df.columns:
        out["request_id"] = df[REQUEST_ID].str.strip()
    if APPLICATION_ID in df.columns:
        out["tenant"] = df[APPLICATION_ID].str.strip()
    return RawTrace(requests=out, format_name="splitwise", row_label="line",
                    source_names={"arrival_s": ARRIVAL, "prompt_len": _PROMPT,
                                  "output_len": _OUTPUT, "request_id": REQUEST_ID})


def _is_splitwise_header(columns: set[str]) -> bool:
    return set(_REQUIRED) <= columns


FORMAT = TraceFormatSpec(
    name=TraceFormat.SPLITWISE,
    description="splitwise-sim request trace CSV: arrivals in s, application, two lengths",
    reader=read_splitwise,
    row_label="line",
    csv_header=_is_splitwise_header,
)
