"""Make the vLLM telemetry fixtures of this folder with vLLM 0.33.0's own metrics code.

Nothing here is hand-written log or /metrics text: every stats line is written by vLLM's
`LoggingStatLogger` through vLLM's own logging configuration, every /metrics body is
`prometheus_client.generate_latest()` of the registry vLLM's `PrometheusStatLogger` filled,
and the KV-transfer line is `KVConnectorLogging` reducing `NixlKVConnectorStats`. What this
script writes itself is the input: the `SchedulerStats` / `IterationStats` that vLLM's engine
would hand `StatLoggerManager.record()`, with known numbers (the tables below, README.md and
`expected.json`).

Made in a separate virtualenv, not the project's (vllm 0.33.0 pins torch==2.14.0, a CUDA
build; the metrics code runs on the CPU build of torch 2.13.0 that this machine has on disk,
so vllm is installed without its dependencies and only what its metrics code imports is
added):

    python3 -m venv /tmp/venv-vllm
    /tmp/venv-vllm/bin/pip install torch==2.13.0
    /tmp/venv-vllm/bin/pip install --no-deps vllm==0.33.0
    /tmp/venv-vllm/bin/pip install prometheus_client msgspec python-json-logger pyyaml \
        psutil cachetools regex pydantic pyzmq cloudpickle "transformers<5.21.0,>=5.16.1" \
        "huggingface_hub>=1.31.0" "tokenizers>=0.23.2" safetensors py-cpuinfo blake3 \
        requests tqdm numpy orjson cbor2 aiohttp openai-harmony openai pillow pybase64 \
        uvloop xgrammar fastapi partial-json-parser llguidance einops
    cd /tmp && /tmp/venv-vllm/bin/python /work/main/tests/data/telemetry/vllm/make_fixtures.py

(run it from a folder without stray `*.py` files: a `/tmp/inspect.py` shadows the standard
library). The script sets VLLM_TARGET_DEVICE=cpu itself: vLLM's CUDA wheel has no device to
find here, and with it vLLM's `CpuPlatform` builds a real `VllmConfig` for a tiny Llama
config.json the script writes (no weights, no tokenizer, nothing fetched). The GPU files then
swap in `DeviceConfig(device="cuda")`, the one field `LoggingStatLogger` reads to name the
KV pool ("GPU KV cache usage"); the CPU file keeps the CPU platform's own ("CPU ...").

Usage: `make_fixtures.py [files|live|all] [--out FOLDER]`. `files` (default) writes every
file but the two Prometheus-server exports, on a simulated clock (`time.time` and
`time.monotonic` patched, so throughputs and the log's and the snapshots' times are exact and
every run writes the same numbers; only the `process_*` / `python_*` series of
prometheus_client's default collectors vary). `live` feeds the same engine-0 sequence in real
time to a `prometheus_client.start_http_server` exporter on 127.0.0.1 while a real Prometheus
server (Debian's `prometheus` 2.42, started by this script with its data in a temporary
folder, listening on 127.0.0.1 only) scrapes it every second, then saves a range query and an
instant query from its HTTP API.
"""
# ruff: noqa: E402

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["TZ"] = "UTC"  # vLLM's log times are local times: make local UTC
time.tzset()

import prometheus_client
import torch
import vllm
import vllm.logger as vllm_logger
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    VllmConfig,
)
from vllm.config.logging import LoggingConfig
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats
from vllm.v1.core.kv_cache_utils import update_kv_cache_capacity
from vllm.v1.engine import FinishReason
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.metrics.cache_hit_source import CacheHitSource
from vllm.v1.metrics.loggers import LoggingStatLogger, StatLoggerManager
from vllm.v1.metrics.stats import (
    KV_FETCH_STAGES,
    IterationStats,
    PrefillStats,
    PrefixCacheStats,
    RequestStateStats,
    SchedulerStats,
)

HERE = Path(__file__).resolve().parent

