"""Golden per-request GPU and CPU hits from vLLM's own scheduler with its CPU offload connector.

Builds vLLM's v1 `Scheduler` with the `OffloadingConnector` (scheduler role, the native
`CPUOffloadingSpec`: `CPUOffloadingManager`, lru) over a `KVCacheConfig` of one
`FullAttentionSpec` group of `num_gpu_blocks` blocks, on CPU with no model: a model runner that
samples one token for every scheduled request, and a worker that completes every load and
store job in the step it was issued (what `tests/v1/kv_connector/unit/offloading_connector/`
does with `complete_transfers=True`). Requests run one at a time in file order, each with one
output token (`max_tokens=1`): the prefill step samples it and the request finishes; the next
request is added before the next step, so the connector's `on_request_finished` of one request
runs in the step that schedules the next, as in a server. A prompt of more blocks than the
pool's N − 1 usable ones is refused (recorded, all miss; the scheduler would wait for it
forever). Per request it records vLLM's `PrefillStats`: `num_local_cached_tokens` (what
`vllm:prompt_tokens_by_source` counts as `local_cache_hit`) and `num_external_cached_tokens`
(`external_kv_transfer`).

The CPU tier's size is given in chunks: the spec's page is 8·B bytes per block (1 KV head of
size 1, float32, K and V), so a chunk of up to 512 tokens rounds up to one 4 KiB page and
`cpu_bytes_to_use = chunks · 4096` holds exactly `chunks` chunks (`cpu/spec.py`).

Writes `tests/fixtures/tiers_vllm/vllm_offload_<trace>.json` and prints a table beside the
tiered replay of `yaotu_trace.prefix.tiers`. Installs nothing: run it in an environment with
vLLM 0.33.0 (benchmarks/engines/README.md), e.g.

    PYTHONPATH=. /tmp/venv-vllm/bin/python benchmarks/engines/golden_tiers_vllm.py

Deterministic: the same bytes on every run.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_json import write_fixture
from traces import load_prompts

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tiers_vllm"
PAGE_BYTES = 4096  # SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT: one chunk of <= 512 tokens here
PROTOCOL = ("vLLM v1 Scheduler + OffloadingConnector (CPUOffloadingSpec, {policy}, "
            "store_threshold {threshold}, offload_prompt_only) over one FullAttentionSpec group of "
            "num_gpu_blocks blocks; "
            "one request at a time in file order, max_tokens=1, every load and store job "
            "completed in the step it was issued; the next request added before the next step; "
            "a prompt of more than num_gpu_blocks-1 blocks refused (all miss); per request "
            "PrefillStats.num_local_cached_tokens (gpu) and num_external_cached_tokens (cpu)")
SECONDARY_PROTOCOL = ("; TieringOffloadingSpec with one secondary tier of type {secondary} (fs: "
                      "a fresh folder; it never evicts), its transfers done and its "
                      "asynchronous lookups answered before the next step; the external hit "
                      "split as vllm:prompt_tokens_cached_by_source splits it (host: cpu, "
                      "disk: disk_hit_tokens)")


@dataclass(frozen=True)
class Config:
    """One configuration: GPU block size and pool, CPU chunks and blocks per chunk."""

    block_size_tokens: int
    num_gpu_blocks: int
    cpu_chunks: int
    blocks_per_chunk: int
    eviction_policy: str = "lru"
    store_threshold: int = 0
    secondary: str = ""  # "fs" or "example": a secondary tier below the CPU (TieringOffloadingSpec)


def _model_dir() -> str:
    """A one-layer Llama config with no weights: enough for `ModelConfig` to resolve."""
    folder = Path(_scratch("model-"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
        "num_hidden_layers": 1, "vocab_size": 32000, "max_position_embeddings": 1 << 17,
        "rms_norm_eps": 1e-5, "torch_dtype": "float32", "eos_token_id": 2, "bos_token_id": 1}))
    return str(folder)


# Steps a request may take before it counts as never finishing: a base and a few a token.
STEPS_BASE = 50
STEPS_PER_TOKEN = 8


class NeverFinished(RuntimeError):
    """A request vLLM did not finish within the step bound (`STEPS_BASE`, `STEPS_PER_TOKEN`)."""

    def __init__(self, row: int) -> None:
        super().__init__(f"request {row} did not finish")
        self.row = row


class VllmOffload:
    """vLLM's scheduler and offload connector for one configuration."""

    def __init__(self, config: Config, model_dir: str, max_len: int) -> None:
        import torch
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVTransferConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        b = config.block_size_tokens
        model = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="float32", seed=0,
                            max_model_len=max_len)
        vllm_config = VllmConfig(
            model_config=model,
            device_config=DeviceConfig(device="cpu"),
            cache_config=CacheConfig(block_size=b, enable_prefix_caching=True),
            scheduler_config=SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=max_len,
                                             max_model_len=max_len, is_encoder_decoder=False,
                                             enable_chunked_prefill=True),
            kv_transfer_config=KVTransferConfig(
                kv_connector="OffloadingConnector", kv_role="kv_both",
                kv_connector_extra_config={
                    "cpu_bytes_to_use": config.cpu_chunks * PAGE_BYTES,
                    "block_size": b * config.blocks_per_chunk,
                    "eviction_policy": config.eviction_policy,
                    **({"store_threshold": config.store_threshold}
                       if config.store_threshold else {}),
                    **_tiering(config.secondary)}),
        )
        vllm_config.scheduler_config.async_scheduling = False
        vllm_config.cache_config.num_gpu_blocks = config.num_gpu_blocks
        spec = FullAttentionSpec(block_size=b, num_kv_heads=1, head_size=1,
                                 dtype=torch.float32)
        kv_config = KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[],
                                  kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
        self.scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_config,
                                   structured_output_manager=StructuredOutputManager(vllm_config),
                                   block_size=b, log_stats=True)
        manager = self.scheduler.connector.connector_scheduler.manager
        primary = getattr(manager, "primary_tier", manager)
        assert primary._num_chunks == config.cpu_chunks, (primary._num_chunks, config)
        self.secondary_tiers = list(getattr(manager, "secondary_tiers", ()))
        # Where each request's external hit came from, as vLLM splits it for
        # vllm:prompt_tokens_cached_by_source (recorded, not altered).
        self.sources: dict[str, dict[str, int]] = {}
        split = self.scheduler.connector.get_external_cache_hit_sources

        def recorded(request, num_external_tokens):  # type: ignore[no-untyped-def]
            by_source = split(request, num_external_tokens)
            self.sources[request.request_id] = {str(k.value): int(v)
                                                for k, v in by_source.items()}
            return by_source

        self.scheduler.connector.get_external_cache_hit_sources = recorded
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(b, sha256)
        self.config = config
        self.stats: dict[str, tuple[int, int]] = {}
        self.disk: list[int] = []  # per request, with a secondary tier: its hit tokens

    def step(self) -> None:
        """One engine step: schedule, a worker that finishes every job now, the update."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingWorkerMetadata,
        )
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        out = self.scheduler.schedule()
        self._settle_secondary()  # promotions and lookups this step issued
        meta = out.kv_connector_metadata
        done: dict[int, int] = {}
        recving: set[str] = set()
        if meta is not None:
            for job_id, job in meta.load_jobs.items():
                done[job_id] = 1
                if not job.sync:
                    recving.add(job.req_id)
            for job_id in meta.store_jobs:
                done[job_id] = 1
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            request = self.scheduler.requests[req_id]
            computed = request.num_computed_tokens + out.num_scheduled_tokens[req_id]
            sampled.append([7] if computed >= request.num_prompt_tokens else [])
        kv_out = KVConnectorOutput(
            finished_recving=recving or None,
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done)
            if done else None)
        runner = ModelRunnerOutput(req_ids=req_ids,
                                   req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                   sampled_token_ids=sampled, kv_connector_output=kv_out)
        outputs = self.scheduler.update_from_output(out, runner)
        self._settle_secondary()  # the cascades the completed stores issued
        for client in outputs.values():
            for output in client.outputs:
                stats = output.prefill_stats
                if stats is not None:
                    self.stats[output.request_id] = (stats.num_local_cached_tokens,
                                                     stats.num_external_cached_tokens)

    def _settle_secondary(self) -> None:
        """Every secondary tier's transfers done and its lookups answered before vLLM looks
        again: the fs tier's thread pool drained, its asynchronous existence checks waited
        for (their results applied as its next lookup would apply them)."""
        import time

        from vllm.v1.kv_offload.tiering.async_lookup import LookupPhase

        for tier in self.secondary_tiers:
            tier.drain_jobs()
            lookups = getattr(tier, "_lookup_manager", None)
            if lookups is None:
                continue
            deadline = time.monotonic() + 30.0
            while True:
                lookups.drain_results()
                if not any(state.phase is LookupPhase.IN_FLIGHT
                           for state in lookups._lookup_state.values()):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the fs tier's lookups did not finish")
                time.sleep(0.0005)

    def by_source(self, row: int) -> tuple[int, int]:
        """(host, disk) tokens of request `row`'s external hit."""
        split = self.sources.get(str(row), {})
        unknown = set(split) - {"host", "disk"}
        assert not unknown, (row, split)
        return split.get("host", 0), split.get("disk", 0)

    def run(self, tenants: list[str], prompts: list[list[int]]
            ) -> tuple[list[int], list[int], list[int]]:
        """(gpu hit tokens, cpu hit tokens, refused rows) per request, in order."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        b = self.config.block_size_tokens
        usable = self.config.num_gpu_blocks - 1
        gpu: list[int] = []
        cpu: list[int] = []
        refused: list[int] = []
        for row, (tenant, prompt) in enumerate(zip(tenants, prompts, strict=True)):
            if -(-len(prompt) // b) > usable:
                refused.append(row)
                gpu.append(0)
                cpu.append(0)
                self.disk.append(0)
                continue
            params = SamplingParams(max_tokens=1, ignore_eos=True)
            params.update_from_generation_config({}, eos_token_id=2)
            request = Request(request_id=str(row), prompt_token_ids=prompt,
                              sampling_params=params, pooling_params=None, cache_salt=tenant,
                              block_hasher=self.hasher)
            self.scheduler.add_request(request)
            for _ in range(STEPS_BASE + STEPS_PER_TOKEN * len(prompt)):  # a lookup may take
                self.step()  # a step per promotion
                if str(row) in self.stats and str(row) not in self.scheduler.requests:
                    break
            else:
                raise NeverFinished(row)
            local, external = self.stats[str(row)]
            gpu.append(int(local))
            if self.secondary_tiers:
                host, disk = self.by_source(row)
                assert host + disk == external, (row, host, disk, external)
                cpu.append(host)
                self.disk.append(disk)
            else:
                cpu.append(int(external))
        self.step()  # the last request's finish reaches the connector
        return gpu, cpu, refused

    def run_batched(self, tenants: list[str], prompts: list[list[int]], batch: int
                    ) -> tuple[list[int], list[int]]:
        """(gpu, cpu hit tokens) per request when `batch` requests arrive together and run
        concurrently (each batch stepped until all of it finished): how far the one-at-a-time
        protocol is from a server's overlap. Refused prompts count 0."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        b = self.config.block_size_tokens
        usable = self.config.num_gpu_blocks - 1
        for lo in range(0, len(prompts), batch):
            rows = [r for r in range(lo, min(lo + batch, len(prompts)))
                    if -(-len(prompts[r]) // b) <= usable]
            for row in rows:
                params = SamplingParams(max_tokens=1, ignore_eos=True)
                params.update_from_generation_config({}, eos_token_id=2)
                self.scheduler.add_request(Request(
                    request_id=str(row), prompt_token_ids=prompts[row], sampling_params=params,
                    pooling_params=None, cache_salt=tenants[row], block_hasher=self.hasher))
            for _ in range(50 * batch):
                if all(str(r) in self.stats and str(r) not in self.scheduler.requests
                       for r in rows):
                    break
                self.step()
            else:
                raise RuntimeError(f"batch at {lo} did not finish")
        self.step()
        gpu = [self.stats.get(str(r), (0, 0))[0] for r in range(len(prompts))]
        cpu = [self.stats.get(str(r), (0, 0))[1] for r in range(len(prompts))]
        return [int(x) for x in gpu], [int(x) for x in cpu]


_RUN_FOLDER: list[str] = []  # the run's own temporary folder, removed at exit


def _scratch(prefix: str) -> str:
    """A fresh folder inside the run's own temporary folder, which is removed when the run
    ends: the model configs and every fs tier's chunk files (some hundreds of MB a full fs
    run) do not outlive it."""
    if not _RUN_FOLDER:
        _RUN_FOLDER.append(tempfile.mkdtemp(prefix="tiers-vllm-"))
        atexit.register(shutil.rmtree, _RUN_FOLDER[0], ignore_errors=True)
    return tempfile.mkdtemp(prefix=prefix, dir=_RUN_FOLDER[0])


def _tiering(secondary: str) -> dict[str, object]:
    """The connector's extra config for one secondary tier below the CPU, or none."""
    if not secondary:
        return {}
    tier: dict[str, object] = {"type": secondary}
    if secondary == "fs":  # a fresh folder: the tier starts empty, as the replay's does
        tier.update(root_dir=_scratch("fs-"), n_read_threads=2,
                    n_write_threads=2)
    return {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [tier]}


def configs_for(prompts: list[list[int]], block_size: int, blocks_per_chunk: int,
                eviction_policy: str = "lru", store_threshold: int = 0, secondary: str = ""
                ) -> list[Config]:
    """GPU pools from one block short of the largest prompt (it is refused) to a few times it,
    each with CPU tiers from half the largest prompt's chunks (its offers fail whole) to a
    third of every chunk the trace offers."""
    blocks = [-(-len(p) // block_size) for p in prompts]
    largest = max(blocks)
    per_chunk = block_size * blocks_per_chunk
    largest_chunks = max(len(p) // per_chunk for p in prompts)
    chunk_total = sum(len(p) // per_chunk for p in prompts)
    cpu_sizes = sorted({max(2, largest_chunks // 2), 2 * largest_chunks,
                        max(2, chunk_total // 30), max(2, chunk_total // 3)})
    if secondary:
        # A request whose CPU and secondary hits outrun the CPU tier is deferred forever in
        # vLLM 0.33 (each promotion evicts the run's own head, found again next step): the
        # CPU tiers here hold the largest prompt, from exactly to a third of the trace.
        cpu_sizes = sorted({largest_chunks, largest_chunks + 2, 2 * largest_chunks,
                            max(largest_chunks, chunk_total // 3)})
    return [Config(block_size, gpu, chunks, blocks_per_chunk, eviction_policy, store_threshold,
                   secondary)
            for gpu in (largest, largest + 2, 2 * largest, 4 * largest) for chunks in cpu_sizes]


def ours(path: Path, config: Config):  # type: ignore[no-untyped-def]
    """(gpu hits, cpu hits[, disk hits]) per request from yaotu_trace's tiered replay, or None
    where it does not import (the engine's environment need not have numba)."""
    try:
        import numba  # noqa: F401

        from yaotu_trace.ingest import read_trace
        from yaotu_trace.prefix.prepare import prepare
        from yaotu_trace.prefix.rules import rules_for
        from yaotu_trace.prefix.tiers import TierName, TierPolicy, TierSpec, replay_tiers
    except ImportError:
        return None
    rules = rules_for("vllm", block_size_tokens=config.block_size_tokens,
                      capacity_blocks=config.num_gpu_blocks)
    chains = prepare(read_trace(path)).chains(rules)
    tier = TierSpec(name=TierName.CPU, capacity_chunks=config.cpu_chunks,
                    chunk_tokens=config.block_size_tokens * config.blocks_per_chunk,
                    store_threshold=config.store_threshold)
    tiers = (tier,)
    if config.secondary:  # vLLM's secondary tiers never evict: one at least every chunk's size
        chunk = config.block_size_tokens * config.blocks_per_chunk
        every = int((chains.offsets[1:] - chains.offsets[:-1]).sum()) * chains.block_size_tokens
        tiers += (TierSpec(name=TierName.DISK, capacity_chunks=every // chunk + 1,
                           chunk_tokens=chunk),)
    policy = TierPolicy.VLLM_ARC if config.eviction_policy == "arc" else TierPolicy.VLLM
    result = replay_tiers(chains, rules, tiers, policy)
    return (result.gpu_hit_tokens, *result.tier_hit_tokens)


MOONCAKE = Path("/work/shared/traces/mooncake/conversation_trace.jsonl")
MOONCAKE_SCAN = 6000  # requests of the conversation trace the slice is drawn from
MOONCAKE_REQUESTS = 250  # requests in the slice
MOONCAKE_TOKENS_PER_ID = 16  # each 512-token hash id becomes 16 tokens (one 16-token block)


def write_mooncake_slice(path: Path) -> None:
    """A slice of Mooncake's conversation trace as token ids: of its first `MOONCAKE_SCAN`
    requests, the conversations (requests sharing their first three hash ids) with at least
    three turns, whole, in order of first appearance until `MOONCAKE_REQUESTS` requests, in
    arrival order. Each hash id becomes `MOONCAKE_TOKENS_PER_ID` tokens of its own (id·16 + k),
    the prompt its ids' tokens cut to input_length scaled by 16/512 (rounded up), so the
    requests share exactly the prefixes their ids share."""
    import pandas as pd

    with MOONCAKE.open() as lines:
        records = [json.loads(line) for line in itertools.islice(lines, MOONCAKE_SCAN)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, record in enumerate(records):
        groups.setdefault(tuple(record["hash_ids"][:3]), []).append(i)
    chosen: list[int] = []
    for members in groups.values():
        if len(members) >= 3 and len(chosen) + len(members) <= MOONCAKE_REQUESTS:
            chosen += members
    rows = []
    per = MOONCAKE_TOKENS_PER_ID
    for i in sorted(chosen):
        record = records[i]
        length = -(-int(record["input_length"]) * per // 512)
        tokens = [h * per + k for h in record["hash_ids"] for k in range(per)][:length]
        rows.append({"request_id": f"mooncake-{i:04d}",
                     "arrival_s": float(record["timestamp"]) / 1000.0, "tenant": "t0",
                     "prompt_len": len(tokens), "output_len": int(record["output_length"]),
                     "prompt_tokens": tokens})
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False, compression="zstd", use_dictionary=False,
                                  column_encoding={"prompt_tokens": "DELTA_BINARY_PACKED"})


TRACES = {  # name -> (file, (block size, blocks per chunk) pairs)
    "mixed": (ROOT / "tests/fixtures/engines/trace_mixed.parquet", ((16, 1), (16, 2), (16, 4))),
    "sessions": (ROOT / "tests/fixtures/engines/trace_sessions.parquet", ((16, 1), (16, 3))),
    "mooncake": (OUT / "trace_mooncake.parquet", ((16, 1), (16, 4))),
    # Blocks of 4 and 8 tokens (`traces.TIER_SHAPES`): chunks of 1 to 5 blocks.
    "blocks4": (ROOT / "tests/fixtures/engines/trace_blocks4.parquet", ((4, 1), (4, 2), (4, 5))),
    "blocks8": (ROOT / "tests/fixtures/engines/trace_blocks8.parquet", ((8, 1), (8, 3))),
}


def main(argv: list[str] | None = None) -> int:
    """Drive vLLM on every trace and configuration, write the fixtures, print the table."""
    import torch
    import vllm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--eviction-policy", choices=("lru", "arc"), default="lru",
                        help="the CPU manager's eviction_policy; arc writes "
                        "vllm_offload_<trace>_arc.json")
    parser.add_argument("--store-threshold", type=int, default=0,
                        help="the CPU manager's store_threshold; 2 or more writes "
                        "vllm_offload_<trace>_threshold<N>.json")
    parser.add_argument("--secondary", choices=("fs", "example"), default="",
                        help="one secondary tier below the CPU (TieringOffloadingSpec): vLLM's "
                        "file-system tier in a fresh folder, or its in-memory example tier; "
                        "writes vllm_offload_<trace>_<fs|example>.json with disk_hit_tokens")
    parser.add_argument("--batch", type=int, default=0,
                        help="also run each configuration with this many requests arriving "
                        "together, print the totals beside the one-at-a-time ones, and write "
                        "no fixture")
    args = parser.parse_args(argv)
    if not TRACES["mooncake"][0].exists():
        write_mooncake_slice(TRACES["mooncake"][0])
    model_dir = _model_dir()
    header = (f"{'trace':<9} {'B':>3} {'K':>2} {'N':>5} {'cpu':>5} {'gpu hits':>9} "
              f"{'cpu hits':>9} {'refused':>7} {'ours gpu':>9} {'ours cpu':>9} {'differ':>6}")
    print(header)
    print("-" * len(header))
    for name, (path, sizes) in TRACES.items():
        if args.only and name not in args.only:
            continue
        tenants, prompts = load_prompts(path)
        max_len = 1 << max(12, (max(len(p) for p in prompts) + 2).bit_length())
        configs = []
        for block_size, per_chunk in sizes:
            for config in configs_for(prompts, block_size, per_chunk, args.eviction_policy,
                                      args.store_threshold, args.secondary):
                engine = VllmOffload(config, model_dir, max_len)
                gpu, cpu, refused = engine.run(tenants, prompts)
                if args.batch:
                    batched = VllmOffload(config, model_dir, max_len)
                    bgpu, bcpu = batched.run_batched(tenants, prompts, args.batch)
                    differ = sum(1 for pair in zip(gpu, cpu, bgpu, bcpu, strict=True)
                                 if pair[:2] != pair[2:])
                    print(f"{name:<9} K={per_chunk} N={config.num_gpu_blocks} "
                          f"cpu={config.cpu_chunks}: one at a time gpu {sum(gpu):,} cpu "
                          f"{sum(cpu):,}; {args.batch} together gpu {sum(bgpu):,} cpu "
                          f"{sum(bcpu):,}; requests differing {differ}", flush=True)
                    continue
                mine = ours(path, config)
                theirs = [gpu, cpu, *([engine.disk] if args.secondary else [])]
                differ = "-"
                mg = mc = "-"
                if mine is not None:
                    mg, mc = int(mine[0].sum()), int(mine[1].sum())
                    differ = str(sum(1 for i in range(len(gpu))
                                     if tuple(t[i] for t in theirs)
                                     != tuple(int(m[i]) for m in mine)))
                disk = f" disk {sum(engine.disk):,} ours {int(mine[2].sum()) if mine else '-'}" \
                    if args.secondary else ""
                print(f"{name:<9} {block_size:>3} {per_chunk:>2} {config.num_gpu_blocks:>5} "
                      f"{config.cpu_chunks:>5} {sum(gpu):>9} {sum(cpu):>9} {len(refused):>7} "
                      f"{mg!s:>9} {mc!s:>9} {differ:>6}{disk}", flush=True)
                configs.append({"block_size_tokens": block_size,
                                "num_gpu_blocks": config.num_gpu_blocks,
                                "cpu_chunks": config.cpu_chunks,
                                "blocks_per_chunk": per_chunk,
                                "gpu_hit_tokens": gpu, "cpu_hit_tokens": cpu,
                                **({"disk_hit_tokens": engine.disk} if args.secondary else {}),
                                "refused": refused})
        if args.batch:
            continue
        suffix = "" if args.eviction_policy == "lru" else f"_{args.eviction_policy}"
        if args.store_threshold >= 2:
            suffix += f"_threshold{args.store_threshold}"
        if args.secondary:
            suffix += f"_{args.secondary}"
        write_fixture(args.out_dir / f"vllm_offload_{name}{suffix}.json", engine="vllm",
                      engine_version=vllm.__version__, torch_version=torch.__version__,
                      trace=path.name, configs=configs,
                      protocol=PROTOCOL.format(policy=args.eviction_policy,
                                               threshold=args.store_threshold)
                      + (SECONDARY_PROTOCOL.format(secondary=args.secondary)
                         if args.secondary else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
