"""Make the SGLang telemetry fixtures in this folder with SGLang 0.5.23's own code.

What it drives (all real SGLang 0.5.23 code, on a CPU machine, no model, no GPU):

* ``sglang.srt.runtime_context.publish`` with a ``ServerArgs`` (``--enable-metrics``,
  ``--served-model-name Qwen/Qwen3-8B``, TP=1) so the collectors read the same config bags
  as in a server.
* ``sglang.srt.utils.common.configure_logger`` (the scheduler's log format
  ``[%(asctime)s] %(message)s``, datefmt ``%Y-%m-%d %H:%M:%S``).
* ``SchedulerMetricsReporter`` (``sglang/srt/managers/scheduler_components/metrics_reporter.py``)
  ``report_prefill_stats`` / ``report_decode_stats``: they print the "Prefill batch" and
  "Decode batch" lines and feed ``SchedulerMetricsCollector``.
* ``Scheduler.update_running_batch`` (``sglang/srt/managers/scheduler.py``), called unbound on a
  stub scheduler: it prints "KV cache pool is full. Retract requests. ..." and increments
  ``sglang:num_retracted_requests_total`` through the collector.
* ``SchedulerPoolStatsObserver`` (real) over a stub KV allocator and radix tree, for token usage.
* ``NewTokenRatioTracker`` (real), ``PrefillStats.from_adder`` (real), ``SchedulerReqTimeStats``
  (real, queue time and per-stage latency), ``APIServerReqTimeStats`` (real, TTFT/ITL/e2e).
* ``TokenizerManager.collect_metrics`` (real, unbound on a stub tokenizer manager) feeding
  ``TokenizerMetricsCollector``; ``observe_one_aborted_request`` as ``abort_request`` does.
* ``BasePrefixCache.update_eviction_metrics`` (real, unbound) feeding
  ``RadixCacheMetricsCollector``.
* prometheus_client multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` set before the collectors are
  built; /metrics bodies rendered with ``CollectorRegistry`` + ``MultiProcessCollector`` +
  ``generate_latest``, as ``sglang.srt.utils.common.add_prometheus_middleware`` serves them.

One line is not executed SGLang code: the scheduler's start-up line ``max_total_num_tokens=…,
max_running_requests=…`` sits inside Scheduler's model-worker init, so its f-string (scheduler.py
line 1268) is logged here with this run's values through the scheduler's own logger.

Only the scheduler, its requests and batches are stubs (``SimpleNamespace`` objects holding the
state the reporter reads); the engine itself is a tiny deterministic simulation (60 ticks of one
simulated second, 40 decode steps a tick, ``decode_log_interval`` 40).  The clock that SGLang's
reporter, collectors and time-stats read (``time.perf_counter``/``monotonic_ns``) is replaced in
those modules by a simulated clock so every number is reproducible, and log records are stamped
with the simulated wall time 2026-12-03 10:15:00 UTC + t.

How to run (outside the project venv; nothing here is imported by the tests):

    python3 -m venv /tmp/venv-sglang
    /tmp/venv-sglang/bin/pip install --no-deps sglang==0.5.23
    /tmp/venv-sglang/bin/pip install torch==2.14.1 torchvision==0.29.1 triton==3.8.0 \
        prometheus_client==0.26.0 msgspec numpy psutil requests packaging pydantic orjson \
        pybase64 xxhash zstandard setproctitle pyzmq uvloop aiohttp fastapi uvicorn einops tqdm \
        regex pillow IPython transformers==5.25.0 dill apache-tvm-ffi==0.1.11 sentencepiece \
        compressed_tensors gguf openai partial_json_parser

(only what ``sglang.srt.managers.scheduler``, ``...tokenizer_manager`` and
``...observability.metrics_collector`` need to import; sglang's own pins drag CUDA kernels that
do not install here. torch 2.14.1 is sglang's pin; the CPU build torch 2.13.0 imports with no
matching torchvision, which ``sglang.srt.multimodal`` imports. CPython 3.11.7.)
    cd /tmp && /tmp/venv-sglang/bin/python /path/to/make_fixtures.py            # files
    cd /tmp && /tmp/venv-sglang/bin/python /path/to/make_fixtures.py --live      # + Prometheus

(Run it from a directory without stray ``*.py`` files that shadow the standard library.)
The default run writes ``sglang_server.log``, ``metrics_snapshot.prom``, ``scrapes/*.prom`` and
``expected.json``.  ``--live`` replays the same sequence in real time (~65 s) while SGLang's
``add_prometheus_middleware`` /metrics route is served by uvicorn on 127.0.0.1:19092 and a
Prometheus server (``--prometheus-bin``, default /usr/bin/prometheus, Debian 2.42) on
127.0.0.1:19091 scrapes it every second; then it writes ``prometheus_range_sglang.json`` from
``/api/v1/query_range`` (``_bucket`` series left out by the query, and series that are 0 at every
step left out of the saved body, to keep the file small).
"""

from __future__ import annotations

import argparse
import calendar
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time as _real_time
import types
import urllib.parse
import urllib.request
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))

# Simulated wall clock of the fixture run.
START_EPOCH = calendar.timegm((2026, 12, 3, 10, 15, 0, 0, 0, 0))
PERF_BASE = 1000.0  # perf_counter value at simulated t=0 (never 0.0: SGLang uses `ts or now`)