# The simulated run: engine start 2026-12-03 10:15:00 UTC, one stats line per 10 s
# (VLLM_LOG_STATS_INTERVAL's default), two engine steps per interval at +4 s and +9 s.
START_S = datetime(2026, 12, 3, 10, 15, 0, tzinfo=UTC).timestamp()
INTERVAL_S = 10.0
STEP_A_S, STEP_B_S = 4.0, 9.0

MODEL_NAME = "yaotu/tiny-llama-fixture"
MAX_MODEL_LEN = 4096
BLOCK_SIZE = 16
NUM_GPU_BLOCKS = 2048
MAX_TOKENS = 64  # every request's max_tokens
# Every finished request: queued 0.25 s, prefill 0.125 s, decode 1.0 s + 0.5 s per preemption;
# 40 tokens and "stop" when preempted fewer than 2 times, else 64 tokens and "length".
FINISHED_QUEUE_S = 0.25
FINISHED_PREFILL_S = 0.125
FINISHED_STOP_TOKENS = 40

# pids in the log prefix, fixed so that every run writes the same lines.
API_SERVER = ("APIServer", "MainProcess", 2781)


def engine_core(dp_rank: int | None) -> tuple[str, str, int]:
    """vLLM's EngineCore process identity: `EngineCore` alone, `EngineCore_DP<n>` with DP."""
    name = "EngineCore" if dp_rank is None else f"EngineCore_DP{dp_rank}"
    return name, name, 2950 + (dp_rank or 0)


@dataclass(frozen=True)
class Transfer:
    """One NIXL transfer as `nixlXferTelemetry` reports it (µs, bytes)."""

    xfer_us: int
    post_us: int
    nbytes: int
    descriptors: int


@dataclass(frozen=True)
class Interval:
    """What one engine does in one 10-s logging interval.

    Step A (+4 s) admits the new requests (prefix-cache lookups, prefill split by source,
    one first token and TTFT each) and half the decode tokens; step B (+9 s) the other half
    and the finished requests. Both steps report the same gauges (running, waiting, KV).
    """

    prompt: int  # prompt tokens of each new request
    hits: tuple[int, ...]  # local prefix-cache hit tokens, one per new request
    ttft_s: tuple[float, ...]  # one per new request
    generation_tokens: int  # including the new requests' first tokens
    itl_s: float  # every inter-token latency of the interval
    preemptions: tuple[int, int]  # in step A, step B
    finished: tuple[int, ...]  # per finishing request: its number of preemptions
    running: int
    waiting: int  # SchedulerStats.num_waiting_reqs (waiting for capacity)
    deferred: int  # SchedulerStats.num_skipped_waiting_reqs (deferred)
    kv_usage: float
    # Disaggregated (KV connector) runs only.
    ext_queries: tuple[int, ...] = ()  # one per new request
    ext_hits: tuple[int, ...] = ()  # one per new request
    kv_fetch: tuple[int, int, int] = (0, 0, 0)  # waiting_to_start, in_progress, completed
    transfers: tuple[Transfer, ...] = ()
    failed_transfers: int = 0
    expired_reqs: int = 0

    @property
    def new_requests(self) -> int:
        return len(self.hits)

    @property
    def itl_count(self) -> int:
        return self.generation_tokens - self.new_requests


