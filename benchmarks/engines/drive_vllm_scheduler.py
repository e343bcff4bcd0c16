"""Drive vLLM's own v1 `Scheduler` / `AsyncScheduler` over a request list on CPU, with no model.

Runs in an environment with `vllm` installed (benchmarks/engines/README.md), and needs nothing
from this project: `vllm_steps.py` writes the input and reads the output. Input (JSON):

    {"config": {"block_size": 16, "num_gpu_blocks": 4000, "max_num_seqs": 1024,
                "max_num_batched_tokens": 8192, "max_model_len": 131072,
                "enable_chunked_prefill": true, "long_prefill_token_threshold": 0,
                "enable_prefix_caching": true, "async_scheduling": true},
     "step_time": {"a_s": 0.005, "per_token_s": 3e-05, "per_context_token_s": 5e-08},
     "requests": [{"arrival_s": 0.0, "prompt_len": 900, "output_len": 120,
                   "block_ids": [...]}]}

Several runs go in one call as `{"cases": [...]}` (the output then holds as many). `block_ids`
holds one identity per KV block of the request's prompt + output: the token at
position t is `block_ids[t // B] * B + t % B`. Two requests share a block's tokens exactly when
they share its identity, and identities are prefix chains, so vLLM's chained block hashes
agree with the identities the simulator gives its blocks. The fake model samples, for a request
whose prefill is complete in a step, the token at the position after its computed tokens, so
a later prompt that repeats an answer hits the answer's cached blocks as it would on a GPU.

With `"count_duplicates": true` in the config the output also counts the steps after which some
block hash is cached in two or more physical blocks (vLLM never deduplicates them). With
`"log_stats": true` the scheduler keeps its statistics (with `"kv_cache_metrics": true` too its
residency collector's eviction events, on every block, timed by the loop's virtual clock) and
the output holds, per step that ran, the `SchedulerStats` its `update_from_output` attached to
the step's outputs (`stats`: the time the outputs came out, then the dataclass as
`dataclasses.asdict` gives it), what the engine sends its front end with every output, and the
engine's registration reply (`ready_response_hex`: the limits and pool it reports, msgpack as
vLLM encodes it).

The engine loop is vLLM's `EngineCore.step` (synchronous) or `step_with_batch_queue` (async,
`max_concurrent_batches` batches in flight), run on a virtual clock: a step's GPU time is
`a_s + per_token_s · scheduled tokens + per_context_token_s · Σ(computed + new tokens)` over
its requests, the host takes no time, a batch starts when the GPU is free, its outputs are
processed when it ends, and a request is added at the first engine-loop turn at or after its
arrival. Output (JSON): the vLLM version, one row per scheduler call that scheduled tokens
(decision, start and end times, tokens, requests, preemptions, KV blocks in use, running and
waiting after scheduling, and the scheduled `[request, tokens]` pairs) and per request its first
scheduling time, its prefix hit at first admission, its preemptions and its token times.

    /tmp/venv-vllm/bin/python benchmarks/engines/drive_vllm_scheduler.py IN.json OUT.json
"""

from __future__ import annotations

import json
import sys
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODEL_CONFIG = {  # a tiny Llama: the scheduler reads only lengths and limits from it
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 1 << 21,
    "rms_norm_eps": 1e-5, "torch_dtype": "float32", "bos_token_id": 0, "eos_token_id": 1,
}


@dataclass
class Batch:
    """One scheduler output on its way through the (virtual) GPU."""

    output: Any
    decided_s: float
    start_s: float
    ready_s: float
    sampled: dict[str, int | None] = field(default_factory=dict)
    row: list[Any] | None = None