N_TICKS = 60  # simulated seconds 0..59; final state at t=60
DECODE_STEPS_PER_TICK = 40  # == SGLang's default decode_log_interval
PREFILL_END = 0.20  # prefill forward ends (first token) at t+0.20
STEP_DT = 0.019  # decode step k ends at t + 0.20 + k*0.019 (k=1..40, last at t+0.96)
SCRAPE_TICKS = [0, 10, 20, 30, 40, 50, 60]

MAX_TOTAL_NUM_TOKENS = 32000
MAX_RUNNING_REQUESTS = 16
MAX_PREFILL_TOKENS = 8192
HOST_POOL_TOKENS = 96000
N_REQUESTS = 96
ABORTED = {17, 41}  # aborted by the client right after arrival, while still waiting
# (tick, number of requests) where the stub KV check fails and SGLang retracts.
RETRACTIONS = {12: 4, 24: 3, 36: 2, 47: 1}
MODEL = "Qwen/Qwen3-8B"


def request_spec(i: int) -> dict:
    """Deterministic workload: request i's arrival tick, lengths and prefix-cache hits."""
    return {
        "rid": f"req-{i:03d}",
        "arrival_tick": i * 58 // N_REQUESTS,
        "prompt_len": 1536 + 256 * (i % 7),
        "cached_device": 1024 if i % 4 != 0 else 0,
        "cached_host": 256 if i % 5 == 1 else 0,
        "cached_storage": 128 if i % 6 == 2 else 0,
        "output_len": 128 + 48 * (i % 9),
    }


# --------------------------------------------------------------------------- clock
class SimClock:
    """Simulated clock read by SGLang's reporter/collectors/time-stats."""

    def __init__(self, start_epoch: float, live: bool):
        self.t = 0.0
        self.start_epoch = start_epoch
        self.live = live
        self.real_start = _real_time.monotonic()

    def advance_to(self, t: float) -> None:
        assert t >= self.t - 1e-9, (t, self.t)
        self.t = t
        if self.live:
            delay = self.real_start + t - _real_time.monotonic()
            if delay > 0:
                _real_time.sleep(delay)

    def perf_counter(self) -> float:
        return PERF_BASE + self.t

    def perf(self, t: float) -> float:
        return PERF_BASE + t

    def monotonic_ns(self) -> int:
        return int((PERF_BASE + self.t) * 1e9)

    def epoch(self) -> float:
        return self.start_epoch + self.t

    def time_module(self) -> types.SimpleNamespace:
        ns = types.SimpleNamespace(
            **{k: getattr(_real_time, k) for k in dir(_real_time) if not k.startswith("__")}
        )
        ns.perf_counter = self.perf_counter
        ns.perf_counter_ns = lambda: int(self.perf_counter() * 1e9)
        ns.monotonic = self.perf_counter
        ns.monotonic_ns = self.monotonic_ns
        ns.time = self.epoch
        ns.time_ns = lambda: int(self.epoch() * 1e9)
        return ns


# --------------------------------------------------------------------------- stubs
@dataclass(eq=False)
class SimReq:
    """The fields of sglang's Req that the reporter / retraction path / tokenizer read."""

    rid: str
    arrival_tick: int
    prompt_len: int
    cached_device: int
    cached_host: int
    cached_storage: int
    output_len: int
    origin_input_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    priority: int | None = None
    routing_key: str | None = None
    beam_group: None = None
    sampling_params: SimpleNamespace = None
    admitted_once: bool = False
    needs_reprefill: bool = False
    retracted: bool = False
    time_stats: object = None  # SchedulerReqTimeStats
    api_stats: object = None  # APIServerReqTimeStats
    tm_state: SimpleNamespace = None  # tokenizer-side ReqState stub

    @property
    def cached_total(self) -> int:
        return self.cached_device + self.cached_host + self.cached_storage

    @property
    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)


class StubBatch:
    """Running decode batch: the ScheduleBatch surface update_running_batch / the reporter use."""

    def __init__(self, sim: Sim):
        self.sim = sim
        self.reqs: list[SimReq] = []
        self.forward_iter = None
        self.dp_cooperation_info = None
        self.seq_lens_cpu = None
        self.batch_is_full = False
        self.spec_algorithm = sim.scheduler.spec_algorithm

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def filter_batch(self, reqs_to_exclude=None, keep_indices=None):
        if reqs_to_exclude:
            self.reqs = [r for r in self.reqs if r not in reqs_to_exclude]

    def check_decode_mem(self, selected_indices=None) -> bool:
        return not self.sim.force_kv_full

    def retract_decode(self):
        """ScheduleBatch.retract_decode's victim order: fewest output tokens, then longest input."""
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
            NewTokenRatioTracker,
        )

        order = sorted(
            self.reqs, key=lambda r: (len(r.output_ids), -len(r.origin_input_ids)), reverse=True
        )
        n = self.sim.force_kv_full
        retracted = order[len(order) - n :]
        self.reqs = [r for r in self.reqs if r not in retracted]
        for r in retracted:
            self.sim.kv_release(r, to_tree=False)
        return retracted, NewTokenRatioTracker.estimate_new_token_ratio_after_retract(self.reqs), []

    def prepare_for_decode(self):
        pass