Q4 = (0.125,) * 4
ENGINE0 = (  # the single engine of the main files; engine 0 of the two-engine files
    Interval(50, (0, 0, 0, 0), Q4, 40, 1 / 64, (0, 0), (), 4, 0, 0, 0.12),
    Interval(50, (0, 0, 25, 25), Q4, 120, 1 / 64, (0, 0), (0, 0), 8, 2, 0, 0.35),
    Interval(50, (25, 25, 0, 0), (0.25, 0.25, 0.5, 0.5), 200, 1 / 32, (2, 1), (0, 0, 1),
             12, 6, 1, 0.78),
    Interval(50, (25, 25, 25, 25), (0.5,) * 4, 240, 1 / 16, (5, 4), (0, 1), 12, 9, 2, 0.97),
    Interval(50, (25, 0), (0.25, 0.25), 160, 1 / 32, (2, 2), (2, 2, 2, 3), 10, 3, 1, 0.64),
    Interval(50, (0, 25), (0.25, 0.25), 80, 1 / 64, (0, 0), (2, 3, 0), 6, 2, 1, 0.31),
)
T1 = 0.0625
ENGINE1 = (  # engine 1 of the two-engine files
    Interval(60, (0, 0), (T1, T1), 20, 1 / 64, (0, 0), (), 2, 0, 0, 0.10),
    Interval(60, (30, 30), (T1, T1), 60, 1 / 64, (1, 0), (0,), 4, 0, 0, 0.25),
    Interval(60, (30, 30), (T1, T1), 90, 1 / 64, (0, 0), (0, 1), 5, 1, 0, 0.40),
    Interval(60, (30, 30), (T1, T1), 100, 1 / 64, (1, 1), (0, 0), 5, 2, 0, 0.55),
    Interval(60, (60,), (T1,), 70, 1 / 64, (0, 1), (2, 0), 4, 0, 0, 0.45),
    Interval(60, (60,), (T1,), 40, 1 / 64, (0, 0), (1,), 3, 0, 0, 0.30),
)
MB8, MB4 = 8 * 2**20, 4 * 2**20
KV_DECODE = (  # a NixlConnector (kv_both) decode instance pulling prefills' KV
    Interval(512, (0, 0, 0, 0), (0.25,) * 4, 64, 1 / 64, (0, 0), (), 2, 0, 2, 0.20,
             ext_queries=(512,) * 4, ext_hits=(496,) * 4, kv_fetch=(0, 2, 0),
             transfers=(Transfer(2000, 100, MB8, 64),) * 4),
    Interval(256, (64, 64, 0, 0, 0, 0), (0.5,) * 6, 126, 1 / 64, (1, 0), (), 6, 1, 3, 0.45,
             ext_queries=(192, 192, 256, 256, 256, 256),
             ext_hits=(176, 176, 240, 240, 240, 240), kv_fetch=(1, 2, 0),
             transfers=tuple(Transfer(us, 200, MB4, 32)
                             for us in (1000, 2000, 3000, 4000, 5000, 6000))),
    Interval(256, (), (), 80, 1 / 64, (0, 0), (0, 0, 0, 0, 0, 0), 4, 0, 0, 0.30,
             failed_transfers=1, expired_reqs=1),
)


# --- the simulated clock -----------------------------------------------------------------


class Clock:
    """`time.time()` and `time.monotonic()` for vLLM, logging and prometheus_client."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    @contextlib.contextmanager
    def patched(self) -> Iterator[Clock]:
        with mock.patch("time.time", self.time), mock.patch("time.monotonic", self.time):
            yield self


class _Identity:
    """The pid and Python process name a log record carries (vLLM's prefix shows the pid)."""

    pid = API_SERVER[2]
    process_name = API_SERVER[1]


def _identity_factory(inner: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = inner(*args, **kwargs)
        record.process = _Identity.pid
        record.processName = _Identity.process_name
        return record

    return make


@contextlib.contextmanager
def as_process(identity: tuple[str, str, int]) -> Iterator[None]:
    """Log as vLLM process `identity` (vLLM name, Python process name, pid): what vLLM's
    `decorate_logs(name)` does in that process."""
    vllm_name, process_name, pid = identity
    vllm_logger.set_vllm_process_name(vllm_name)
    _Identity.pid, _Identity.process_name = pid, process_name
    try:
        yield
    finally:
        vllm_logger.set_vllm_process_name(API_SERVER[0])
        _Identity.pid, _Identity.process_name = API_SERVER[2], API_SERVER[1]


@contextlib.contextmanager
def vllm_logging_to(path: Path, config: LoggingConfig) -> Iterator[None]:
    """vLLM's own logging configuration (`vllm.logger`, as `vllm serve` applies it), its
    handler's `ext://sys.stdout` stream being `path`: `vllm serve ... > path`."""
    vllm_logger._print_info_once.cache_clear()  # a fresh process: *_once lines log again
    with path.open("w", encoding="utf-8") as out:
        saved = sys.stdout
        sys.stdout = out
        try:
            # configure_logging() without its platform warnings (this host's, not the run's).
            vllm_logger._configure_vllm_root_logger(config)
        finally:
            sys.stdout = saved
        factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_identity_factory(factory))
        try:
            yield
        finally:
            logging.setLogRecordFactory(factory)
            for handler in logging.getLogger("vllm").handlers:
                handler.flush()
            vllm_logger._configure_vllm_root_logger(LoggingConfig(log_level="WARNING"))


# The python-json-logger configuration of vLLM's logging_configuration.md, Example 1
# (VLLM_LOGGING_CONFIG_PATH / --logging-config.pylogging_config_file).
DOCS_JSON_CONFIG = {
    "formatters": {"json": {"class": "pythonjsonlogger.jsonlogger.JsonFormatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "level": "INFO",
            "stream": "ext://sys.stdout",
        }
    },
    "loggers": {"vllm": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    "version": 1,
}


# --- vLLM's configuration ----------------------------------------------------------------


def tiny_model_dir() -> Path:
    """A Llama config.json with no weights: enough for vLLM's `ModelConfig`."""
    folder = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": MAX_MODEL_LEN,
        "rms_norm_eps": 1e-5, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
    }))
    return folder


