"""The tier sections of `trace analyze`, `trace diagnose` and `trace report` (`--tier`): which
source served what with tiers below a GPU pool of `--capacity` (analyze) or `--kv-capacity`
(diagnose, report), and the hits over GPU size × tier size around that pool (`trace sweep
--tier` draws it over the GPU sizes it is given)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from yaotu_trace.commands.shared.pricing import PricingOptions, price_replay
from yaotu_trace.data.engine_facts import tier_sources
from yaotu_trace.data.schema import Trace
from yaotu_trace.errors import ConfigError, TraceReadError
from yaotu_trace.prefix.options import ReplayOptions, check_tier_options

if TYPE_CHECKING:  # annotations only: a command without --tier loads none of them
    from yaotu_trace.commands.shared.curve_pricing import CurvePricer
    from yaotu_trace.data.engine_metrics import EngineMetrics
    from yaotu_trace.diagnosis.options import DiagnosisOptions
    from yaotu_trace.prefix.tiers.spec import TierSetup


def tiers_section(loaded: Trace, options: ReplayOptions) -> dict[str, Any] | None:
    """The tiered replay's totals (`TieredResult.to_dict`) under the preset's rules and the GPU
    pool of `options.capacity`; None without `--tier`."""
    return priced_tiers(loaded, options, None)[0]


def priced_tiers(loaded: Trace, options: ReplayOptions, pricing: PricingOptions | None
                 ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the tiers section, its `prefill_pricing` section or None without `pricing`'s GPU)."""
    if not options.tiers:
        return None, None
    from yaotu_trace.prefix.trace import replay_trace, replay_trace_with_requests

    rules, preset, _ = options.effective_rules(loaded)
    blocks = options.capacity_blocks(options.capacity, rules.block_size_tokens)
    if blocks is not None:
        rules = rules.with_(capacity_blocks=blocks)
    setup = options.tier_setup(rules, preset)
    priced = None
    if pricing is None or pricing.gpu is None:
        summary = replay_trace(loaded, rules, preset=preset, waterfall=False, tiers=setup)
    else:
        summary, requests = replay_trace_with_requests(loaded, rules, preset=preset,
                                                       waterfall=False, tiers=setup)
        priced = price_replay(loaded, options, rules, requests.to_columns(), pricing,
                              summary.tiers)
    assert summary.tiers is not None
    section = {"preset": preset, "gpu_capacity": options.capacity, "gpu_capacity_blocks": blocks,
               "block_size_tokens": rules.block_size_tokens, **summary.tiers}
    if (note := options.capacity_unit_note(rules, preset)) is not None:
        section["notes"] = [note, *section.get("notes", ())]
    return section, priced


def under_deployment(tiers: ReplayOptions | None, options: DiagnosisOptions
                     ) -> ReplayOptions | None:
    """`--tier` options under the deployment a diagnosis states (`--preset`, `--kv-capacity`
    as the GPU pool, the model and its KV bytes), checked before the trace is read.

    The GPU pool is the one the diagnosis reads (its settings' `kv_capacity_tokens`), handed
    to the tiers in tokens: a `--kv-capacity` in blocks counts the diagnosis's blocks
    (`--block-size`, 16 tokens unless told), and given on as blocks a trace of 512-token block
    ids would have counted them in its own, a pool 32 times the diagnosis's."""
    if tiers is None:
        return None
    from yaotu_trace.catalog.units import parse_capacity
    from yaotu_trace.commands.settings import engine_settings

    capacity = options.kv_capacity
    settings = engine_settings(options)[0]
    tokens = settings.kv_capacity_tokens
    if capacity is not None and tokens is not None:
        blocks = parse_capacity(capacity).unit == "blocks"
        capacity = f"{int(tokens)}tok"
        try:
            parse_capacity(capacity)
        except ConfigError:
            of = f" of {settings.block_size_tokens}-token blocks" if blocks else ""
            raise ConfigError(f"--kv-capacity {options.kv_capacity!r} is {int(tokens)} tokens"
                              f"{of}, more than a GPU pool below tiers can be; give a real "
                              "cache size") from None
    tiers = replace(tiers, preset=options.preset, capacity=capacity,
                    model=options.model, kv_bytes_per_token=options.kv_bytes_per_token,
                    kv_dtype=options.kv_dtype)
    check_tier_options(tiers)
    return tiers


