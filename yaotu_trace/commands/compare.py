"""`trace compare`: several simulated deployments on one request chain, with remedy ledgers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from yaotu_trace.commands.load import Progress, TraceSource, open_trace
from yaotu_trace.data.report import Report, input_summary
from yaotu_trace.ingest.load import read_step_logs
from yaotu_trace.sim.compare import compare_scenarios
from yaotu_trace.sim.scenario import Scenario, load_scenario


def compare(
    trace: TraceSource,
    *,
    scenarios: Sequence[Path],
    model: str | None = None,
    gpu: str | None = None,
    kv_dtype: str | None = None,
    progress: Progress | None = None,
) -> Report:
    """`trace compare`: each scenario file (TOML) on the same requests, the first the baseline;
    `model`, `gpu` and `kv_dtype` fill in scenarios that do not name them."""
    defaults = Scenario(model=model, gpu=gpu, kv_dtype=kv_dtype)
    chosen = [defaults.merged(load_scenario(Path(path))) for path in scenarios]
    loaded = open_trace(trace, lazy_content=False, progress=progress, steps=False)
    section = compare_scenarios(loaded, chosen, progress=progress,
                                step_logs=read_step_logs([s.calibrate for s in chosen],
                                                         "--calibrate"))
    return Report(
        command="compare",
        input=input_summary(loaded),
        config={"scenarios": [str(p) for p in scenarios],
                "baseline": section.scenarios[0].scenario},
        sections={"comparison": section},
    )
