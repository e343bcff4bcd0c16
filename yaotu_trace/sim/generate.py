"""Deterministic synthetic request traces: named scenarios of prefix reuse and arrival shape.

`generate_requests(options)` returns a canonical request table (token ids, lengths, arrivals,
tenant, session, model); the caller writes it with `data.canonical.write_trace`. The same
options and seed always give the same table: one `numpy.random.Generator(PCG64(seed))` drives
every draw, in a fixed order, and nothing reads the clock.

Shapes follow the public traces: Azure LLM inference 2023 conversation and code lengths (prompt
median ~1,000 / ~1,500 tokens, code output median 13), Azure code burstiness (interarrival CV 13
there; `bursty` targets ~5), Mooncake long prompts (median ~7k, p99 ~85k tokens) and agentic
contexts that grow to tens of thousands of tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, assert_never

import numpy as np
import pandas as pd
import pyarrow as pa

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix import memory
from yaotu_trace.sim.scenario import Scenario
from yaotu_trace.sim.summary import run_scenario
from yaotu_trace.sim.workloads import DEFAULT_MODEL, WorkloadKind

# Llama 3 has 128,256 ids; the top 256 are special tokens, which prompts here never contain.
VOCAB_SIZE: Final = 128_000
# NOTE: natural-language token frequencies are roughly Zipfian (exponent near 1). Drawing ids that
# way, rather than uniformly, keeps generated files compressible and chance matches realistic.
ZIPF_EXPONENT: Final = 1.0
# Arrivals are rounded to the microsecond so that text formats are short and stable.
ARRIVAL_DECIMALS: Final = 6


# One line per scenario: what it models and the property the tests pin.
SCENARIOS: Final[Mapping[WorkloadKind, str]] = {
    WorkloadKind.CHAT: (
        "multi-turn chat: each turn's prompt is the previous prompt + its output + a new user "
        "message; a few system prompts per tenant; Poisson session starts"
    ),
    WorkloadKind.MULTI_TENANT: (
        "single-turn requests from several tenants; some system prompts are identical across "
        "tenants (tenant isolation forfeits that reuse), others are tenant-specific"
    ),
    WorkloadKind.RAG: (
        "retrieval-augmented prompts: a tenant system prompt + popular shared documents in varied "
        "order + a question, so much reuse is not a prefix"
    ),
    WorkloadKind.BURSTY: (
        "code completion with on/off bursty arrivals (interarrival CV ~5, like Azure 2023 code): "
        "requests in a burst share a file context; short outputs"
    ),
    WorkloadKind.AGENTIC: (
        "agent loops: a large per-tenant tools prompt, then each step appends the previous "
        "output and a tool result, so contexts grow to tens of thousands of tokens"
    ),
    WorkloadKind.LONG_PREFILL: (
        "a mix of long-document prompts (Mooncake-like, up to 120k tokens, some asked about "
        "twice) and short prompts with long streaming decodes"
    ),
    WorkloadKind.DIAG_HEALTHY: (
        "diagnosis fixture, simulated: moderate Poisson load on a roomy engine with prefix "
        "caching and chunked prefill; no axis is a bottleneck"
    ),
    WorkloadKind.DIAG_BURST: (
        "diagnosis fixture, simulated: steady load, then a burst far above what the engine's "
        "seats serve; queueing from an arrival burst"
    ),
    WorkloadKind.DIAG_DISPATCH: (
        "diagnosis fixture, simulated: host work that does not overlap the GPU idles it "
        "between steps while requests wait; queueing from dispatch overhead"
    ),
    WorkloadKind.DIAG_KV_CHURN: (
        "diagnosis fixture, simulated: a KV pool too small for the concurrency; long outputs "
        "preempt and recompute again and again"
    ),
    WorkloadKind.DIAG_LONG_PREFILL: (
        "diagnosis fixture, simulated: long prompts prefilled without chunking stall the "
        "streaming decodes of short requests"
    ),
    WorkloadKind.DIAG_PREFIX_RECOMPUTE: (
        "diagnosis fixture, simulated: every request starts with one long system prompt but "
        "the engine's cache keys never match, so it is prefilled again and again"
    ),
    WorkloadKind.DIAG_MINUTE_BURST: (
        "diagnosis fixture, simulated: Poisson load at about half of what the engine serves, "
        "plus one minute at twice it; the queue grows only in that minute"
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioDefaults:
    """Values used when an option is not given: `requests`, mean `rate_per_s`, `tenants`."""

    requests: int
    rate_per_s: float
    tenants: int


DEFAULTS: Final[Mapping[WorkloadKind, ScenarioDefaults]] = {
    WorkloadKind.CHAT: ScenarioDefaults(requests=1000, rate_per_s=5.0, tenants=4),
    WorkloadKind.MULTI_TENANT: ScenarioDefaults(requests=1000, rate_per_s=5.0, tenants=16),
    WorkloadKind.RAG: ScenarioDefaults(requests=1000, rate_per_s=4.0, tenants=2),
    WorkloadKind.BURSTY: ScenarioDefaults(requests=1000, rate_per_s=2.5, tenants=3),
    WorkloadKind.AGENTIC: ScenarioDefaults(requests=300, rate_per_s=1.0, tenants=2),
    WorkloadKind.LONG_PREFILL: ScenarioDefaults(requests=500, rate_per_s=3.4, tenants=3),
    WorkloadKind.DIAG_HEALTHY: ScenarioDefaults(requests=240, rate_per_s=4.0, tenants=2),
    WorkloadKind.DIAG_BURST: ScenarioDefaults(requests=240, rate_per_s=2.0, tenants=2),
    WorkloadKind.DIAG_DISPATCH: ScenarioDefaults(requests=240, rate_per_s=4.0, tenants=2),
    WorkloadKind.DIAG_KV_CHURN: ScenarioDefaults(requests=200, rate_per_s=2.0, tenants=2),
    WorkloadKind.DIAG_LONG_PREFILL: ScenarioDefaults(requests=200, rate_per_s=2.0, tenants=2),
    WorkloadKind.DIAG_PREFIX_RECOMPUTE: ScenarioDefaults(requests=200, rate_per_s=2.0, tenants=1),
    WorkloadKind.DIAG_MINUTE_BURST: ScenarioDefaults(requests=2200, rate_per_s=2.8, tenants=2),
}


# NOTE: the whole trace is held in memory until it is written (token lists, then the table and
# the writer's buffers), so the need grows with the count. Peak bytes per request and per tenant
# were measured on this generator (peak RSS at 4,000 against 200 requests, and at 5,000 against
# 1 tenant) and doubled for allocator slack and longer-tailed draws.
BYTES_PER_REQUEST: Final[Mapping[WorkloadKind, int]] = {
    WorkloadKind.CHAT: 72_000,
    WorkloadKind.MULTI_TENANT: 64_000,
    WorkloadKind.RAG: 96_000,
    WorkloadKind.BURSTY: 80_000,
    WorkloadKind.AGENTIC: 1_600_000,
    WorkloadKind.LONG_PREFILL: 400_000,
    WorkloadKind.DIAG_HEALTHY: 64_000,
    WorkloadKind.DIAG_BURST: 64_000,
    WorkloadKind.DIAG_DISPATCH: 64_000,
    WorkloadKind.DIAG_KV_CHURN: 64_000,
    WorkloadKind.DIAG_LONG_PREFILL: 160_000,
    WorkloadKind.DIAG_PREFIX_RECOMPUTE: 224_000,
    WorkloadKind.DIAG_MINUTE_BURST: 64_000,
}
# Each tenant's own system prompts, documents or tool prompts (rag and agentic: ~80 kB, doubled).
BYTES_PER_TENANT: Final = 160_000
# A hard cap where the free memory is unknown (not Linux), and on time: generation runs about
# half a millisecond a request in Python, so 10 million is more than an hour.
MAX_REQUESTS: Final = 10_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSetup:
    """How a diagnosis fixture's requests are run through the simulator (`trace simulate`
    options; None: the simulator's default). Model and GPU are `ENGINE_MODEL`/`ENGINE_GPU`."""

    kv_blocks: int | None = None
    max_num_seqs: int | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    host_gap_ms: float | None = None