# The tier sizes of the two-dimensional curve, as shares of the --tier size given.
TIER_SHARES: tuple[float, ...] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
# ... and around a GPU pool the tier is no larger than: a tier that small holds what the pool
# holds and serves little (`replay.small_tier_note`), so the curve looks above it.
TIER_MULTIPLES: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def tiered_curve(loaded: Any, rules: Any, tiers: TierSetup,
                 gpu_blocks: tuple[int | None, ...], pricer: CurvePricer | None = None,
                 priced: list[dict[str, Any]] | None = None, *,
                 threads: int = 1, shares: tuple[float, ...] = TIER_SHARES) -> dict[str, Any]:
    """Hits at every GPU size × tier size (the --tier size times each of `shares`: its
    halvings down to 1/32 unless told): one exact tiered replay per point
    (`prefix/tiers/curve.py`); with `pricer`, each point priced into `priced`."""
    from yaotu_trace.prefix.prepare import prepare
    from yaotu_trace.prefix.tiers.curve import tier_curve
    from yaotu_trace.prefix.tiers.replay import approximation_note

    tier = tiers.tiers[0]
    sizes = tuple(sorted({max(1, int(tier.capacity_chunks * share)) for share in shares}))
    chains = prepare(loaded, stream=True).chains(rules)
    kv = tiers.kv_bytes_per_token
    block_tokens = rules.block_size_tokens

    def observe(blocks: int | None, chunks: int | None, gpu_hits: np.ndarray,
                tier_hits: np.ndarray | None) -> None:
        if pricer is None or priced is None:
            return
        pool = None if blocks is None or kv is None else float(blocks * block_tokens * kv)
        point: dict[str, Any] = {"gpu_capacity_blocks": blocks, "tier_capacity_chunks": chunks}
        if tier_hits is None:
            point["gpu"] = pricer.gpu_point(gpu_hits, pool)
        else:
            size = float(chunks or 0) * tier.chunk_tokens * (kv or pricer.kv_bytes_per_token)
            point["tier"] = pricer.tier_point(gpu_hits, str(tier.name), tier_hits, size)
        priced.append(point)

    curve = tier_curve(chains, rules, tier, tiers.policy, gpu_blocks, sizes,
                       observe=observe if pricer is not None else None, threads=threads)
    out = curve.to_dict()
    out["policy"] = str(tiers.policy)
    out["kv_bytes_per_token"] = tiers.kv_bytes_per_token
    out["tier_sizes"] = "halvings" if max(shares) <= 1 else "doublings"
    # Each point runs at its GPU size: SGLang's one tree wherever that size is finite.
    notes = {approximation_note(chains, rules.with_(capacity_blocks=blocks), (tier,),
                                tiers.policy) for blocks in gpu_blocks} - {None}
    out["note"] = next(iter(notes), None) or _below_every_pool(tiers, sizes, gpu_blocks,
                                                               block_tokens)
    return out


def _below_every_pool(tiers: TierSetup, sizes: tuple[int, ...],
                      gpu_blocks: tuple[int | None, ...], block_tokens: int) -> str | None:
    """What the curve says when none of its tier sizes is larger than its smallest GPU pool
    under rules that keep the latest chunks (`replay.keeps_the_latest`): every cell of such a
    tier holds what the pool holds (None otherwise)."""
    from yaotu_trace.prefix.tiers.replay import keeps_the_latest

    tier = tiers.tiers[0]
    pools = [blocks * block_tokens for blocks in gpu_blocks if blocks is not None]
    largest = max(sizes) * tier.chunk_tokens
    if not pools or not keeps_the_latest(tiers.policy, tier) or largest > min(pools):
        return None
    return (f"no {tier.name} size here ({largest:,} tokens at most) is larger than the smallest "
            f"GPU pool ({min(pools):,} tokens): such a tier holds the most recent chunks, most "
            "of which the pool still holds, and serves little; a --tier larger than the pools "
            "shows where it starts to serve")