def build_scheduler(config: dict[str, Any], model_dir: Path):  # type: ignore[no-untyped-def]
    """A real `Scheduler` (or `AsyncScheduler`) over one full-attention KV group."""
    import torch
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ObservabilityConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(MODEL_CONFIG))
    block = int(config["block_size"])
    blocks = int(config["num_gpu_blocks"])
    max_model_len = int(config["max_model_len"])
    scheduler_config = SchedulerConfig(
        max_num_seqs=int(config["max_num_seqs"]),
        max_num_batched_tokens=int(config["max_num_batched_tokens"]),
        max_model_len=max_model_len, is_encoder_decoder=False,
        enable_chunked_prefill=bool(config["enable_chunked_prefill"]),
        long_prefill_token_threshold=int(config["long_prefill_token_threshold"]),
        async_scheduling=bool(config["async_scheduling"]),
    )
    model_config = ModelConfig(model=str(model_dir), skip_tokenizer_init=True,
                               max_model_len=max_model_len, dtype="float32")
    cache_config = CacheConfig(block_size=block,
                               enable_prefix_caching=bool(config["enable_prefix_caching"]))
    # `kv_cache_metrics`: vLLM's residency collector on every block (`--kv-cache-metrics
    # --kv-cache-metrics-sample 1.0`), its events in the statistics.
    observability = ObservabilityConfig(kv_cache_metrics=bool(config.get("kv_cache_metrics")),
                                        kv_cache_metrics_sample=1.0)
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                             cache_config=cache_config, device_config=DeviceConfig("cpu"),
                             observability_config=observability)
    kv_cache_config = KVCacheConfig(
        num_blocks=blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=block, num_kv_heads=1, head_size=1, dtype=torch.float32))])
    cache_config.num_gpu_blocks = blocks
    cls = AsyncScheduler if config["async_scheduling"] else Scheduler
    scheduler = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                    structured_output_manager=StructuredOutputManager(vllm_config),
                    block_size=block, log_stats=bool(config.get("log_stats", False)))
    return scheduler, vllm_config.max_concurrent_batches


def make_requests(requests: list[dict[str, Any]], block: int) -> tuple[list[Any], list[list[int]]]:
    """vLLM `Request`s (prompt = the first prompt_len tokens) and every request's full tokens."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(block, sha256)
    made, tokens = [], []
    for i, r in enumerate(requests):
        prompt, out = int(r["prompt_len"]), int(r["output_len"])
        ids = r["block_ids"]
        seq = [int(ids[t // block]) * block + t % block for t in range(prompt + out)]
        params = SamplingParams(max_tokens=out, ignore_eos=True)
        made.append(Request(request_id=str(i), prompt_token_ids=seq[:prompt],
                            sampling_params=params, pooling_params=None,
                            arrival_time=float(r["arrival_s"]), block_hasher=hasher))
        tokens.append(seq)
    return made, tokens


# `iteration_details`: the log's clock starts here (UTC), the loop's time 0.
LOG_EPOCH_S = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


class _FixedTime:
    """The `time` module for `logging` while one record is made: its clock reads `now_s`."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def time(self) -> float:
        return self.now_s

    def time_ns(self) -> int:
        return round(self.now_s * 1e9)

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