class Sim:
    def __init__(self, clock: SimClock, out_dir: str, live: bool):
        self.clock = clock
        self.out_dir = out_dir
        self.live = live
        self.force_kv_full = 0
        self.used_tokens = 0  # KV slots locked by running requests
        self.evictable_tokens = 0  # radix-tree tokens of finished requests
        self.host_used_tokens = 0
        self.expected: dict[str, object] = {}
        self.totals = {
            "prefill_lines": 0,
            "decode_lines": 0,
            "retract_lines": 0,
            "log_new_tokens": 0,
            "log_cached_tokens": 0,
            "reprocessed_new_tokens": 0,
            "effective_input_tokens": 0,
            "device_hit": 0,
            "host_hit": 0,
            "storage_hit": 0,
            "decode_tokens": 0,
            "retracted_reqs": 0,
            "retracted_input_tokens": 0,
            "retracted_output_tokens": 0,
            "evicted_tokens": 0,
            "eviction_passes": 0,
            "finished": 0,
            "aborted": 0,
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "cached_device": 0,
            "cached_host": 0,
            "cached_storage": 0,
            "ttft_sum": 0.0,
            "ttft_count": 0,
            "e2e_sum": 0.0,
            "e2e_count": 0,
            "queue_time_sum": 0.0,
            "queue_time_count": 0,
        }
        self.retractions_seen: list[int] = []

    # ----------------------------------------------------------- setup
    def setup(self):
        from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish
        from sglang.srt.server_args import ServerArgs

        self.server_args = ServerArgs(
            model_path="dummy",
            served_model_name=MODEL,
            enable_metrics=True,
            device="cpu",
            enable_hierarchical_cache=False,
        )
        publish(
            self.server_args,
            role="scheduler",
            ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=None),
        )

        # SGLang's own log format (configure_logger as run_scheduler_process calls it;
        # TP=1 -> no prefix).
        from sglang.srt.utils.common import configure_logger

        configure_logger(self.server_args, prefix="")
        root = logging.getLogger()
        fmt = root.handlers[0].formatter
        for h in list(root.handlers):
            root.removeHandler(h)
        log_path = os.path.join(self.out_dir, "sglang_server.log")
        self.log_handler = logging.FileHandler(log_path, mode="w", encoding="utf-8")
        self.log_handler.setFormatter(fmt)
        root.addHandler(self.log_handler)
        base_factory = logging.getLogRecordFactory()
        clock = self.clock

        def factory(*args, **kwargs):
            rec = base_factory(*args, **kwargs)
            rec.created = clock.epoch()
            rec.msecs = (rec.created - int(rec.created)) * 1000
            return rec

        logging.setLogRecordFactory(factory)

        # Clock injection into the SGLang modules whose numbers end up in the fixtures.
        import sglang.srt.managers.scheduler_components.metrics_reporter as mr
        import sglang.srt.mem_cache.base_prefix_cache as bpc
        import sglang.srt.observability.metrics_collector as mc
        import sglang.srt.observability.req_time_stats as rts

        tm = self.clock.time_module()
        for mod in (mr, mc, rts, bpc):
            mod.time = tm

        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.scheduler_components.metrics_reporter import (
            SchedulerMetricsReporter,
        )
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
            NewTokenRatioTracker,
        )
        from sglang.srt.managers.scheduler_components.pool_stats_observer import (
            SchedulerPoolStatsObserver,
        )
        from sglang.srt.observability.metrics_collector import (
            RadixCacheMetricsCollector,
            SchedulerMetricsCollector,
            TokenizerMetricsCollector,
            radix_cache_metric_labels,
            tokenizer_metric_labels,
        )
        from sglang.srt.observability.req_time_stats import RequestStage  # noqa: F401 (import check)
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.DisaggregationMode = DisaggregationMode

        # ---- scheduler collector (SchedulerMetricsCollector.init_new, as Scheduler.__init__ does)
        ctx = SchedulerMetricsCollector.init_new(
            server_args=self.server_args,
            enable_priority_scheduling=False,
            enable_lora=False,
            enable_hierarchical_cache=True,
        )
        self.sched_collector = ctx.collector

        # ---- stub KV allocator / radix tree behind the real SchedulerPoolStatsObserver
        sim = self
        allocator = SimpleNamespace(
            available_size=lambda: MAX_TOTAL_NUM_TOKENS - sim.used_tokens - sim.evictable_tokens,
            free_group_end=lambda: None,
        )
        host_pool = SimpleNamespace(
            logical_size=HOST_POOL_TOKENS,
            available_size=lambda: HOST_POOL_TOKENS - sim.host_used_tokens,
        )
        self.tree_cache = SimpleNamespace(
            evictable_size=lambda: sim.evictable_tokens,
            session_records=lambda: {},
            page_size=1,
            req_to_token_pool=SimpleNamespace(),
            token_to_kv_pool_host=host_pool,
            metrics_collector=RadixCacheMetricsCollector(
                labels=radix_cache_metric_labels("HiRadixCache", get_parallel(), False)
            ),
        )
        observer = SchedulerPoolStatsObserver(
            tree_cache=self.tree_cache,
            token_to_kv_pool_allocator=allocator,
            req_to_token_pool=None,
            session_controller=SimpleNamespace(sessions={}),
            hisparse_coordinator=None,
            is_hybrid_swa=False,
            is_hybrid_ssm=False,
            enable_hisparse=False,
            full_tokens_per_layer=None,
            swa_tokens_per_layer=None,
            max_total_num_tokens=MAX_TOTAL_NUM_TOKENS,
        )

        # ---- stub scheduler: the attributes SchedulerMetricsReporter and update_running_batch read
        self.scheduler = SimpleNamespace(
            device="cuda",  # log label "cuda graph: ..." as on a GPU server
            tp_worker=SimpleNamespace(model_runner=SimpleNamespace(lora_manager=None)),
            draft_worker=None,
            pool_stats_observer=observer,
            forward_ct=0,
            waiting_queue=[],
            disaggregation_mode=DisaggregationMode.NULL,
            grammar_manager=[],
            enable_priority_scheduling=False,
            enable_hierarchical_cache=True,
            enable_lora=False,
            tree_cache=self.tree_cache,
            token_to_kv_pool_allocator=allocator,
            kv_events_publisher=SimpleNamespace(
                emit_kv_metrics=lambda: None, publish_kv_events=lambda: None
            ),
            spec_algorithm=SpeculativeAlgorithm.NONE,
            max_running_requests_under_SLO=None,
            enable_skip_finishing_decode=False,
            result_queue=[],
            decode_offload_manager=None,
            new_token_ratio_tracker=NewTokenRatioTracker.from_config(),
            beam_coordinator=SimpleNamespace(retire_group=lambda req: None),
            send_abort_output=lambda *a, **k: None,
        )
        from sglang.srt.managers.scheduler import Scheduler

        s = self.scheduler
        s._reqs_finishing_inflight = lambda batch: Scheduler._reqs_finishing_inflight(s, batch)
        s._add_request_to_queue = self._add_request_to_queue
        self.update_running_batch = lambda batch: Scheduler.update_running_batch(s, batch)

        self.reporter = SchedulerMetricsReporter(
            scheduler=s, metrics_collector_context=ctx, metrics_collector=ctx.collector
        )
        s.metrics_reporter = self.reporter
        s.running_batch = StubBatch(self)

        # ---- tokenizer side (TokenizerManager.init_metric_collector_watchdog)
        from sglang.srt.runtime_context import get_observability

        self.tok_collector = TokenizerMetricsCollector(
            server_args=self.server_args,
            labels=tokenizer_metric_labels(),
            bucket_time_to_first_token=get_observability().bucket_time_to_first_token,
            bucket_e2e_request_latency=get_observability().bucket_e2e_request_latency,
            bucket_inter_token_latency=get_observability().bucket_inter_token_latency,
        )
        from sglang.srt.managers.tokenizer_manager import TokenizerManager

        tm_stub = SimpleNamespace(
            metrics_collector=self.tok_collector,
            enable_priority_scheduling=False,
            disaggregation_mode=DisaggregationMode.NULL,
        )
        tm_stub._request_has_grammar = lambda obj: TokenizerManager._request_has_grammar(
            tm_stub, obj
        )
        self.collect_metrics = lambda state, recv, i: TokenizerManager.collect_metrics(
            tm_stub, state, recv, i
        )

        from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache

        self.update_eviction_metrics = lambda n, start: BasePrefixCache.update_eviction_metrics(
            self.tree_cache, n, start
        )

        # Constants emitted once at startup (Scheduler -> emit_constants), startup times
        # (tokenizer).
        self.sched_collector.emit_constants(
            max_total_num_tokens=MAX_TOTAL_NUM_TOKENS,
            max_total_num_tokens_swa=None,
            weight_memory_usage_gb=15.26,
            kv_cache_memory_usage_gb=3.3,
            graph_memory_usage_gb={"decode": 0.42},
            max_running_requests_under_SLO=None,
            page_size=1,
            num_pages=MAX_TOTAL_NUM_TOKENS,
            context_len=40960,
            startup_available_gpu_memory_gb=78.5,
        )
        self.tok_collector.emit_startup_time(
            {
                "load_weight": 12.5,
                "kv_cache_allocation": 1.25,
                "scheduler_e2e": 31.0,
                "tokenizer_e2e": 33.5,
                "cuda_graph": {"decode": 9.75},
            }
        )

        # Scheduler start-up line. Not executable in isolation (it sits in Scheduler's model-worker
        # init), so this is the f-string of sglang/srt/managers/scheduler.py (0.5.23, line 1268)
        # with this run's values, logged through the scheduler's own logger.
        logging.getLogger("sglang.srt.managers.scheduler").info(
            f"max_total_num_tokens={MAX_TOTAL_NUM_TOKENS}, "
            f"chunked_prefill_size={MAX_PREFILL_TOKENS}, "
            f"max_prefill_tokens={MAX_PREFILL_TOKENS}, "
            f"max_running_requests={MAX_RUNNING_REQUESTS}, "
            f"context_len={40960}, "
            f"available_gpu_mem={62.25:.2f} GB"
        )

        from sglang.srt.observability.req_time_stats import (
            APIServerReqTimeStats,
            SchedulerReqTimeStats,
        )

        self.APIServerReqTimeStats = APIServerReqTimeStats
        self.SchedulerReqTimeStats = SchedulerReqTimeStats
        self.requests = [SimReq(**request_spec(i)) for i in range(N_REQUESTS)]
        for r in self.requests:
            r.origin_input_ids = [0] * r.prompt_len
            r.sampling_params = SimpleNamespace(max_new_tokens=r.output_len)

    # ----------------------------------------------------------- KV bookkeeping
    def kv_release(self, r: SimReq, to_tree: bool):
        self.used_tokens -= r.seqlen
        if to_tree:  # a finished request's tokens stay in the radix tree (evictable)
            self.evictable_tokens += r.seqlen
            self.host_used_tokens = min(HOST_POOL_TOKENS, self.host_used_tokens + r.seqlen)

    def make_room(self, n: int) -> int:
        """Evict radix-tree tokens so that n slots are free; return how many were evicted."""
        avail = MAX_TOTAL_NUM_TOKENS - self.used_tokens - self.evictable_tokens
        if n <= avail:
            return 0
        k = min(self.evictable_tokens, n - avail)
        assert k == n - avail, "KV pool overcommitted"
        self.evictable_tokens -= k
        return k

    def _add_request_to_queue(self, req: SimReq, is_retracted: bool = False):
        req.retracted = True
        req.needs_reprefill = True
        req.time_stats.set_wait_queue_entry_time(self.clock.perf_counter())
        self.scheduler.waiting_queue.append(req)
        self.scheduler.waiting_queue.sort(key=lambda q: (q.arrival_tick, q.rid))

    # ----------------------------------------------------------- tokenizer side
    def _recv(self, r: SimReq, finish_type: str | None):
        details = None
        if r.cached_total > 0 and finish_type != "abort":
            details = {
                "device": r.cached_device,
                "host": r.cached_host,
                "storage": r.cached_storage,
                "storage_backend": "HiCacheFile",
            }
        return SimpleNamespace(
            completion_tokens=[len(r.output_ids)],
            finished_reasons=[{"type": finish_type} if finish_type else None],
            cached_tokens_details=[details] if details else None,
            spec_verify_ct=None,
            prompt_tokens=[r.prompt_len],
            cached_tokens=[r.cached_total if finish_type != "abort" else 0],
        )

    def tokenizer_output(self, r: SimReq, finish_type: str | None = None):
        st = r.tm_state
        now = self.clock.perf_counter()
        if finish_type is not None:
            st.finished = True
            r.api_stats.set_finished_time(now)
        elif not st.ttft_observed:
            r.api_stats.set_first_token_time(now)
        self.collect_metrics(st, self._recv(r, finish_type), 0)
        if finish_type is not None:
            t = self.totals
            t["prompt_tokens"] += r.prompt_len
            t["generation_tokens"] += len(r.output_ids)
            t["e2e_sum"] += r.api_stats.get_e2e_latency()
            t["e2e_count"] += 1
            if finish_type == "abort":
                t["aborted"] += 1
            else:
                t["finished"] += 1
                t["cached_device"] += r.cached_device
                t["cached_host"] += r.cached_host
                t["cached_storage"] += r.cached_storage

    # ----------------------------------------------------------- one tick
    def arrivals(self, tick: int):
        self.clock.advance_to(tick + 0.0)
        for r in self.requests:
            if r.arrival_tick != tick:
                continue
            now = self.clock.perf_counter()
            r.api_stats = self.APIServerReqTimeStats()
            r.api_stats.set_metrics_collector(self.tok_collector)
            r.api_stats.set_created_time(now)
            r.time_stats = self.SchedulerReqTimeStats(scheduler_recv_time=now + 0.002)
            r.time_stats.set_metrics_collector(self.sched_collector)
            r.time_stats.set_wait_queue_entry_time(now + 0.003)
            r.tm_state = SimpleNamespace(
                obj=SimpleNamespace(
                    custom_labels=None, priority=None, stream=True, sampling_params={}
                ),
                ttft_observed=False,
                last_completion_tokens=0,
                finished=False,
                time_stats=r.api_stats,
            )
            self.scheduler.waiting_queue.append(r)
        self.scheduler.waiting_queue.sort(key=lambda q: (q.arrival_tick, q.rid))
        # client aborts while the request still waits (TokenizerManager.abort_request, then
        # the abort output)
        self.clock.advance_to(tick + 0.01)
        for r in list(self.scheduler.waiting_queue):
            if int(r.rid[-3:]) in ABORTED and r.arrival_tick == tick:
                self.tok_collector.observe_one_aborted_request(self.tok_collector.labels)
                self.scheduler.waiting_queue.remove(r)
                self.tokenizer_output(r, finish_type="abort")

    def prefill(self, tick: int):
        s = self.scheduler
        self.clock.advance_to(tick + 0.05)
        running = s.running_batch.reqs
        ratio = s.new_token_ratio_tracker.current
        reserved = sum(r.output_len - len(r.output_ids) for r in running)
        can_run: list[SimReq] = []
        batch_tokens = 0
        adder = SimpleNamespace(
            log_input_tokens=0,
            log_replay_tokens=0,
            log_hit_tokens=0,
            reprocessed_log_input_tokens=0,
            reprocessed_log_hit_tokens=0,
            log_device_hit_tokens=0,
            log_host_hit_tokens=0,
            log_storage_hit_tokens=0,
            new_token_ratio=ratio,
            can_run_list=can_run,
        )
        evicted = 0
        for r in list(s.waiting_queue):
            if len(running) + len(can_run) >= MAX_RUNNING_REQUESTS:
                break
            if (
                r.needs_reprefill and r.admitted_once
            ):  # retracted: recompute prompt + generated tokens
                extend, hit = r.prompt_len + len(r.output_ids), 0
            else:
                extend, hit = r.prompt_len - r.cached_total, r.cached_total
            # The sim admits only what fits with every running request's remaining output
            # reserved in full, so the pool never overflows; retractions are scripted.
            need = extend + hit + (r.output_len - len(r.output_ids))
            if batch_tokens + extend > MAX_PREFILL_TOKENS and can_run:
                break
            free = MAX_TOTAL_NUM_TOKENS - self.used_tokens - reserved
            if need > free:
                break
            evicted += self.make_room(extend + hit)
            batch_tokens += extend
            reserved += need - extend - hit
            self.used_tokens += extend + hit
            s.waiting_queue.remove(r)
            can_run.append(r)
            r.time_stats.set_forward_entry_time(self.clock.perf_counter())
            if r.needs_reprefill and r.admitted_once:
                adder.log_input_tokens += extend
                adder.reprocessed_log_input_tokens += extend
                self.totals["reprocessed_new_tokens"] += extend
            else:
                adder.log_input_tokens += extend
                adder.log_hit_tokens += hit
                adder.log_device_hit_tokens += r.cached_device
                adder.log_host_hit_tokens += r.cached_host
                adder.log_storage_hit_tokens += r.cached_storage
                self.totals["queue_time_sum"] += (
                    self.clock.perf_counter() - r.time_stats.wait_queue_entry_time
                )
                self.totals["queue_time_count"] += 1
        if evicted:
            self.update_eviction_metrics(evicted, self.clock.perf_counter() - 0.004)
            self.totals["evicted_tokens"] += evicted
            self.totals["eviction_passes"] += 1
        if not can_run:
            return
        from sglang.srt.managers.scheduler_components.metrics_reporter import PrefillStats

        num_pending = sum(q.seqlen for q in s.waiting_queue)
        prefill_stats = PrefillStats.from_adder(
            adder, running, False, num_pending_tokens=num_pending
        )
        # forward; first token of each new request
        self.clock.advance_to(tick + PREFILL_END)
        s.forward_ct += 1
        for r in can_run:
            r.time_stats.set_prefill_finished_time(self.clock.perf_counter())
            if not r.admitted_once:
                r.output_ids.append(1)
                self.used_tokens += 1
            r.admitted_once = True
            r.needs_reprefill = False
        batch = SimpleNamespace(forward_iter=None, reqs=can_run, dp_cooperation_info=None)
        self.reporter.report_prefill_stats(
            batch=batch, prefill_stats=prefill_stats, can_run_cuda_graph=False
        )
        t = self.totals
        t["prefill_lines"] += 1
        t["log_new_tokens"] += adder.log_input_tokens
        t["log_cached_tokens"] += adder.log_hit_tokens
        t["effective_input_tokens"] += adder.log_input_tokens - adder.reprocessed_log_input_tokens
        t["device_hit"] += adder.log_device_hit_tokens
        t["host_hit"] += adder.log_host_hit_tokens
        t["storage_hit"] += adder.log_storage_hit_tokens
        self.last_prefill = {
            "tick": tick,
            "effective_input": adder.log_input_tokens - adder.reprocessed_log_input_tokens,
            "effective_hit": adder.log_hit_tokens,
        }
        for r in can_run:
            if r.tm_state.ttft_observed is False:
                self.tokenizer_output(r)  # first streamed chunk -> TTFT
                self.totals["ttft_sum"] += r.api_stats.get_first_token_latency()
                self.totals["ttft_count"] += 1
        s.running_batch.reqs = running + can_run

    def decode(self, tick: int):
        s = self.scheduler
        batch = s.running_batch
        if batch.is_empty():
            return
        for k in range(1, DECODE_STEPS_PER_TICK + 1):
            self.clock.advance_to(tick + PREFILL_END + (k - 0.5) * STEP_DT)
            self.force_kv_full = RETRACTIONS.get(tick, 0) if k == 1 else 0
            if self.force_kv_full:
                retr = list(batch.reqs)
                n_out = {id(r): len(r.output_ids) for r in retr}
            self.update_running_batch(batch)
            if self.force_kv_full:
                gone = [r for r in retr if r not in batch.reqs]
                self.totals["retract_lines"] += 1
                self.totals["retracted_reqs"] += len(gone)
                self.totals["retracted_input_tokens"] += sum(r.prompt_len for r in gone)
                self.totals["retracted_output_tokens"] += sum(n_out[id(r)] for r in gone)
                self.retractions_seen.append(len(gone))
            self.force_kv_full = 0
            self.clock.advance_to(tick + PREFILL_END + k * STEP_DT)
            s.forward_ct += 1
            finished = []
            evicted = self.make_room(len(batch.reqs))
            if evicted:
                self.update_eviction_metrics(evicted, self.clock.perf_counter() - 0.002)
                self.totals["evicted_tokens"] += evicted
                self.totals["eviction_passes"] += 1
            for r in batch.reqs:
                r.output_ids.append(1)
                self.used_tokens += 1
                if len(r.output_ids) >= r.output_len:
                    finished.append(r)
            n = len(batch.reqs)
            self.reporter.num_generated_tokens += n
            self.totals["decode_tokens"] += n
            self.reporter.forward_ct_decode = (self.reporter.forward_ct_decode + 1) % (1 << 30)
            if self.reporter.forward_ct_decode % self.reporter.decode_log_interval == 0:
                self.totals["decode_lines"] += 1
            self.reporter.report_decode_stats(True, running_batch=batch, num_generated_tokens=n)
            for r in finished:
                batch.reqs.remove(r)
                self.kv_release(r, to_tree=True)
                r.time_stats.set_completion_time(self.clock.perf_counter())
                self.tokenizer_output(r, finish_type="length")
            if batch.is_empty():
                break
        # one streamed chunk per tick for requests still running (ITL observations)
        for r in batch.reqs:
            self.tokenizer_output(r)

    # ----------------------------------------------------------- scrape
    def render_metrics(self) -> str:
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry).decode("utf-8")

    def scrape(self, tick: int):
        if self.live:
            return
        self.clock.advance_to(float(tick))
        stamp = _real_time.strftime("%Y%m%dT%H%M%SZ", _real_time.gmtime(self.clock.epoch()))
        body = self.render_metrics()
        with open(
            os.path.join(self.out_dir, "scrapes", stamp + ".prom"), "w", encoding="utf-8"
        ) as f:
            f.write(body)
        self.scrape_log.append(
            {
                "file": f"scrapes/{stamp}.prom",
                "tick": tick,
                "retracted_total": sum(self.retractions_seen) if self.retractions_seen else None,
            }
        )

    # ----------------------------------------------------------- run
    def run(self):
        self.scrape_log = []
        for tick in range(N_TICKS):
            if tick in SCRAPE_TICKS:
                self.scrape(tick)
            self.arrivals(tick)
            self.prefill(tick)
            self.decode(tick)
        self.clock.advance_to(float(N_TICKS))
        if N_TICKS in SCRAPE_TICKS:
            self.scrape(N_TICKS)
        self.log_handler.flush()

    def expected_values(self) -> dict:
        s = self.scheduler
        t = dict(self.totals)
        stats = self.reporter.stats
        lp = self.last_prefill
        exp = {
            "model_name": MODEL,
            "sim_start_utc": "2026-12-03T10:15:00Z",
            "sim_end_utc": "2026-12-03T10:16:00Z",
            "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS,
            "requests_total": N_REQUESTS,
            "requests_finished_length": t["finished"],
            "requests_aborted": t["aborted"],
            "requests_running_at_end": len(s.running_batch.reqs),
            "requests_waiting_at_end": len(s.waiting_queue),
            "requests_never_arrived": sum(1 for r in self.requests if r.arrival_tick >= N_TICKS),
            "gauge_num_running_reqs_end": stats.num_running_reqs.total,
            "gauge_num_queue_reqs_end": stats.num_queue_reqs.total,
            "gauge_token_usage_end": stats.token_usage,
            "gauge_num_used_tokens_end": stats.num_used_tokens,
            "gauge_cache_hit_rate_end": stats.cache_hit_rate,
            "gauge_gen_throughput_end": stats.gen_throughput,
            "last_prefill": lp,
            "log": {
                "prefill_lines": t["prefill_lines"],
                "decode_lines": t["decode_lines"],
                "retract_lines": t["retract_lines"],
                "sum_new_token": t["log_new_tokens"],
                "sum_cached_token": t["log_cached_tokens"],
                "sum_retracted_reqs": t["retracted_reqs"],
            },
            "retracted_requests_total": t["retracted_reqs"],
            "retraction_events": self.retractions_seen,
            "retracted_input_tokens_total": t["retracted_input_tokens"],
            "retracted_output_tokens_total": t["retracted_output_tokens"],
            "realtime_tokens_total": {
                "prefill_compute": t["log_new_tokens"],
                "prefill_cache": t["log_cached_tokens"],
                "decode": t["decode_tokens"],
            },
            "prefill_effective_tokens_total": {
                "input": t["effective_input_tokens"],
                "device_hit": t["device_hit"],
                "host_hit": t["host_hit"],
                "storage_hit": t["storage_hit"],
            },
            "reprocessed_prefill_tokens": t["reprocessed_new_tokens"],
            "cached_tokens_total": {
                "device": t["cached_device"],
                "host": t["cached_host"],
                "storage": t["cached_storage"],
            },
            "prompt_tokens_total": t["prompt_tokens"],
            "generation_tokens_total": t["generation_tokens"],
            "num_requests_total": t["finished"] + t["aborted"],
            "num_aborted_requests_total": t["aborted"],
            "evicted_tokens_total": t["evicted_tokens"],
            "eviction_passes": t["eviction_passes"],
            "ttft": {
                "count": t["ttft_count"],
                "sum": round(t["ttft_sum"], 6),
                "mean": round(t["ttft_sum"] / t["ttft_count"], 6) if t["ttft_count"] else None,
            },
            "e2e": {
                "count": t["e2e_count"],
                "sum": round(t["e2e_sum"], 6),
                "mean": round(t["e2e_sum"] / t["e2e_count"], 6) if t["e2e_count"] else None,
            },
            "queue_time": {
                "count": t["queue_time_count"],
                "sum": round(t["queue_time_sum"], 6),
                "mean": round(t["queue_time_sum"] / t["queue_time_count"], 6)
                if t["queue_time_count"]
                else None,
            },
            "scrapes": self.scrape_log,
        }
        return exp