ENGINE_MODEL: Final = "Llama-3.1-8B"
ENGINE_GPU: Final = "H100-SXM"
ENGINE_BLOCK_SIZE_TOKENS: Final = 16
# NOTE: each setup produces exactly one problem on its scenario's requests (docs/diagnose.md).
ENGINES: Final[Mapping[WorkloadKind, EngineSetup]] = {
    WorkloadKind.DIAG_HEALTHY: EngineSetup(max_num_seqs=64),
    WorkloadKind.DIAG_BURST: EngineSetup(max_num_seqs=16),
    WorkloadKind.DIAG_DISPATCH: EngineSetup(max_num_seqs=16, host_gap_ms=40.0),
    WorkloadKind.DIAG_KV_CHURN: EngineSetup(kv_blocks=320),
    WorkloadKind.DIAG_LONG_PREFILL: EngineSetup(chunked_prefill=False),
    WorkloadKind.DIAG_PREFIX_RECOMPUTE: EngineSetup(prefix_caching=False, chunked_prefill=False),
    WorkloadKind.DIAG_MINUTE_BURST: EngineSetup(max_num_seqs=16),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateOptions:
    """What to generate. `None` means the scenario's default (see `DEFAULTS`)."""

    scenario: WorkloadKind
    seed: int = 0
    requests: int | None = None
    rate_per_s: float | None = None
    tenants: int | None = None
    model: str = DEFAULT_MODEL

    def resolved(self) -> ScenarioDefaults:
        """The effective request count, rate and tenant count, validated."""
        base = DEFAULTS[self.scenario]
        requests = base.requests if self.requests is None else self.requests
        rate_per_s = base.rate_per_s if self.rate_per_s is None else self.rate_per_s
        tenants = base.tenants if self.tenants is None else self.tenants
        if requests < 1:
            raise ConfigError(f"--requests {requests}: give at least 1 request")
        if not (np.isfinite(rate_per_s) and rate_per_s > 0):
            raise ConfigError(f"--rate {rate_per_s}: give a positive number of requests per second")
        if tenants < 1:
            raise ConfigError(f"--tenants {tenants}: give at least 1 tenant")
        if self.seed < 0:
            raise ConfigError(f"--seed {self.seed}: give a non-negative integer")
        _check_size(self.scenario, requests, tenants)
        return ScenarioDefaults(requests=requests, rate_per_s=rate_per_s, tenants=tenants)


def _check_size(scenario: WorkloadKind, requests: int, tenants: int) -> None:
    """Refuse, before any draw, a count the machine cannot hold: otherwise the generator would
    grow until the kernel kills it (or, past 2**63, loop without end)."""
    if requests >= 2**63:
        raise ConfigError(f"--requests {requests}: beyond the 64-bit range of a count; a trace "
                          f"holds at most {MAX_REQUESTS:,} requests")
    if tenants >= 2**63:
        raise ConfigError(f"--tenants {tenants}: beyond the 64-bit range of a count; give fewer")
    per_request = BYTES_PER_REQUEST[scenario]
    for_tenants = tenants * BYTES_PER_TENANT
    needed = requests * per_request + for_tenants
    available = memory.available_bytes()
    if available is not None and needed > available:
        if for_tenants >= available:
            option = f"--tenants {tenants}"
            fix = f"give at most {available // BYTES_PER_TENANT:,} tenants"
        else:
            option = f"--requests {requests}"
            fix = f"give at most {(available - for_tenants) // per_request:,} requests"
        raise ConfigError(
            f"{option}: a {scenario.value} trace is built in memory, about {_size(per_request)} "
            f"a request and {_size(BYTES_PER_TENANT)} a tenant, so {requests:,} requests of "
            f"{tenants:,} tenants need about {_size(needed)} and {_size(available)} is "
            f"available; {fix}"
        )
    if requests > MAX_REQUESTS:
        raise ConfigError(
            f"--requests {requests}: at most {MAX_REQUESTS:,} requests a trace (it is built in "
            "memory at about half a millisecond a request, so more would take hours); give fewer"
        )


def _size(n_bytes: int) -> str:
    """Bytes in the largest unit that keeps the number at or above 1 (kB = 1000 B)."""
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if value < 1000:
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:,.1f} EB"