def make_config(model_dir: Path, device: str, *, nixl: bool = False) -> VllmConfig:
    model = ModelConfig(model=str(model_dir), served_model_name=MODEL_NAME,
                        skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN)
    kv_transfer = KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both") \
        if nixl else None
    config = VllmConfig(model_config=model, cache_config=CacheConfig(block_size=BLOCK_SIZE),
                        kv_transfer_config=kv_transfer)
    if device != config.device_config.device_type:
        config.device_config = DeviceConfig(device=device)
    return config


class PreemptionsKeptStatLogger(LoggingStatLogger):
    """vLLM 0.33's `LoggingStatLogger` with the one-line fix of vllm PR #38452 (open, not in
    0.33.0): `log()` zeroes `num_preemptions` in `_update_stats()` before it builds the line,
    so 0.33.0 never writes its "Preemptions: N" part. Used only for
    `vllm_server_preemptions_pr38452.log`, to show the part where it stands in the line."""

    def _update_stats(self) -> None:
        preemptions = self.num_preemptions
        super()._update_stats()
        self.num_preemptions = preemptions

    def log(self) -> None:
        super().log()
        self.num_preemptions = 0


def start_engine(config: VllmConfig, engines: list[int], dp: bool,
                 stat_logger: type[LoggingStatLogger] | None = None) -> StatLoggerManager:
    """What the EngineCore(s) log once the KV cache is sized, and the API server's
    `StatLoggerManager` with its `log_engine_initialized()`."""
    kv_cache = KVCacheConfig(
        num_blocks=NUM_GPU_BLOCKS, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(
            layer_names=[f"model.layers.{i}.self_attn.attn" for i in range(2)],
            kv_cache_spec=FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=2,
                                            head_size=16, dtype=torch.float32))])
    for engine in engines:
        with as_process(engine_core(engine if dp else None)):
            vllm_logger._print_info_once.cache_clear()  # one process per engine
            update_kv_cache_capacity(config, kv_cache)
    config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
    if stat_logger is None:
        manager = StatLoggerManager(config, engine_idxs=engines)
    else:
        manager = StatLoggerManager(config, engine_idxs=engines,
                                    custom_stat_loggers=[stat_logger],
                                    enable_default_loggers=False)
    manager.log_engine_initialized()
    return manager


# --- the stats vLLM's engine would report ------------------------------------------------


