"""The diagnosis options of `diagnose`, `check`, `report` and `diff` checked before any work:
the engine settings and thresholds they give and the zone of a server log's times, with which
the telemetry they name is read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

from yaotu_trace.axes.base import EngineSettings
from yaotu_trace.axes.thresholds import Thresholds, parse_threshold_options
from yaotu_trace.catalog.gpus import DEFAULT_LINK_GBPS, find_gpu
from yaotu_trace.catalog.models import find_model, model_kv_bytes_per_token
from yaotu_trace.catalog.units import parse_capacity
from yaotu_trace.data.engine_metrics import EngineMetrics
from yaotu_trace.diagnosis.options import DiagnosisOptions
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.rules import rules_for

# Model FLOP utilisation assumed when the ledger turns FLOPs into GPU-seconds (cost-model §2.4).
LEDGER_MFU = 0.5
# KV block size of the diagnosis when none is given, tokens.
DEFAULT_BLOCK_TOKENS = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class DiagnosisSetup:
    """The diagnosis options checked: the settings and thresholds a run is judged under, and
    the zone of its server logs' times."""

    settings: EngineSettings
    thresholds: Thresholds
    zone: tzinfo | None = None

    def telemetry(self, path: str | Path | None) -> EngineMetrics | None:
        """The engine telemetry at `path` (`--metrics`), read now; None when not given."""
        if path is None:
            return None
        # NOTE: imported here, as the readers import pandas, which a diagnosis of a trace
        # read without it need not.
        from yaotu_trace.ingest.load import read_metrics

        return read_metrics(Path(path), zone=self.zone)


def setup_diagnosis(options: DiagnosisOptions) -> DiagnosisSetup:
    """Check every diagnosis option before any work: the zone first, then the settings."""
    zone = log_zone_of(options.log_tz)
    settings, thresholds = engine_settings(options)
    return DiagnosisSetup(settings=settings, thresholds=thresholds, zone=zone)


def engine_settings(options: DiagnosisOptions) -> tuple[EngineSettings, Thresholds]:
    """Check the diagnosis options before any work and turn them into engine settings and
    thresholds; an option left out (None) keeps the setting's default."""
    thresholds = parse_threshold_options(list(options.thresholds))
    if options.preset is not None:
        rules_for(options.preset)  # an unknown preset is a one-line ConfigError before any work
    spec, model_kv = None, None
    if options.model is not None or options.kv_dtype is not None:
        model_kv = model_kv_bytes_per_token(options.model, options.kv_dtype,
                                            options.kv_bytes_per_token)[1]
        spec = None if options.model is None else find_model(options.model)
    gpu_spec = None if options.gpu is None else find_gpu(options.gpu)
    kv_b = options.kv_bytes_per_token or model_kv
    block = options.block_size_tokens or DEFAULT_BLOCK_TOKENS
    settings = EngineSettings(
        block_size_tokens=block,
        block_size_given=options.block_size_tokens is not None,
        kv_capacity_tokens=_capacity_tokens(options.kv_capacity, block, kv_b),
        kv_capacity_given=options.kv_capacity is not None,
        max_num_seqs=options.max_num_seqs,
        max_batched_tokens=options.max_batched_tokens,
        kv_bytes_per_token=kv_b,
        active_params=None if spec is None else spec.active_nonembedding_params,
        model=None if spec is None else spec.name,
        link_gbps=DEFAULT_LINK_GBPS if options.link_gbps is None else options.link_gbps,
        replay_preset=options.preset,
        gpu=None if gpu_spec is None else gpu_spec.name,
        gpu_flops_per_s=None if gpu_spec is None else gpu_spec.bf16_flops * LEDGER_MFU,
        gpus_per_replica=1 if options.tp is None else options.tp,
        replay_jobs=options.jobs,
        replay_dask=options.dask,
    )
    return settings, thresholds


def log_zone_of(log_tz: str | None) -> tzinfo | None:
    """The zone `--log-tz` names (None: UTC), refused before anything is read."""
    if log_tz is None:
        return None
    from yaotu_trace.ingest.telemetry.serverlog import log_zone  # only for a zone given

    return log_zone(log_tz)


def _capacity_tokens(kv_capacity: str | None, block_tokens: int,
                     kv_bytes_per_token: int | None) -> float | None:
    """`--kv-capacity` (blocks, tokens or bytes) in tokens; None when unlimited or not given."""
    if kv_capacity is None:
        return None
    cap = parse_capacity(kv_capacity)
    if cap.unlimited:
        return None
    if cap.unit == "blocks":
        tokens: float | None = float(int(cap.amount) * block_tokens)
    else:
        as_tokens = cap.to_tokens(kv_bytes_per_token)
        tokens = None if as_tokens is None else float(as_tokens)
    if tokens is not None and tokens < block_tokens:
        raise ConfigError(f"--kv-capacity {kv_capacity!r} holds less than one {block_tokens}-token "
                          "block; give a larger capacity")
    return tokens