@dataclass(slots=True, kw_only=True)
class _Request:
    """One generated request before it becomes a table row."""

    arrival_s: float
    tenant: int
    session: int
    prompt: np.ndarray
    output_len: int
    output: np.ndarray | None = None


@dataclass(slots=True)
class _Draw:
    """All randomness of one generation: token ids, lengths, choices and gaps, from one stream."""

    rng: np.random.Generator
    _cdf: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        weights = 1.0 / np.arange(1, VOCAB_SIZE + 1, dtype=np.float64) ** ZIPF_EXPONENT
        self._cdf = np.cumsum(weights) / weights.sum()

    def tokens(self, n_tokens: int) -> np.ndarray:
        """`n_tokens` Zipf-distributed token ids (int64)."""
        ids = np.searchsorted(self._cdf, self.rng.random(n_tokens), side="right")
        return np.minimum(ids, VOCAB_SIZE - 1).astype(np.int64)

    def length(self, median: float, sigma: float, low: int, high: int) -> int:
        """A log-normal token count with the given median, clipped to [low, high]."""
        return int(np.clip(round(median * np.exp(sigma * self.rng.standard_normal())), low, high))

    def pick(self, weights: np.ndarray) -> int:
        """An index drawn with probability proportional to `weights`."""
        return int(np.searchsorted(np.cumsum(weights), self.rng.random() * weights.sum(), "right"))

    def exp_s(self, mean_s: float) -> float:
        """An exponential gap in seconds."""
        return float(self.rng.exponential(mean_s))

    def chance(self, p: float) -> bool:
        """True with probability `p`."""
        return bool(self.rng.random() < p)