def step_a(iv: Interval) -> tuple[SchedulerStats, IterationStats]:
    sched = gauges(iv)
    it = IterationStats()
    connector = PrefixCacheStats() if iv.ext_queries else None
    for i, hits in enumerate(iv.hits):
        ext_hits = iv.ext_hits[i] if iv.ext_hits else 0
        sched.prefix_cache_stats.record(num_tokens=iv.prompt, num_hits=hits, preempted=False)
        if connector is not None:
            connector.record(num_tokens=iv.ext_queries[i], num_hits=ext_hits, preempted=False,
                             hits_by_source={CacheHitSource.P2P: ext_hits})
        prefill = PrefillStats()
        prefill.set(num_prompt_tokens=iv.prompt, num_local_cached_tokens=hits,
                    num_external_cached_tokens=ext_hits)
        it.prompt_token_stats.update_from_output(prefill)
        it.time_to_first_tokens_iter.append(iv.ttft_s[i])
    sched.connector_prefix_cache_stats = connector
    first_half = iv.itl_count // 2
    it.num_generation_tokens = iv.new_requests + first_half
    it.inter_token_latencies_iter = [iv.itl_s] * first_half
    it.num_preempted_reqs = iv.preemptions[0]
    if iv.transfers or iv.failed_transfers or iv.expired_reqs:
        nixl = NixlKVConnectorStats()
        for t in iv.transfers:
            nixl.record_transfer(SimpleNamespace(xferDuration=t.xfer_us, postDuration=t.post_us,
                                                 totalBytes=t.nbytes, descCount=t.descriptors))
        for _ in range(iv.failed_transfers):
            nixl.record_failed_transfer()
        for _ in range(iv.expired_reqs):
            nixl.record_kv_expired_req()
        sched.kv_connector_stats = nixl.data
    return sched, it


def step_b(iv: Interval, prompt: int, request_ids: Iterator[int]
           ) -> tuple[SchedulerStats, IterationStats]:
    sched = gauges(iv)
    it = IterationStats()
    rest = iv.itl_count - iv.itl_count // 2
    it.num_generation_tokens = rest
    it.inter_token_latencies_iter = [iv.itl_s] * rest
    it.num_preempted_reqs = iv.preemptions[1]
    for preemptions in iv.finished:
        length = preemptions >= 2
        decode_s = 1.0 + 0.5 * preemptions
        e2e_s = FINISHED_QUEUE_S + FINISHED_PREFILL_S + decode_s
        arrival = it.iteration_timestamp - e2e_s
        state = RequestStateStats(
            num_generation_tokens=MAX_TOKENS if length else FINISHED_STOP_TOKENS,
            num_preemptions=preemptions, arrival_time=arrival, queued_ts=arrival,
            scheduled_ts=arrival + FINISHED_QUEUE_S,
            first_token_ts=arrival + FINISHED_QUEUE_S + FINISHED_PREFILL_S,
            last_token_ts=it.iteration_timestamp)
        it.update_from_finished_request(
            finish_reason=FinishReason.LENGTH if length else FinishReason.STOP,
            request_id=f"cmpl-{next(request_ids):04d}", num_prompt_tokens=prompt,
            max_tokens_param=MAX_TOKENS, req_stats=state, num_cached_tokens=0)
    return sched, it


def gauges(iv: Interval) -> SchedulerStats:
    fetch = dict(zip(KV_FETCH_STAGES, iv.kv_fetch, strict=True)) if any(iv.kv_fetch) else {}
    return SchedulerStats(num_running_reqs=iv.running, num_waiting_reqs=iv.waiting,
                          num_skipped_waiting_reqs=iv.deferred, kv_cache_usage=iv.kv_usage,
                          num_kv_fetch_reqs_by_stage=fetch)