class _IterationLog:
    """vLLM's `LoggingStatLogger` with `--enable-logging-iteration-details`: each step's
    `SchedulerIterationDetails` (vLLM's `compute_iteration_details` of the step's scheduler
    output, its elapsed time the step's GPU time) attached to the stats, and the lines vLLM's
    own logger and formatter write, their clock the loop's (`LOG_EPOCH_S` + now; pid 0)."""

    def __init__(self, driver: Driver) -> None:
        import logging
        import time

        from vllm.logger import (
            _DATE_FORMAT,
            _FORMAT,
            _VllmLogRecordFactory,
            set_vllm_process_name,
        )
        from vllm.logging_utils import NewLineFormatter
        from vllm.v1.metrics.loggers import LoggingStatLogger

        self.driver = driver
        self.lines: list[str] = []
        self.index = 0
        config = driver.scheduler.vllm_config
        config.observability_config.enable_logging_iteration_details = True
        self.logger = LoggingStatLogger(config, 0)
        lines = self.lines

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.name == "vllm.v1.metrics.loggers":  # the stat logger's lines only
                    record.process = 0
                    lines.append(self.format(record))

        # vLLM's own record factory names the process, as in its API server (whose output
        # processor records the stats)
        if not isinstance(logging.getLogRecordFactory(), _VllmLogRecordFactory):
            logging.setLogRecordFactory(_VllmLogRecordFactory(logging.getLogRecordFactory()))
        set_vllm_process_name("APIServer")
        handler = Keep()
        formatter = NewLineFormatter(_FORMAT, datefmt=_DATE_FORMAT)
        formatter.converter = time.gmtime  # the fixture's times in UTC
        handler.setFormatter(formatter)
        self.handler = handler
        logging.getLogger("vllm").addHandler(handler)
        logging.getLogger("vllm").setLevel(logging.INFO)  # a server's level (VLLM_LOGGING_LEVEL)

    def close(self) -> list[str]:
        """Stop listening (the next run's lines are its own); the lines written."""
        import logging

        logging.getLogger("vllm").removeHandler(self.handler)
        return list(self.lines)

    def record(self, stats: Any, batch: Batch) -> None:
        import logging

        from vllm.v1.metrics.stats import SchedulerIterationDetails
        from vllm.v1.utils import compute_iteration_details

        details = compute_iteration_details(batch.output)
        stats.iteration_details = SchedulerIterationDetails(
            iteration_index=self.index, num_ctx_requests=details.num_ctx_requests,
            num_ctx_tokens=details.num_ctx_tokens,
            num_generation_requests=details.num_generation_requests,
            num_generation_tokens=details.num_generation_tokens,
            elapsed_ms=(batch.ready_s - batch.start_s) * 1000.0)
        self.index += 1
        clock = logging.time  # type: ignore[attr-defined]
        logging.time = _FixedTime(LOG_EPOCH_S + self.driver.now)  # type: ignore[attr-defined]
        try:
            self.logger.record(stats, None, engine_idx=0)
        finally:
            logging.time = clock  # type: ignore[attr-defined]


