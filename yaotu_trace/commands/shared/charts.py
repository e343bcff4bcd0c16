"""The console's pictures of a read trace (`trace analyze`, `trace diagnose`)."""

from __future__ import annotations

import numpy as np

from yaotu_trace.data.charts import TerminalCharts
from yaotu_trace.data.figures import Series
from yaotu_trace.data.outcome import successful_mask
from yaotu_trace.data.prefix_reuse import ReuseOverview
from yaotu_trace.data.schema import Trace
from yaotu_trace.profile.workload_figures import arrival_series, length_distribution


def terminal_charts(trace: Trace, *, reuse: ReuseOverview | None = None, lengths: bool = True,
                    kv: Series | None = None) -> TerminalCharts:
    """The console's pictures of a read trace (`data/charts.TerminalCharts`): arrivals
    over time and, with `lengths`, the prompt and output lengths of the successful requests
    (as `profile.workload_figures` computes them); the capacity points of the prefix-reuse
    section `reuse` when it has them; the KV series `kv` (`profile.figures.kv_series`)."""
    df = trace.requests
    arrivals = prompt = output = None
    if len(df):
        prompt_len = df["prompt_len"].to_numpy(dtype=np.float64)
        output_len = df["output_len"].to_numpy(dtype=np.float64)
        if trace.has_arrivals:
            arrivals = arrival_series(df["arrival_s"].to_numpy(dtype=np.float64), prompt_len,
                                      output_len)
        if lengths:
            ok = successful_mask(df)
            prompt = length_distribution(prompt_len[ok], "prompt tokens")
            output = length_distribution(output_len[ok], "output tokens")
    capacity = reuse if reuse is not None and reuse.available else None
    return TerminalCharts(arrivals=arrivals, prompt_len=prompt, output_len=output,
                          capacity=capacity, kv=kv)