def run(manager: StatLoggerManager, engines: dict[int, tuple[Interval, ...]],
        wait_until: Callable[[float], None],
        on_log: Callable[[int, float], None] = lambda k, t: None) -> None:
    """Feed every engine's intervals to `manager`: record() per step, log() per interval
    (`on_log(k, t)` after log() of interval k at time t)."""
    ids = iter(range(1, 10_000))
    n = max(len(ivs) for ivs in engines.values())
    for k in range(n):
        base = START_S + k * INTERVAL_S
        wait_until(base + STEP_A_S)
        for idx, ivs in engines.items():
            sched, it = step_a(ivs[k])
            manager.record(scheduler_stats=sched, iteration_stats=it, engine_idx=idx)
        wait_until(base + STEP_B_S)
        for idx, ivs in engines.items():
            sched, it = step_b(ivs[k], ivs[k].prompt, ids)
            manager.record(scheduler_stats=sched, iteration_stats=it, engine_idx=idx)
        wait_until(base + INTERVAL_S)
        manager.log()
        on_log(k, base + INTERVAL_S)


def scrape() -> bytes:
    """One /metrics body: vLLM's single-API-server /metrics serves the global registry."""
    return prometheus_client.generate_latest(prometheus_client.REGISTRY)


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y%m%dT%H%M%SZ")


# --- the files ---------------------------------------------------------------------------


def simulated(out: Path, model_dir: Path, name: str, *, device: str = "cuda",
              logging_config: LoggingConfig | None = None, dp: bool = False,
              nixl: bool = False, scrapes: Path | None = None,
              stat_logger: type[LoggingStatLogger] | None = None) -> bytes:
    """One simulated run writing the log `name`; returns the last /metrics body."""
    engines = {0: ENGINE0, 1: ENGINE1} if dp else {0: KV_DECODE if nixl else ENGINE0}
    clock = Clock(START_S)
    config = make_config(model_dir, device, nixl=nixl)
    last = b""
    with clock.patched(), vllm_logging_to(out / name, logging_config or LoggingConfig(
            log_level="INFO")), as_process(API_SERVER):
        manager = start_engine(config, list(engines), dp, stat_logger)

        def wait_until(t: float) -> None:
            clock.now = t

        def on_log(k: int, t: float) -> None:
            nonlocal last
            last = scrape()
            if scrapes is not None:
                (scrapes / f"{stamp(t)}.prom").write_bytes(last)

        if scrapes is not None:
            (scrapes / f"{stamp(START_S)}.prom").write_bytes(scrape())
        run(manager, engines, wait_until, on_log)
    return last


def write_files(out: Path) -> None:
    model_dir = tiny_model_dir()
    try:
        scrapes = out / "scrapes"
        shutil.rmtree(scrapes, ignore_errors=True)
        scrapes.mkdir(parents=True)
        one = simulated(out, model_dir, "vllm_server.log", scrapes=scrapes)
        (out / "metrics_one_engine.prom").write_bytes(one)
        simulated(out, model_dir, "vllm_server_cpu.log", device="cpu")
        simulated(out, model_dir, "vllm_server_xpu.log", device="xpu")
        simulated(out, model_dir, "vllm_server_json.log",
                  logging_config=LoggingConfig(log_level="INFO", formatter="json"))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(DOCS_JSON_CONFIG, fh)
        try:
            simulated(out, model_dir, "vllm_server_json_docs_example.log",
                      logging_config=LoggingConfig(pylogging_config_file=fh.name))
        finally:
            os.unlink(fh.name)
        simulated(out, model_dir, "vllm_server_preemptions_pr38452.log",
                  stat_logger=PreemptionsKeptStatLogger)
        two = simulated(out, model_dir, "vllm_server_dp2.log", dp=True)
        (out / "metrics_two_engines.prom").write_bytes(two)
        kv = simulated(out, model_dir, "vllm_kv_transfer.log", nixl=True)
        (out / "metrics_kv_transfer.prom").write_bytes(kv)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    (out / "expected.json").write_text(json.dumps(expected(), indent=1) + "\n")


# --- the live run: a real Prometheus server scraping vLLM's registry -------------------------

EXPORTER_PORT = 18765
PROMETHEUS_PORT = 19090
PROMETHEUS = "/usr/bin/prometheus"