def _zipf_weights(n: int, exponent: float = 1.0) -> np.ndarray:
    """Uneven popularity: item k (0-based) has weight 1 / (k + 1) ** exponent."""
    return 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent


def _cat(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False)


def _sessions(
    n: int,
    draw: _Draw,
    mean_requests: float,
    rate_per_s: float,
    warmup_s: float,
    session: Callable[[float, int], list[_Request]],
) -> list[_Request]:
    """The first `n` requests at or after time 0 of a stationary stream of sessions.

    Sessions start as a Poisson process (rate `rate_per_s / mean_requests`) from `-warmup_s`, so
    the trace is a window of a running service: it opens mid-conversation for some sessions, and
    its request rate does not ramp up from zero. Stops once no later session can arrive earlier
    than the n-th request kept so far.
    """
    out: list[_Request] = []
    start_s = -warmup_s
    index = 0
    while True:
        out.extend(r for r in session(start_s, index) if r.arrival_s >= 0.0)
        index += 1
        start_s += draw.exp_s(mean_requests / rate_per_s)
        if start_s > 0.0 and index % 16 == 0 and len(out) >= n:
            arrivals = np.fromiter((r.arrival_s for r in out), dtype=np.float64, count=len(out))
            if np.count_nonzero(arrivals <= start_s) >= n:
                order = np.argsort(arrivals, kind="stable")[:n]
                return [out[i] for i in order]


def _turns(
    draw: _Draw,
    *,
    start_s: float,
    tenant: int,
    session: int,
    prompt: np.ndarray,
    count: int,
    output: tuple[float, float, int, int],
    stream_tok_per_s: float,
    pause_mean_s: float,
    follow_up: tuple[float, float, int, int],
    max_context_tokens: int | None = None,
) -> list[_Request]:
    """One multi-turn session: each prompt is the previous prompt + its output + a new input.

    `output` and `follow_up` are `_Draw.length` parameters (median, sigma, low, high). A turn
    arrives once the previous output has streamed at `stream_tok_per_s`, after an exponential
    pause; the session ends early once the prompt exceeds `max_context_tokens`.
    """
    at_s = start_s
    out: list[_Request] = []
    for _ in range(count):
        output_len = draw.length(*output)
        output_ids = draw.tokens(output_len)
        out.append(
            _Request(
                arrival_s=at_s,
                tenant=tenant,
                session=session,
                prompt=prompt,
                output_len=output_len,
                output=output_ids,
            )
        )
        at_s += output_len / stream_tok_per_s + draw.exp_s(pause_mean_s)
        prompt = _cat(prompt, output_ids, draw.tokens(draw.length(*follow_up)))
        if max_context_tokens is not None and len(prompt) > max_context_tokens:
            break
    return out


def _open_loop(
    draw: _Draw,
    n: int,
    rate_per_s: float,
    tenant_weights: np.ndarray,
    request: Callable[[int], tuple[np.ndarray, int]],
) -> list[_Request]:
    """`n` single-turn requests at Poisson arrivals; `request(tenant)` draws (prompt, output_len).

    Each request's gap to the next is drawn after its own content, so the draws interleave.
    """
    out: list[_Request] = []
    at_s = 0.0
    for i in range(n):
        tenant = draw.pick(tenant_weights)
        prompt, output_len = request(tenant)
        out.append(
            _Request(arrival_s=at_s, tenant=tenant, session=i, prompt=prompt, output_len=output_len)
        )
        at_s += draw.exp_s(1.0 / rate_per_s)
    return out