# --------------------------------------------------------------------------- live mode
def serve_metrics(port: int):
    """SGLang's own /metrics route (add_prometheus_middleware) on a FastAPI app, via uvicorn."""
    import uvicorn
    from fastapi import FastAPI
    from sglang.srt.utils.common import add_prometheus_middleware

    app = FastAPI()
    add_prometheus_middleware(app)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    for _ in range(100):
        if server.started:
            break
        _real_time.sleep(0.1)
    return server, th


def run_prometheus(bin_path: str, port: int, target_port: int, workdir: str) -> subprocess.Popen:
    cfg = os.path.join(workdir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 15s\n"
            "scrape_configs:\n  - job_name: sglang\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n"
        )
    with open(os.path.join(workdir, "prometheus.log"), "w") as log:
        return subprocess.Popen(
            [
                bin_path,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={os.path.join(workdir, 'data')}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=HERE)
    ap.add_argument(
        "--live", action="store_true", help="real-time replay scraped by a real Prometheus"
    )
    ap.add_argument("--prometheus-bin", default="/usr/bin/prometheus")
    ap.add_argument("--prometheus-port", type=int, default=19091)
    ap.add_argument("--exporter-port", type=int, default=19092)
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    os.environ["TZ"] = "UTC"
    _real_time.tzset()
    work = tempfile.mkdtemp(prefix="sglang-fixtures-")
    mp_dir = os.path.join(work, "prometheus_multiproc")
    os.makedirs(mp_dir)
    # Must be set before prometheus_client is imported (SGLang: set_prometheus_multiproc_dir).
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = mp_dir

    out_dir = args.out if not args.live else work
    os.makedirs(os.path.join(out_dir, "scrapes"), exist_ok=True)
    if not args.live:
        for name in os.listdir(os.path.join(out_dir, "scrapes")):
            if name.endswith(".prom"):
                os.remove(os.path.join(out_dir, "scrapes", name))

    clock = SimClock(START_EPOCH if not args.live else _real_time.time(), live=args.live)
    sim = Sim(clock, out_dir, live=args.live)
    sim.setup()

    prom = server = None
    try:
        if args.live:
            server, _ = serve_metrics(args.exporter_port)
            prom = run_prometheus(
                args.prometheus_bin, args.prometheus_port, args.exporter_port, work
            )
            base = f"http://127.0.0.1:{args.prometheus_port}"
            for _ in range(60):  # wait for Prometheus to be ready and the target to be up
                try:
                    q = http_get(f"{base}/api/v1/query?query=up")
                    if b'"1"]' in q:
                        break
                except Exception:
                    pass
                _real_time.sleep(0.5)
            start = _real_time.time()
            clock.start_epoch = start
            clock.real_start = _real_time.monotonic()
            sim.run()
            _real_time.sleep(4)  # let Prometheus take its last scrapes of the final state
            end = _real_time.time()
            query = '{__name__=~"sglang.*",__name__!~".*_bucket"}'
            params = urllib.parse.urlencode(
                {"query": query, "start": f"{start - 2:.3f}", "end": f"{end:.3f}", "step": "1"}
            )
            body = http_get(f"{base}/api/v1/query_range?{params}")
            data = json.loads(body)
            # Keep the file small: series that are 0 at every step (SWA/Mamba/PD/spec/DP gauges of
            # this unified, non-speculative engine) are left out, and named on stdout.
            result = data["data"]["result"]
            zero = sorted(
                {
                    s["metric"]["__name__"]
                    for s in result
                    if all(float(v[1]) == 0 for v in s["values"])
                }
            )
            data["data"]["result"] = [
                s for s in result if any(float(v[1]) != 0 for v in s["values"])
            ]
            sys.stdout.write("left out (0 at every step): " + ", ".join(zero) + "\n")
            with open(
                os.path.join(args.out, "prometheus_range_sglang.json"), "w", encoding="utf-8"
            ) as f:
                json.dump(data, f, separators=(",", ":"))
                f.write("\n")
            sys.stdout.write(
                f"live run: query_range start={start - 2:.3f} end={end:.3f} step=1, "
                f"{len(result)} series returned, {len(data['data']['result'])} kept\n"
            )
        else:
            sim.run()
            with open(os.path.join(out_dir, "metrics_snapshot.prom"), "w", encoding="utf-8") as f:
                f.write(sim.render_metrics())
            exp = sim.expected_values()
            with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
                json.dump(exp, f, indent=1)
                f.write("\n")
            sys.stdout.write(json.dumps(exp, indent=1) + "\n")
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
        if server is not None:
            server.should_exit = True
            _real_time.sleep(0.5)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