def _get(path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{PROMETHEUS_PORT}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def live(out: Path) -> None:
    global START_S
    model_dir = tiny_model_dir()
    data = Path(tempfile.mkdtemp(prefix="prom-live-"))
    (data / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{EXPORTER_PORT}']\n")
    config = make_config(model_dir, "cuda")
    with as_process(API_SERVER):
        manager = start_engine(config, [0], dp=False)
    server, thread = prometheus_client.start_http_server(EXPORTER_PORT, addr="127.0.0.1")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={data / 'prometheus.yml'}",
         f"--storage.tsdb.path={data / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"],
        stdout=subprocess.DEVNULL, stderr=(data / "prometheus.err").open("w"))
    try:
        begin = time.time()
        for _ in range(60):
            time.sleep(1)
            with contextlib.suppress(OSError):
                targets = _get("/api/v1/targets")["data"]["activeTargets"]
                if targets and targets[0]["health"] == "up":
                    break
        else:
            raise RuntimeError("Prometheus did not scrape the exporter")
        START_S = math.ceil(time.time()) + 5.0  # a few scrapes of the idle engine first

        def wait_until(t: float) -> None:
            time.sleep(max(0.0, t - time.time()))

        run(manager, {0: ENGINE0}, wait_until)
        end = START_S + len(ENGINE0) * INTERVAL_S + 5.0
        wait_until(end)
        query = '{__name__=~"vllm.*",__name__!~".*_bucket|.*_created"}'
        ranged = _get("/api/v1/query_range", query=query, start=f"{math.floor(begin)}",
                      end=f"{end:.0f}", step="1")
        (out / "prometheus_range_vllm.json").write_text(json.dumps(ranged) + "\n")
        instant = _get("/api/v1/query", query='{__name__=~"vllm.*"}', time=f"{end:.0f}")
        (out / "prometheus_instant_vllm.json").write_text(json.dumps(instant) + "\n")
        live_times = {"begin_s": math.floor(begin), "first_step_s": START_S + STEP_A_S,
                      "end_s": end, "start_s": START_S}
        (out / "prometheus_live_times.json").write_text(json.dumps(live_times) + "\n")
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        server.shutdown()
        thread.join(timeout=10)
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(model_dir, ignore_errors=True)


# --- the numbers fed, as a reader must give them back ---------------------------------------