# The GPU sizes of the curve around a pool (analyze, report), as shares of that pool: what a
# smaller or a larger GPU pool would reuse, beside what a tier below it adds.
GPU_SHARES: tuple[float, ...] = (1 / 4, 1 / 2, 1.0, 2.0)


def tier_curve_around(loaded: Trace, options: ReplayOptions) -> dict[str, Any] | None:
    """The `tier_curve` section at a quarter, half, once and twice the GPU pool of
    `options.capacity` × the tier's size and its halvings (its doublings when it is no larger
    than the pool); None without exactly one tier or without a GPU pool (nothing reaches a
    tier below an unlimited one)."""
    if len(options.tiers) != 1 or options.capacity is None:
        return None
    rules, preset, _ = options.effective_rules(loaded)
    pool = options.capacity_blocks(options.capacity, rules.block_size_tokens)
    setup = options.tier_setup(rules, preset)
    if pool is None or setup is None:
        return None
    gpu_blocks = tuple(sorted({max(1, round(pool * share)) for share in GPU_SHARES}))
    small = setup.tiers[0].capacity_tokens <= pool * rules.block_size_tokens
    return tiered_curve(loaded, rules, setup, gpu_blocks,
                        shares=TIER_MULTIPLES if small else TIER_SHARES)


def tier_sections(loaded: Trace, options: ReplayOptions, metrics: EngineMetrics | None, *,
                  curve: bool = False) -> dict[str, Any]:
    """The `tiers` section, with `observed_tiers` when `metrics` split the engine's hits by
    tier and, with `curve`, the `tier_curve` around the GPU pool (`tier_curve_around`)."""
    section = tiers_section(loaded, options)
    out: dict[str, Any] = {"tiers": section}
    if (seen := observed_tiers(metrics, section, loaded)) is not None:
        out["observed_tiers"] = seen
    if curve and (around := tier_curve_around(loaded, options)) is not None:
        out["tier_curve"] = around
    return out


# Counters holding less than this share of the trace's prompt tokens cannot have counted its
# traffic (one instance of a hundred still would): the export is of another run.
MIN_COUNTED_SHARE = 0.01
# Counters holding more than this many times the trace's prompt tokens counted traffic the
# trace does not hold (a warm-up's worth is allowed): their shares by tier are another mix's.
MAX_COUNTED_SHARE = 1.5
# A log that names its requests (LMCache's lookup lines) is of this trace's run when at least
# this share of them are the trace's, by request id or else by prompt length (a deployment's
# log and its capture may name requests differently).
MIN_SAME_REQUESTS = 0.5


# The tier policies whose replay an engine's own split by tier can be held against, by the
# prefix of the series that holds it: vLLM's split covers its native offload and a KV
# connector such as LMCache; SGLang's and LMCache's are their own engines'.
POLICIES_OF_SERIES: dict[str, tuple[str, ...]] = {
    "vllm:": ("vllm-native", "vllm-native-arc", "lmcache"),
    "sglang:": ("write_through", "write_through_selective", "write_back"),
    "log:lmcache": ("lmcache",),
}


def _same_engine(metrics: EngineMetrics, source: str, policy: str) -> None:
    """Refuse an engine's split by tier held against the replay of another engine's tiers."""
    for prefix, policies in POLICIES_OF_SERIES.items():
        if source.startswith(prefix) and policy not in policies:
            raise ConfigError(
                f"{metrics.path}: its hits by tier are {source}, which the tiers of "
                f"--tier-policy {policy} do not describe; replay that engine's tiers "
                f"(--tier-policy {' or '.join(policies)}) or drop --metrics")