def _chat(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Sessions of turns; turn k+1's prompt extends turn k's prompt and output."""
    mean_turns = 4.0
    systems = [
        [draw.tokens(draw.length(500, 0.6, 64, 4000)) for _ in range(2)] for _ in range(tenants)
    ]
    tenant_weights = _zipf_weights(tenants, 0.8)

    def session(start_s: float, index: int) -> list[_Request]:
        turns = min(int(draw.rng.geometric(1.0 / mean_turns)), 16)
        tenant = draw.pick(tenant_weights)
        prompt = _cat(
            systems[tenant][int(draw.rng.integers(2))], draw.tokens(draw.length(60, 0.9, 4, 2000))
        )
        # The next turn comes after the answer streams (~40 tok/s) and the user reads and types.
        return _turns(draw, start_s=start_s, tenant=tenant, session=index, prompt=prompt,
                      count=turns, output=(130, 0.8, 1, 2000), stream_tok_per_s=40.0,
                      pause_mean_s=20.0, follow_up=(60, 0.9, 4, 2000))

    return _sessions(n, draw, mean_turns, rate_per_s, 600.0, session)


def _multi_tenant(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Single-turn requests; a shared pool of system prompts plus tenant-specific ones."""
    # NOTE: the loss from isolation is one first miss per (tenant, shared prompt) pair, so it is
    # visible only with many tenants and several shared prompts (e.g. popular agent frameworks).
    shared = [draw.tokens(draw.length(1200, 0.4, 256, 4000)) for _ in range(8)]
    own = [
        [draw.tokens(draw.length(800, 0.5, 128, 4000)) for _ in range(2)] for _ in range(tenants)
    ]
    tenant_weights = _zipf_weights(tenants, 0.6)

    def request(tenant: int) -> tuple[np.ndarray, int]:
        if draw.chance(0.6):
            system = shared[draw.pick(_zipf_weights(len(shared)))]
        else:
            system = own[tenant][int(draw.rng.integers(2))]
        prompt = _cat(system, draw.tokens(draw.length(150, 0.9, 4, 4000)))
        return prompt, draw.length(150, 0.9, 1, 2000)

    return _open_loop(draw, n, rate_per_s, tenant_weights, request)


def _rag(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """System prompt + k popular documents (order varies) + question, per tenant corpus."""
    systems = [draw.tokens(draw.length(300, 0.4, 64, 2000)) for _ in range(tenants)]
    docs_per_tenant = max(20, n // (4 * tenants))
    corpora = [
        [draw.tokens(draw.length(400, 0.5, 100, 1500)) for _ in range(docs_per_tenant)]
        for _ in range(tenants)
    ]
    popularity = _zipf_weights(docs_per_tenant, 1.1)
    popularity = popularity / popularity.sum()
    tenant_weights = _zipf_weights(tenants, 0.6)

    def request(tenant: int) -> tuple[np.ndarray, int]:
        k = int(draw.rng.integers(3, 6))
        chosen = draw.rng.choice(docs_per_tenant, size=k, replace=False, p=popularity)
        parts = [systems[tenant], *(corpora[tenant][int(d)] for d in chosen)]
        prompt = _cat(*parts, draw.tokens(draw.length(60, 0.7, 4, 1000)))
        return prompt, draw.length(200, 0.7, 1, 2000)

    return _open_loop(draw, n, rate_per_s, tenant_weights, request)


# Bursty arrivals: mean requests per burst, and how much faster than the mean rate a burst runs.
BURST_MEAN_REQUESTS: Final = 20.0
BURST_SPEEDUP: Final = 20.0
# Azure 2023 code prompts stop at 7,437 tokens (an ~8k context limit of that service).
CODE_CONTEXT_LIMIT_TOKENS: Final = 7437


def _bursty(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """On/off arrivals; a burst is one editor session re-sending a (trimmed) file context.

    Within a burst, gaps are exponential at `BURST_SPEEDUP` times the mean rate; between bursts,
    the off gap is sized so that the long-run mean rate is `rate_per_s`. With 20 requests per
    burst on average the interarrival CV is 5-8 (Azure 2023 code: 13).
    """
    preambles = [draw.tokens(draw.length(150, 0.5, 16, 1000)) for _ in range(tenants)]
    tenant_weights = _zipf_weights(tenants, 0.6)
    on_gap_s = 1.0 / (rate_per_s * BURST_SPEEDUP)
    off_gap_s = BURST_MEAN_REQUESTS / rate_per_s * (1.0 - 1.0 / BURST_SPEEDUP)
    out: list[_Request] = []
    at_s = 0.0
    burst = 0
    while len(out) < n:
        size = min(int(draw.rng.geometric(1.0 / BURST_MEAN_REQUESTS)), n - len(out))
        tenant = draw.pick(tenant_weights)
        context = draw.tokens(draw.length(1500, 0.9, 32, 7000))
        for j in range(size):
            if j:
                at_s += draw.exp_s(on_gap_s)
            cut = int(draw.rng.integers(int(0.7 * len(context)), len(context) + 1))
            cursor = draw.tokens(draw.length(30, 0.8, 1, 400))
            prompt = _cat(preambles[tenant], context[:cut], cursor)[:CODE_CONTEXT_LIMIT_TOKENS]
            out.append(
                _Request(
                    arrival_s=at_s,
                    tenant=tenant,
                    session=burst,
                    prompt=prompt,
                    output_len=draw.length(13, 1.2, 1, 1900),
                )
            )
        burst += 1
        at_s += draw.exp_s(off_gap_s)
    # NOTE: a few dozen off gaps make the realised rate noisy (+-30%); rescaling time to the
    # requested mean rate keeps the shape (the CV is scale-free) and makes --rate exact.
    span_s = out[-1].arrival_s
    if n > 1 and span_s > 0.0:
        scale = (n - 1) / rate_per_s / span_s
        for request in out:
            request.arrival_s *= scale
    return out


def _agentic(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Agent loops: each step's prompt = previous prompt + its output + a tool result."""
    mean_steps = 25.0
    max_context_tokens = 120_000
    tools = [draw.tokens(draw.length(8000, 0.3, 2000, 20000)) for _ in range(tenants)]
    tenant_weights = _zipf_weights(tenants, 0.6)

    def session(start_s: float, index: int) -> list[_Request]:
        steps = min(int(draw.rng.geometric(1.0 / mean_steps)), 200)
        tenant = draw.pick(tenant_weights)
        prompt = _cat(tools[tenant], draw.tokens(draw.length(200, 1.0, 8, 4000)))
        # Decoding (~50 tok/s) plus the tool's own latency; past the context limit the agent
        # would compact or restart.
        return _turns(draw, start_s=start_s, tenant=tenant, session=index, prompt=prompt,
                      count=steps, output=(150, 0.9, 1, 4000), stream_tok_per_s=50.0,
                      pause_mean_s=4.0, follow_up=(400, 1.2, 1, 16000),
                      max_context_tokens=max_context_tokens)

    return _sessions(n, draw, mean_steps, rate_per_s, 600.0, session)


def _long_prefill(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Long-document prompts (a quarter; half about a document seen before) among short ones.

    The short prompts carry long streaming decodes, the long ones short answers.
    """
    systems = [draw.tokens(draw.length(400, 0.5, 32, 2000)) for _ in range(tenants)]
    documents: list[list[np.ndarray]] = [[] for _ in range(tenants)]
    tenant_weights = _zipf_weights(tenants, 0.6)

    def request(tenant: int) -> tuple[np.ndarray, int]:
        if draw.chance(0.25):
            seen = documents[tenant]
            if seen and draw.chance(0.5):
                document = seen[int(draw.rng.integers(len(seen)))]
            else:
                document = draw.tokens(draw.length(16000, 0.9, 2000, 120_000))
                seen.append(document)
            prompt = _cat(systems[tenant], document, draw.tokens(draw.length(50, 0.7, 4, 500)))
            return prompt, draw.length(120, 0.8, 1, 1000)
        prompt = _cat(systems[tenant], draw.tokens(draw.length(600, 0.9, 8, 8000)))
        return prompt, draw.length(500, 0.6, 16, 4000)

    return _open_loop(draw, n, rate_per_s, tenant_weights, request)


def _poisson(draw: _Draw, n: int, rate_per_s: float) -> list[float]:
    at_s, out = 0.0, []
    for _ in range(n):
        out.append(at_s)
        at_s += draw.exp_s(1.0 / rate_per_s)
    return out


def _single_turn(draw: _Draw, arrivals: list[float], tenants: int, prompt_median: float,
                 output_median: float, system: list[np.ndarray] | None = None) -> list[_Request]:
    """Independent requests: an optional tenant system prompt, then fresh user tokens."""
    out: list[_Request] = []
    for i, at_s in enumerate(arrivals):
        tenant = int(draw.rng.integers(tenants))
        user = draw.tokens(draw.length(prompt_median, 0.5, 16, 4000))
        prompt = _cat(system[tenant], user) if system is not None else user
        out.append(_Request(arrival_s=at_s, tenant=tenant, session=i, prompt=prompt,
                            output_len=draw.length(output_median, 0.5, 8, 1000)))
    return out


def _diag_healthy(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Poisson arrivals; a short system prompt per tenant (cached) and fresh questions."""
    system = [draw.tokens(200) for _ in range(tenants)]
    return _single_turn(draw, _poisson(draw, n, rate_per_s), tenants, 300, 120, system)


def _diag_burst(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """A third of the requests at the mean rate, the rest in a burst at 40 × that rate."""
    steady = n // 3
    arrivals = _poisson(draw, steady, rate_per_s)
    start_s = (arrivals[-1] if arrivals else 0.0) + 1.0
    arrivals += [start_s + t for t in _poisson(draw, n - steady, 40.0 * rate_per_s)]
    system = [draw.tokens(200) for _ in range(tenants)]
    return _single_turn(draw, arrivals, tenants, 300, 200, system)


# The minute-burst fixture: the burst's start and length (s), and its rate over the base rate.
BURST_START_S: Final = 120.0
BURST_LENGTH_S: Final = 60.0
BURST_EXTRA_RATE: Final = 3.0


def _diag_minute_burst(draw: _Draw, n: int, rate_per_s: float, tenants: int
                       ) -> list[_Request]:
    """Poisson arrivals at `rate_per_s` (about half the engine's rate) over the whole span,
    plus BURST_EXTRA_RATE × that rate for BURST_LENGTH_S from BURST_START_S: the minute runs
    at four times the base rate, about twice what the engine serves."""
    burst_n = round(BURST_EXTRA_RATE * rate_per_s * BURST_LENGTH_S)
    base_n = max(1, n - burst_n)
    base = _poisson(draw, base_n, rate_per_s)
    burst = [t for t in _poisson(draw, n - base_n, BURST_EXTRA_RATE * rate_per_s)
             if t < BURST_LENGTH_S]
    arrivals = sorted(base + [BURST_START_S + t for t in burst])
    system = [draw.tokens(200) for _ in range(tenants)]
    return _single_turn(draw, arrivals, tenants, 300, 200, system)


def _diag_dispatch(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Poisson arrivals of short chat requests (the engine's host gap makes the problem)."""
    system = [draw.tokens(200) for _ in range(tenants)]
    return _single_turn(draw, _poisson(draw, n, rate_per_s), tenants, 300, 120, system)


def _diag_kv_churn(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Poisson arrivals of requests with long outputs, which grow their KV as they decode."""
    return _single_turn(draw, _poisson(draw, n, rate_per_s), tenants, 300, 400)


def _diag_long_prefill(draw: _Draw, n: int, rate_per_s: float, tenants: int) -> list[_Request]:
    """Short requests with long decodes; one in four carries a long document (unique)."""
    out = _single_turn(draw, _poisson(draw, n, rate_per_s), tenants, 150, 200)
    for r in out:
        if draw.chance(1 / 4):
            # NOTE: a low-entropy body keeps the file small; the unique head keeps the prefix
            # chain unique, so no other request can reuse it.
            body = np.tile(draw.tokens(64), 200)
            r.prompt = _cat(draw.tokens(32), body)
            r.output_len = draw.length(20, 0.5, 4, 100)
    return out


def _diag_prefix_recompute(draw: _Draw, n: int, rate_per_s: float, tenants: int
                           ) -> list[_Request]:
    """One long system prompt shared by every request, then a short question."""
    system = [_cat(draw.tokens(64), np.tile(draw.tokens(64), 60)) for _ in range(tenants)]
    return _single_turn(draw, _poisson(draw, n, rate_per_s), tenants, 60, 150, system)


Builder = Callable[[_Draw, int, float, int], list[_Request]]


def _builder(scenario: WorkloadKind) -> Builder:
    match scenario:
        case WorkloadKind.CHAT:
            return _chat
        case WorkloadKind.MULTI_TENANT:
            return _multi_tenant
        case WorkloadKind.RAG:
            return _rag
        case WorkloadKind.BURSTY:
            return _bursty
        case WorkloadKind.AGENTIC:
            return _agentic
        case WorkloadKind.LONG_PREFILL:
            return _long_prefill
        case WorkloadKind.DIAG_HEALTHY:
            return _diag_healthy
        case WorkloadKind.DIAG_BURST:
            return _diag_burst
        case WorkloadKind.DIAG_DISPATCH:
            return _diag_dispatch
        case WorkloadKind.DIAG_KV_CHURN:
            return _diag_kv_churn
        case WorkloadKind.DIAG_LONG_PREFILL:
            return _diag_long_prefill
        case WorkloadKind.DIAG_PREFIX_RECOMPUTE:
            return _diag_prefix_recompute
        case WorkloadKind.DIAG_MINUTE_BURST:
            return _diag_minute_burst
        case _:
            assert_never(scenario)


def _list_column(arrays: list[np.ndarray]) -> pd.Series:
    """An Arrow-backed large_list<int64> column built without per-token Python objects."""
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.concatenate(arrays).astype(np.int64) if arrays else np.empty(0, np.int64)
    arr = pa.LargeListArray.from_arrays(
        pa.array(offsets, type=pa.int64()), pa.array(values, type=pa.int64())
    )
    return pd.Series(pd.arrays.ArrowExtensionArray(arr))


def generate_requests(options: GenerateOptions) -> pd.DataFrame:
    """Generate the scenario's canonical request table, sorted by arrival.

    Columns: request_id, arrival_s (s from the first request), tenant, model, session_id,
    prompt_len and output_len (tokens), prompt_tokens and, for chat and agentic (whose outputs
    are fed back into later prompts), output_tokens. The `diag-*` scenarios also carry the
    engine timing of their simulated run (see `generate_with_steps`).
    """
    return generate_with_steps(options)[0]


def generate_with_steps(options: GenerateOptions) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The request table and, for a `diag-*` scenario, the step log of its simulated run.

    A `diag-*` scenario's requests are run through the step simulator (`trace simulate`) with
    the engine in `ENGINES`, on `ENGINE_MODEL` and `ENGINE_GPU`; the simulator is deterministic,
    so the same options and seed still give the same tables.
    """
    table = _requests(options)
    setup = ENGINES.get(options.scenario)
    if setup is None:
        return table, None

    trace = normalize(RawTrace(requests=table, format_name="canonical"), "generated")
    run = run_scenario(trace, Scenario(
        name=options.scenario.value, model=ENGINE_MODEL, gpu=ENGINE_GPU,
        block_size=ENGINE_BLOCK_SIZE_TOKENS, kv_blocks=setup.kv_blocks,
        max_num_seqs=setup.max_num_seqs,
        chunked_prefill=setup.chunked_prefill, prefix_caching=setup.prefix_caching,
        host_gap_ms=setup.host_gap_ms,
    ))
    return run.requests, run.steps


def _requests(options: GenerateOptions) -> pd.DataFrame:
    """The scenario's requests (content, lengths and arrivals), sorted by arrival."""
    params = options.resolved()
    draw = _Draw(np.random.Generator(np.random.PCG64(options.seed)))
    requests = _builder(options.scenario)(draw, params.requests, params.rate_per_s, params.tenants)
    arrival_s = np.round([r.arrival_s for r in requests], ARRIVAL_DECIMALS)
    order = np.argsort(arrival_s, kind="stable")
    requests = [requests[i] for i in order]
    count = len(requests)
    width = max(6, len(str(count - 1)))
    columns: dict[str, pd.Series] = {
        "request_id": pd.Series([f"req-{i:0{width}d}" for i in range(count)], dtype="string"),
        "arrival_s": pd.Series(arrival_s[order] - arrival_s[order][0], dtype="float64"),
        "tenant": pd.Series([f"tenant-{r.tenant}" for r in requests], dtype="string"),
        "model": pd.Series([options.model] * count, dtype="string"),
        "session_id": pd.Series([f"sess-{r.session:0{width}d}" for r in requests], dtype="string"),
        "prompt_len": pd.Series([len(r.prompt) for r in requests], dtype="int64"),
        "output_len": pd.Series([r.output_len for r in requests], dtype="int64"),
        "prompt_tokens": _list_column([r.prompt for r in requests]),
    }
    if all(r.output is not None for r in requests):
        outputs = [r.output for r in requests if r.output is not None]
        columns["output_tokens"] = _list_column(outputs)
    return pd.DataFrame(columns)