def totals(ivs: tuple[Interval, ...], prompt_finished: int) -> dict[str, Any]:
    queries = sum(iv.prompt * iv.new_requests for iv in ivs)
    hits = sum(sum(iv.hits) for iv in ivs)
    ext_q = sum(sum(iv.ext_queries) for iv in ivs)
    ext_h = sum(sum(iv.ext_hits) for iv in ivs)
    finished = [p for iv in ivs for p in iv.finished]
    ttft = [t for iv in ivs for t in iv.ttft_s]
    itl_sum = sum(iv.itl_s * iv.itl_count for iv in ivs)
    itl_n = sum(iv.itl_count for iv in ivs)
    e2e = [FINISHED_QUEUE_S + FINISHED_PREFILL_S + 1.0 + 0.5 * p for p in finished]
    last = ivs[-1]
    lines = []
    hit_q = hit_h = ext_qq = ext_hh = 0
    for iv in ivs:
        hit_q += iv.prompt * iv.new_requests
        hit_h += sum(iv.hits)
        ext_qq += sum(iv.ext_queries)
        ext_hh += sum(iv.ext_hits)
        computed = iv.prompt * iv.new_requests - sum(iv.hits) - sum(iv.ext_hits)
        lines.append({
            "avg_prompt_throughput": computed / INTERVAL_S,
            "avg_generation_throughput": iv.generation_tokens / INTERVAL_S,
            "running": iv.running, "waiting": iv.waiting + iv.deferred,
            "deferred": iv.deferred or None, "preemptions": sum(iv.preemptions) or None,
            "kv_cache_usage_pct": round(iv.kv_usage * 100, 1),
            "prefix_cache_hit_rate_pct": round(100 * hit_h / hit_q, 1) if hit_q else None,
            "external_prefix_cache_hit_rate_pct":
                round(100 * ext_hh / ext_qq, 1) if ext_qq else None,
            "kv_fetch": list(iv.kv_fetch) if any(iv.kv_fetch) else None,
        })
    return {
        "intervals": len(ivs),
        "preemptions_total": sum(sum(iv.preemptions) for iv in ivs),
        "prefix_cache_queries_total": queries,
        "prefix_cache_hits_total": hits,
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "external_prefix_cache_queries_total": ext_q,
        "external_prefix_cache_hits_total": ext_h,
        "prompt_tokens_total": queries,
        "prompt_tokens_by_source": {"local_compute": queries - hits - ext_h,
                                    "local_cache_hit": hits, "external_kv_transfer": ext_h},
        "prompt_tokens_cached_total": hits + ext_h,
        "generation_tokens_total": sum(iv.generation_tokens for iv in ivs),
        "requests_admitted": sum(iv.new_requests for iv in ivs),
        "requests_finished": len(finished),
        "requests_finished_stop": sum(p < 2 for p in finished),
        "requests_finished_length": sum(p >= 2 for p in finished),
        "finished_request_preemptions": {str(p): finished.count(p) for p in sorted(set(finished))},
        "finished_request_prompt_tokens": prompt_finished,
        "ttft_count": len(ttft), "ttft_sum_s": sum(ttft),
        "ttft_mean_s": sum(ttft) / len(ttft) if ttft else None,
        "itl_count": itl_n, "itl_sum_s": itl_sum, "itl_mean_s": itl_sum / itl_n,
        "e2e_count": len(e2e), "e2e_sum_s": sum(e2e),
        "e2e_mean_s": sum(e2e) / len(e2e) if e2e else None,
        "queue_time_per_finished_request_s": FINISHED_QUEUE_S,
        "prefill_time_per_finished_request_s": FINISHED_PREFILL_S,
        "final_running": last.running, "final_waiting": last.waiting + last.deferred,
        "final_waiting_capacity": last.waiting, "final_waiting_deferred": last.deferred,
        "final_kv_usage": last.kv_usage,
        "max_running": max(iv.running for iv in ivs),
        "max_waiting": max(iv.waiting + iv.deferred for iv in ivs),
        "max_kv_usage": max(iv.kv_usage for iv in ivs),
        "stats_lines": lines,
    }


def expected() -> dict[str, Any]:
    transfers = [t for iv in KV_DECODE for t in iv.transfers]
    return {
        "vllm_version": vllm.__version__,
        "prometheus_client_version": _version("prometheus_client"),
        "python_json_logger_version": _version("python-json-logger"),
        "start_utc": datetime.fromtimestamp(START_S, UTC).isoformat(),
        "start_s": START_S, "interval_s": INTERVAL_S, "steps_at_s": [STEP_A_S, STEP_B_S],
        "model_name": MODEL_NAME, "max_model_len": MAX_MODEL_LEN, "block_size": BLOCK_SIZE,
        "num_gpu_blocks": NUM_GPU_BLOCKS,
        "engine0": totals(ENGINE0, ENGINE0[0].prompt),
        "engine1": totals(ENGINE1, ENGINE1[0].prompt),
        "kv_decode": {
            **totals(KV_DECODE, 256),
            "kv_transfers_successful": len(transfers),
            "kv_transfer_ms_total": sum(t.xfer_us for t in transfers) / 1000,
            "kv_transfer_mb_total": sum(t.nbytes for t in transfers) / 2**20,
            "kv_failed_transfers": sum(iv.failed_transfers for iv in KV_DECODE),
            "kv_expired_reqs": sum(iv.expired_reqs for iv in KV_DECODE),
        },
    }


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("what", nargs="?", choices=("files", "live", "all"), default="files")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what in ("files", "all"):
        write_files(args.out)
    if args.what in ("live", "all"):
        live(args.out)
    sys.stdout.write(f"wrote the {args.what} fixtures into {args.out}\n")


if __name__ == "__main__":
    main()