def observed_tiers(metrics: EngineMetrics | None, tiers: dict[str, Any] | None,
                   trace: Trace | None = None) -> dict[str, Any] | None:
    """The engine's hits by tier in `metrics` against the tiered replay's of `trace` (`tiers`,
    a tiers section): the `observed_tiers` section, or None when either is missing. Refused
    when the export's prompt-token counter holds under `MIN_COUNTED_SHARE` or over
    `MAX_COUNTED_SHARE` times the trace's prompt tokens, or when it names requests of which
    under `MIN_SAME_REQUESTS` are those of `trace` (when given). What the reader met in the
    file and did not use is named in the section's notes, beside the comparison, whichever
    command holds it.
    """
    found = None if metrics is None or tiers is None else tier_sources(metrics)
    if found is None or tiers is None or metrics is None:
        return None
    if tiers.get("policy") is not None:
        _same_engine(metrics, found.source, str(tiers["policy"]))
    if trace is not None:
        _same_requests(metrics, trace)
    prompt = int(tiers["prompt_tokens"])
    if found.prompt_tokens is not None and found.prompt_tokens < MIN_COUNTED_SHARE * prompt:
        raise TraceReadError(
            f"{metrics.path}: its counters hold {found.prompt_tokens:,.0f} prompt tokens, under "
            f"{MIN_COUNTED_SHARE:.0%} of the trace's {prompt:,}: they did not count this trace's "
            "traffic (export the metrics of this trace's run)")
    if found.prompt_tokens is not None and found.prompt_tokens > MAX_COUNTED_SHARE * prompt:
        raise TraceReadError(
            f"{metrics.path}: its counters hold {found.prompt_tokens:,.0f} prompt tokens, "
            f"{found.prompt_tokens / prompt:.1f} times the trace's {prompt:,}: they counted "
            "traffic the trace does not hold (export the metrics of this trace's run, or a "
            "range query over the trace's time)")
    _same_cpu_tier(metrics, tiers)
    from yaotu_trace.prefix.tiers.observed import compare_tiers

    section = compare_tiers(found, tiers).to_dict()
    return {**section, "notes": [*metrics.notes, *section["notes"]]}


def _same_cpu_tier(metrics: EngineMetrics, tiers: dict[str, Any]) -> None:
    """Refuse a replayed CPU tier of another size than the one the engine's export states
    (vLLM's `kv_offload_config_info`): its hits by tier would be held against a tier the
    engine did not have."""
    stated = metrics.gauge("cpu_tier_tokens", how="max")
    cpu = next((t for t in tiers.get("tiers", ()) if t.get("name") == "cpu"), None)
    if stated is None or not len(stated) or cpu is None or cpu.get("capacity_tokens") is None:
        return
    engine = int(stated["value"].max())
    if engine != int(cpu["capacity_tokens"]):
        raise ConfigError(
            f"{metrics.path}: the engine's CPU tier held {engine:,} tokens "
            f"(vllm:kv_offload_config_info), the replayed one {int(cpu['capacity_tokens']):,}; "
            f"replay the tier the engine had (--tier cpu={engine}tok) or drop --metrics")


def _same_requests(metrics: EngineMetrics, trace: Trace) -> None:
    """Refuse a log whose requests are not the trace's: too few of the ids it names are in
    the trace, and too few of its lookups' token counts are trace prompt lengths (each length
    matched once)."""
    named = metrics.request_tokens
    if not named:
        return
    df = trace.requests
    ids = set(df["request_id"].astype(str))
    by_id = sum(1 for rid, _ in named if rid in ids) / len(named)
    lengths = Counter(int(n) for n in df["prompt_len"])
    by_length = sum((Counter(n for _, n in named) & lengths).values()) / len(named)
    if max(by_id, by_length) < MIN_SAME_REQUESTS:
        raise TraceReadError(
            f"{metrics.path}: its {len(named):,} LMCache lookups are of another run: "
            f"{by_id:.0%} of their request ids and {by_length:.0%} of their token counts are "
            f"the trace's (at least {MIN_SAME_REQUESTS:.0%} of one or the other are); give "
            "the log of this trace's run")