class _LoopClock:
    """Stands in for the `time` module of `vllm.v1.core.kv_cache_metrics`: the driver's now."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def monotonic_ns(self) -> int:
        return round(self.driver.now * 1e9)


class Driver:
    """The engine loop on a virtual clock around a real scheduler."""

    def __init__(self, spec: dict[str, Any], model_dir: Path) -> None:
        self.config = spec["config"]
        self.cost = spec["step_time"]
        self.block = int(self.config["block_size"])
        self.usable = int(self.config["num_gpu_blocks"]) - 1
        self.scheduler, self.depth = build_scheduler(self.config, model_dir)
        if self.config.get("kv_cache_metrics"):
            # The collector's clock is the engine loop's (virtual) time, not this CPU's.
            from vllm.v1.core import kv_cache_metrics

            kv_cache_metrics.time = _LoopClock(self)  # type: ignore[assignment]
        if not self.config["async_scheduling"]:
            self.depth = 1
        self.requests, self.tokens = make_requests(spec["requests"], self.block)
        self.arrivals = [float(r["arrival_s"]) for r in spec["requests"]]
        self.next_arrival = 0
        self.now = 0.0
        self.gpu_free_s = 0.0
        self.steps: list[list[Any]] = []
        n = len(self.requests)
        self.first_sched_s: list[float | None] = [None] * n
        self.hit_tokens: list[int | None] = [None] * n
        self.token_times: list[list[float]] = [[] for _ in range(n)]
        # with "count_duplicates": steps after which some block hash has two or more copies
        self.count_duplicates = bool(self.config.get("count_duplicates", False))
        self.steps_with_copies = 0
        self.stats: list[list[Any]] = []  # with "log_stats": [outputs' time s, SchedulerStats]
        # with "iteration_details": vLLM's own log of every step (`--enable-logging-iteration-
        # details`), written by its LoggingStatLogger on the loop's clock
        self.log = _IterationLog(self) if self.config.get("iteration_details") else None

    def add_arrivals(self) -> None:
        while (self.next_arrival < len(self.arrivals)
               and self.arrivals[self.next_arrival] <= self.now):
            self.scheduler.add_request(self.requests[self.next_arrival])
            self.next_arrival += 1

    def arrival_ahead(self) -> float | None:
        return (self.arrivals[self.next_arrival] if self.next_arrival < len(self.arrivals)
                else None)

    def step_time(self, output: Any) -> float:
        tokens = 0
        context = 0
        for rid, n in output.num_scheduled_tokens.items():
            tokens += n
            context += self.scheduler.requests[rid].num_computed_tokens  # already advanced
        return (self.cost["a_s"] + self.cost["per_token_s"] * tokens
                + self.cost["per_context_token_s"] * context)

    def schedule(self) -> Batch:
        """One `schedule()` call at `now`, launched on the GPU when it has tokens."""
        sched = self.scheduler
        output = sched.schedule()
        tokens = output.total_num_scheduled_tokens
        batch = Batch(output=output, decided_s=self.now, start_s=self.now, ready_s=self.now)
        if tokens == 0:
            return batch
        pairs = []
        for rid, n in output.num_scheduled_tokens.items():
            request = sched.requests[rid]
            r = int(rid)
            before = request.num_computed_tokens - n
            if self.first_sched_s[r] is None:
                self.first_sched_s[r] = self.now
                self.hit_tokens[r] = before
            position = request.num_computed_tokens
            batch.sampled[rid] = None if request.is_prefill_chunk else self.tokens[r][position]
            pairs.append([r, n])
        start = max(self.now, self.gpu_free_s)
        end = start + self.step_time(output)
        self.gpu_free_s = end
        batch.start_s, batch.ready_s = start, end
        running, waiting = sched.get_request_counts()
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        batch.row = [self.now, start, end, tokens, len(pairs), len(output.preempted_req_ids),
                     self.usable - free, running, waiting, pairs]
        self.steps.append(batch.row)
        if self.count_duplicates:
            cached = sched.kv_cache_manager.block_pool.cached_block_hash_to_block._cache
            self.steps_with_copies += any(isinstance(v, dict) and len(v) > 1
                                          for v in cached.values())
        return batch

    def complete(self, batch: Batch) -> None:
        """`update_from_output` with the fake model's tokens, at the batch's end."""
        from vllm.v1.outputs import ModelRunnerOutput

        self.now = max(self.now, batch.ready_s)
        if batch.row is None:
            return  # an empty batch: nothing ran, nothing comes out
        ids = list(batch.output.num_scheduled_tokens)
        before = {rid: len(self.requests[int(rid)].output_token_ids) for rid in ids}
        sampled = [[batch.sampled[rid]] if batch.sampled.get(rid) is not None else []
                   for rid in ids]
        output = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)},
                                   sampled_token_ids=sampled)
        outputs = self.scheduler.update_from_output(batch.output, output)
        for eco in outputs.values():
            if eco.scheduler_stats is not None:
                if self.log is not None:
                    self.log.record(eco.scheduler_stats, batch)
                self.stats.append([self.now, asdict(eco.scheduler_stats)])
        for rid in ids:
            got = len(self.requests[int(rid)].output_token_ids) - before[rid]
            self.token_times[int(rid)].extend([self.now] * got)

    def stuck(self) -> None:
        """Nothing can be scheduled until a request arrives: wait for it."""
        ahead = self.arrival_ahead()
        if ahead is None:
            raise SystemExit("the scheduler cannot make progress and no request is left to "
                             "arrive (a request larger than the pool?)")
        self.now = max(self.now, ahead)

    def run(self) -> None:
        """`EngineCore`'s busy loop: take arrivals, schedule while fewer than `depth` batches
        are in flight (`step_with_batch_queue`), else wait for the oldest and process it."""
        sched = self.scheduler
        queue: deque[Batch] = deque()
        while True:
            self.add_arrivals()
            if not sched.has_requests() and not queue:
                ahead = self.arrival_ahead()
                if ahead is None:
                    break
                self.now = max(self.now, ahead)
                continue
            if sched.has_requests():
                batch = self.schedule()
                executed = batch.output.total_num_scheduled_tokens > 0
                queue.appendleft(batch)
                if (not executed and not batch.output.preempted_req_ids
                        and all(b.row is None for b in queue)):
                    # vLLM would call schedule() again and again with the same result until
                    # a request arrives: the empty batches change nothing, so skip to it
                    queue.clear()
                    if sched.has_unfinished_requests():
                        self.stuck()
                    continue
                if len(queue) < self.depth and (executed or sched.has_requests()):
                    continue
            elif not queue:
                continue
            self.complete(queue.pop())

    def ready_response_hex(self) -> str:
        """The registration reply this engine would send its front end (`EngineCore.
        _make_ready_response`'s fields from the same config: no data parallelism, LoRA, KV
        events or sleep mode here), msgpack-encoded as vLLM sends it, in hex: what vllm-vcr's
        tap keeps as the trace meta's `ready_response_hex`."""
        import msgspec
        from vllm.v1.engine import EngineCoreReadyResponse
        from vllm.version import __version__

        config = self.scheduler.vllm_config
        cache, parallel = config.cache_config, config.parallel_config
        response = EngineCoreReadyResponse(
            max_model_len=config.model_config.max_model_len,
            num_gpu_blocks=cache.num_gpu_blocks or 0, block_size=cache.block_size,
            mamba_block_size=cache.mamba_block_size,
            effective_attention_block_size=cache.effective_attention_block_size,
            dp_stats_address=None,
            dtype=str(config.model_config.dtype).removeprefix("torch."),
            vllm_version=__version__, world_size=parallel.world_size,
            data_parallel_size=parallel.data_parallel_size,
            kv_cache_size_tokens=cache.kv_cache_size_tokens,
            kv_cache_max_concurrency=cache.kv_cache_max_concurrency,
            tensor_parallel_size=parallel.tensor_parallel_size,
            pipeline_parallel_size=parallel.pipeline_parallel_size,
            decode_context_parallel_size=parallel.decode_context_parallel_size,
            data_parallel_rank=0, max_num_seqs=config.scheduler_config.max_num_seqs,
            max_num_batched_tokens=config.scheduler_config.max_num_batched_tokens,
            instance_id="0", supports_lora=False, max_loras=0)  # fixed: the bytes repeat
        return msgspec.msgpack.encode(response).hex()

    def result(self) -> dict[str, Any]:
        import torch
        import vllm

        return {
            "engine": "vllm", "engine_version": vllm.__version__,
            "torch_version": torch.__version__,
            "scheduler": type(self.scheduler).__name__,
            "batch_queue": self.depth,
            "steps_with_duplicate_copies": self.steps_with_copies,
            "step_columns": ["decided_s", "start_s", "end_s", "tokens", "requests", "preempted",
                             "kv_blocks_used", "running", "waiting", "scheduled"],
            "steps": self.steps,
            **({"stats": self.stats, "ready_response_hex": self.ready_response_hex()}
               if self.stats else {}),
            **({"log_lines": self.log.close()} if self.log is not None else {}),
            "requests": [
                {"first_scheduled_s": self.first_sched_s[i], "hit_tokens": self.hit_tokens[i],
                 "preemptions": int(self.requests[i].num_preemptions),
                 "token_times_s": self.token_times[i]}
                for i in range(len(self.requests))
            ],
        }


def main(argv: list[str] | None = None) -> int:
    """Read the input, drive the scheduler, write the output."""
    import tempfile

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: drive_vllm_scheduler.py IN.json OUT.json")
    spec = json.loads(Path(args[0]).read_text())
    results = []
    with tempfile.TemporaryDirectory() as model_dir:
        for case in spec.get("cases", [spec]):
            driver = Driver(case, Path(model_dir))
            driver.run()
            results.append(driver.result())
    out = {"cases": results} if "cases" in spec else results[0]
    Path(args[1]).write_text(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
