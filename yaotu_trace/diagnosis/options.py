"""The diagnosis options: how a run is judged, as `trace diagnose`, `check`, `report` and
`diff` take them, in one frozen value.

The command line fills one `DiagnosisOptions` from its flags and the Python API takes the same
value, so an option means the same in every command that judges a run. The values are the
options as given (names, texts); `commands/settings.py` checks them before any work and turns
them into the axes' `EngineSettings` and `Thresholds`. Nothing here is imported but the standard
library, so that the command line can build the value before it loads any analysis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True, kw_only=True)
class DiagnosisOptions:
    """How a run is judged: the deployment it ran on, its telemetry and the thresholds.

    None leaves an option unknown (the diagnosis then infers it from the run, or leaves the
    quantity that needs it out). `metrics` is the engine telemetry of the run judged (of the
    run after the change for `diff`, `check --before` and `report --before`), `log_tz` the zone
    of a server log's times (`--log-tz`: Asia/Shanghai, +08:00; UTC when None). `kv_capacity`
    is the KV pool of one instance as `--kv-capacity` takes it (20000 blocks, 3.2Mtok, 40GiB),
    `thresholds` are `NAME=VALUE` overrides (docs/rules.md), `jobs`/`dask` where the prefix
    replay of the prefix-reuse axis runs (the numbers do not depend on it).
    """

    metrics: Path | None = None
    log_tz: str | None = None
    model: str | None = None
    gpu: str | None = None
    # GPUs per instance (`--tp`): a replica's prefill rate and the GPU-seconds it frees.
    tp: int | None = None
    kv_bytes_per_token: int | None = None
    kv_dtype: str | None = None
    kv_capacity: str | None = None
    block_size_tokens: int | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    link_gbps: float | None = None
    preset: str | None = None
    thresholds: Sequence[str] = ()
    jobs: int = 1
    dask: str | None = None
