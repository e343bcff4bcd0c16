"""From a validated `Trace` to the flat arrays the replay core works on.

The only replay module that touches pandas: it reads the list columns through
`schema.list_arrays` (no Python object per token), turns model/adapter/tenant/instance labels
into integer codes, and builds `BlockChains` for a given set of rules. A content column left on
disk (`Trace.lazy`, canonical Parquet) is not read here: the chains stream from the file
(`stream.py`), so only the scalar columns and block-level arrays are ever in memory. A trace
read without pandas (`Trace.columns`) is taken as its arrays, and pandas is not imported.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from yaotu_trace.data.schema import Trace, default_request_ids, list_arrays
from yaotu_trace.errors import ConfigError, TraceSchemaError
from yaotu_trace.prefix import chain_cache
from yaotu_trace.prefix.kernels.chains import BlockChains, PromptContent
from yaotu_trace.prefix.kernels.compact import CompactChains
from yaotu_trace.prefix.rules import ReplayRules

if TYPE_CHECKING:
    import pandas as pd

    from yaotu_trace.prefix.kernels.stream import ParquetPrompts

_MISSING = "\x00"
# The largest chain build run in numpy (content ids hashed plus blocks numbered): below it the
# numpy passes take less time than compiling the hashing kernels on a fresh install, or loading
# them from numba's cache (docs/performance.md, first run).
SMALL_CHAIN_WORK = 4_000_000
SMALL_CHAINS = "small_chains"  # the key of a trace's kept chain builds in `Trace.derived`


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedTrace:
    """A trace as arrays, in replay (arrival) order."""

    # The trace's request_id column (`request_id` makes the strings); None for `r0, r1, ...`,
    # the ids `normalize` gives a trace without any (a trace read without pandas).
    request_ids: pd.Series | None
    prompt_tokens: np.ndarray  # int64 prompt length per request
    offsets: np.ndarray | None  # int64 n+1 into `values`; None when streamed
    values: np.ndarray | None  # int64 token ids or source block ids; None when streamed
    source_block_size: int | None
    model_codes: np.ndarray  # int64: (model, adapter) namespace, 0 when absent
    tenant_codes: np.ndarray | None  # int64, None when the trace has no tenant column
    tenant_labels: tuple[str, ...]
    instance_codes: np.ndarray | None  # int64, None when the trace has no instance column
    instance_labels: tuple[str, ...]
    arrival_s: np.ndarray  # float64
    finish_s: np.ndarray | None  # float64 (NaN where unknown)
    output_offsets: np.ndarray | None
    output_values: np.ndarray | None
    cached_tokens: np.ndarray | None  # float64 observed hits (NaN where unknown)
    # The content column left in its Parquet file (`Trace.lazy`): chains stream from it.
    stream: ParquetPrompts | None = None
    # Small chain builds already made, by what they depend on (`chains`), shared by every
    # `prepare` of one trace (its `derived` values): the waterfall asks for the same chains
    # more than once (its ideal pass at the source block size is often the block step's), and
    # a diagnosis' KV axis for the prefix replay's. Only small builds are kept, so memory
    # stays bounded.
    _small_chains: dict[tuple[object, ...], BlockChains] = field(
        default_factory=dict, compare=False, repr=False)
    # `request_id` once made (shared by `replace` copies).
    _made: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def request_id(self) -> np.ndarray:
        """Request ids as str objects, made on first use: at 1e10 tokens they are 150 MB, which
        the replays' peak need not hold (only the reports and the hot prefixes name requests)."""
        made = self._made.get("request_id")
        if made is None:
            made = (np.array(default_request_ids(self.num_requests), dtype=object)
                    if self.request_ids is None
                    else self.request_ids.astype(str).to_numpy(dtype=object))
            self._made["request_id"] = made
        return made

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return len(self.prompt_tokens)

    @property
    def unit_tokens(self) -> int:
        """The finest granularity the content allows: 1 token, or the source block size."""
        return self.source_block_size or 1

    def unit_offsets(self) -> np.ndarray:
        """Content ids per request as int64 offsets (n+1), streamed or in memory."""
        if self.offsets is not None:
            return self.offsets
        assert self.stream is not None
        return self.stream.offsets()

    def namespace_codes(self, tenant_isolation: bool) -> np.ndarray | None:
        """Namespace per request: (model, adapter), plus tenant when isolated (spec §2)."""
        ns = self.model_codes
        if tenant_isolation and self.tenant_codes is not None:
            ns = ns * (int(self.tenant_codes.max()) + 1) + self.tenant_codes
        if not ns.any():
            return None
        return ns

    def content(self) -> PromptContent:
        """The content read whole (not streamed), as a chain build reads it."""
        assert self.offsets is not None and self.values is not None  # content read whole
        return PromptContent(offsets=self.offsets, values=self.values,
                             prompt_len=self.prompt_tokens,
                             source_block_size=self.source_block_size,
                             output_offsets=self.output_offsets, output_values=self.output_values)

    def chain_work(self, rules: ReplayRules) -> int:
        """Content ids hashed plus blocks numbered by a chain build under `rules`, from the
        lengths alone (a streamed column is still on disk)."""
        units = int(self.offsets[-1]) if self.offsets is not None else (
            self.stream.num_values if self.stream is not None else 0)
        tokens = int(self.prompt_tokens.sum())
        if rules.cache_outputs and self.output_offsets is not None:
            units += int(self.output_offsets[-1])
            tokens += int(self.output_offsets[-1])
        return units + tokens // int(rules.block_size_tokens) + self.num_requests

    def whole_content(self) -> PromptContent:
        """The content held in memory: a streamed column is read whole (validated batch by
        batch as when streamed) and, as streamed, without outputs."""
        if self.stream is None:
            return self.content()
        batches = list(self.stream.batches())
        offsets = np.zeros(self.num_requests + 1, dtype=np.int64)
        if batches:
            np.cumsum(np.concatenate([np.diff(b.offsets) for b in batches]), out=offsets[1:])
        values = (np.concatenate([np.asarray(b.values, dtype=np.int64) for b in batches])
                  if batches else np.zeros(0, dtype=np.int64))
        self.stream.unit_offsets = offsets
        return PromptContent(offsets=offsets, values=values, prompt_len=self.stream.prompt_len,
                             source_block_size=self.stream.source_block_size)

    def chains(self, rules: ReplayRules, *, namespaces: bool = True) -> BlockChains:
        """Block chains under `rules`; `namespaces=False` puts every request in one namespace.

        A build of at most `SMALL_CHAIN_WORK` runs the numpy passes (the same chains bit for
        bit), so a small trace never compiles or loads the hashing kernels."""
        ns = self.namespace_codes(rules.tenant_isolation) if namespaces else None
        if self.chain_work(rules) <= SMALL_CHAIN_WORK:
            return self.numpy_chains(rules, ns)
        # NOTE: the compiled chain builders start numba, which a small build never needs.
        from yaotu_trace.prefix.kernels.blocks import build_block_chains

        if self.stream is not None:
            return _streamed_chains(self.stream, ns, rules)
        return build_block_chains(self.content(), ns, rules)

    def numpy_chains(self, rules: ReplayRules, ns: np.ndarray | None) -> BlockChains:
        """The chains under `rules` and namespaces `ns` built by the numpy passes (a small
        build), kept by what the ids depend on (not the last-token rule, which only caps the
        hits: `with_hit_cap`). The build hashes the partial blocks too, and chains without them
        are cut from it (`BlockChains.full_blocks_only`): one build serves both rules,
        whichever is asked first (a diagnosis' KV axis asks without, its prefix replay and the
        analysis' overview often with)."""
        return self._numpy_build(rules, ns).with_hit_cap(rules.last_token_rule)

    def _numpy_build(self, rules: ReplayRules, ns: np.ndarray | None) -> BlockChains:
        from yaotu_trace.prefix.kernels import numpy_passes

        key = (rules.block_size_tokens, rules.seed, rules.cache_outputs,
               self.output_offsets is not None, ns is not None and rules.tenant_isolation,
               ns is not None)
        found = self._small_chains.get((*key, rules.cache_partial_blocks))
        if found is not None:
            return found
        wide = self._small_chains.get((*key, True))
        if wide is None:
            wide = numpy_passes.build_block_chains(self.whole_content(), ns,
                                                   rules.with_(cache_partial_blocks=True))
            self._small_chains[(*key, True)] = wide
        if rules.cache_partial_blocks:
            return wide
        found = (wide.full_blocks_only() if wide.output_ids is None
                 else numpy_passes.build_block_chains(self.whole_content(), ns, rules))
        self._small_chains[(*key, False)] = found
        return found

    def compact_chains(self, rules: ReplayRules) -> CompactChains:
        """`chains(rules, namespaces=False)` held as runs (`compact.py`): what an analysis keeps
        between its passes. A streamed build an analysis holds is kept in this form already,
        and given as it is."""
        if (self.stream is not None and chain_cache.holding()
                and self.chain_work(rules) > SMALL_CHAIN_WORK):
            kept = _kept_build(self.stream, rules)
            if kept is not None:
                return kept.runs.with_hit_cap(bool(rules.last_token_rule))
        return CompactChains.of(self.chains(rules, namespaces=False))

    def namespaced(self, shared: CompactChains, rules: ReplayRules) -> BlockChains:
        """`shared`, this trace's chains under `rules` in one namespace, expanded, with the
        namespaces of `rules` joined in (`partition.with_namespaces`): the ids `chains(rules)`
        gives. A streamed build an analysis holds keeps them beside it, so that the analysis's
        later `chains(rules)` does not build them again (2.3 GiB and 5 s at 1e10 tokens)."""
        from yaotu_trace.prefix.partition import with_namespaces

        ns = self.namespace_codes(rules.tenant_isolation)
        if ns is None:
            return shared.expand()
        if (self.stream is not None and chain_cache.holding()
                and self.chain_work(rules) > SMALL_CHAIN_WORK):
            return self.chains(rules)
        return with_namespaces(shared.expand(), ns, in_place=True)


@dataclass(frozen=True, slots=True)
class _KeptBuild:
    """A streamed build an analysis holds: its key, the ids as runs, and the flat chains when
    this call built them (so the caller need not expand them again)."""

    key: tuple[object, ...]
    runs: CompactChains
    built: BlockChains | None


def _kept_build(stream: ParquetPrompts, rules: ReplayRules) -> _KeptBuild | None:
    """The build without namespaces of `stream` under `rules` that the analysis holds
    (`chain_cache`), made and kept as runs if it is not there yet; None when the file cannot
    be keyed (it is gone). Runs are 2 % of the flat ids at 1e9 tokens, so the flat ids are
    expanded for each caller and never held twice. The file's ids per request
    (`ParquetPrompts.unit_offsets`) ride along: the build's pass learned them, and a new
    `prepare` would otherwise read the whole file again for them."""
    from yaotu_trace.prefix.kernels.blocks import build_block_chains_streaming

    try:
        stat = os.stat(stream.path)
    except OSError:
        return None
    prompt_len = np.ascontiguousarray(stream.prompt_len, dtype=np.int64)
    key = (os.path.realpath(stream.path), stat.st_mtime_ns, stat.st_size, stream.column,
           stream.source_block_size, hashlib.sha1(prompt_len.tobytes()).hexdigest(),
           int(rules.block_size_tokens), bool(rules.cache_partial_blocks), int(rules.seed))
    found = chain_cache.kept(key)
    if found is not None:
        runs, offsets = found
        if stream.unit_offsets is None:
            stream.unit_offsets = offsets
        return _KeptBuild(key=key, runs=runs, built=None)
    chain_cache.forget_streamed_chains()  # the last file's, before building
    built = build_block_chains_streaming(stream, None, rules.with_(last_token_rule=False))
    runs = CompactChains.of(built)
    chain_cache.keep(key, runs, stream.unit_offsets)
    return _KeptBuild(key=key, runs=runs, built=built)


def _streamed_chains(stream: ParquetPrompts, ns: np.ndarray | None,
                     rules: ReplayRules) -> BlockChains:
    """`build_block_chains_streaming`, the file read and hashed once for the same file and
    chain rules while an analysis holds the chains (`_kept_build`); namespaced chains are
    derived from that build and kept beside it."""
    from yaotu_trace.prefix.kernels.blocks import build_block_chains_streaming
    from yaotu_trace.prefix.partition import with_namespaces

    cap = bool(rules.last_token_rule)
    kept = _kept_build(stream, rules) if chain_cache.holding() else None
    if kept is None:
        # Nothing keeps the build: hash the namespaces in (the ids relabelling gives, without
        # its table of namespaces × ids: 1.8 GiB at 1e10 tokens of eight tenants).
        return build_block_chains_streaming(stream, ns, rules.with_(last_token_rule=False)
                                            ).with_hit_cap(cap)
    base = kept.built
    if ns is None:
        return (base if base is not None else kept.runs.expand()).with_hit_cap(cap)
    digest = hashlib.sha1(np.ascontiguousarray(ns, dtype=np.int64).tobytes()).hexdigest()
    named = chain_cache.kept_namespaced(kept.key, digest)
    if named is None:
        named = with_namespaces(base if base is not None else kept.runs.expand(), ns,
                                in_place=True)
        chain_cache.keep_namespaced(kept.key, digest, named)
    return named.with_hit_cap(cap)


def _codes(series: pd.Series) -> tuple[np.ndarray, tuple[str, ...]]:
    """Integer codes in first-appearance order; missing values get their own code."""
    import pandas as pd

    codes, uniques = pd.factorize(series.astype("string").fillna(_MISSING), sort=False)
    labels = tuple("(none)" if u == _MISSING else str(u) for u in uniques)
    return codes.astype(np.int64), labels


def prepare(trace: Trace, *, with_outputs: bool = False, stream: bool = False) -> PreparedTrace:
    """Arrays of `trace` for the replay; raises when the trace carries no prompt content.

    With `stream=True` a content column left on disk (`Trace.lazy`) stays there and the chains
    stream from it; otherwise (or when output token ids must be cached too) it is read fully.
    """
    column = trace.content_column
    if column is None or not trace.has(column):
        said = (f"{trace.path}: the trace has no prompt content (token ids or block hash "
                "ids), so prefix reuse cannot be replayed; ")
        if trace.format_name == "gateway":  # the text is there: an option makes it tokens
            raise ConfigError(said + "give the model's tokenizer: --tokenizer tokenizer.json")
        # A column the command needs is missing from the file: an input error, as for the
        # other columns a command needs.
        raise TraceSchemaError(said + "use a trace with prompt_tokens or prompt_block_ids")
    # Chain builds are kept with the trace, for every `prepare` of it (`numpy_chains`).
    built = cast("dict[tuple[object, ...], BlockChains]",
                 trace.derived.setdefault(SMALL_CHAINS, {}))
    if trace.table is None:  # read without pandas: `columns`
        return _prepared_columns(trace, column, built)
    needs_outputs = with_outputs and trace.is_lazy("output_tokens") and trace.has("output_tokens")
    if trace.lazy is not None and (not stream or needs_outputs):
        from yaotu_trace.data.canonical import load_full

        trace = load_full(trace)
    import pandas as pd

    df = trace.requests
    prompt_tokens = df["prompt_len"].to_numpy(dtype=np.int64)
    source = trace.source_block_size if column == "prompt_block_ids" else None
    prompts = None
    offsets = values = None
    if trace.is_lazy(column):
        assert trace.lazy is not None
        from yaotu_trace.prefix.kernels.stream import ParquetPrompts

        prompts = ParquetPrompts(path=trace.lazy.path, column=column, prompt_len=prompt_tokens,
                                 source_block_size=source,
                                 num_values=trace.lazy.values_in(column))
    else:
        offsets, values = list_arrays(df[column])
        values = np.ascontiguousarray(values, dtype=np.int64)

    if trace.has("model") or trace.has("adapter"):
        key = df.get("model", pd.Series(_MISSING, index=df.index)).astype("string").fillna(
            _MISSING) + "\x01" + df.get("adapter", pd.Series(_MISSING, index=df.index)).astype(
            "string").fillna(_MISSING)
        model_codes, _ = _codes(key)
    else:
        model_codes = np.zeros(len(df), dtype=np.int64)
    tenant_labels: tuple[str, ...] = ()
    tenant_codes = None
    if trace.has("tenant"):
        tenant_codes, tenant_labels = _codes(df["tenant"])
    instance_labels: tuple[str, ...] = ()
    instance_codes = None
    if trace.has("instance"):
        instance_codes, instance_labels = _codes(df["instance"])
    finish = df["finish_s"].to_numpy(dtype=np.float64, na_value=np.nan) if trace.has(
        "finish_s") else None
    cached = df["cached_tokens"].to_numpy(dtype=np.float64, na_value=np.nan) if trace.has(
        "cached_tokens") else None
    out_offsets = out_values = None
    if (with_outputs and trace.has("output_tokens") and source is None
            and not trace.is_lazy("output_tokens")):
        out_offsets, out_values = list_arrays(df["output_tokens"])
    return PreparedTrace(
        request_ids=df["request_id"],
        prompt_tokens=prompt_tokens,
        offsets=offsets,
        values=values,
        source_block_size=source,
        model_codes=model_codes,
        tenant_codes=tenant_codes,
        tenant_labels=tenant_labels,
        instance_codes=instance_codes,
        instance_labels=instance_labels,
        arrival_s=df["arrival_s"].to_numpy(dtype=np.float64),
        finish_s=finish,
        output_offsets=out_offsets,
        output_values=out_values,
        cached_tokens=cached,
        stream=prompts,
        _small_chains=built,
    )


def _prepared_columns(trace: Trace, column: str,
                      built: dict[tuple[object, ...], BlockChains]) -> PreparedTrace:
    """`prepare` of a trace read without pandas: its arrays as they are. Such a trace
    (`ingest.traces.mooncake.read_clean`) has prompt block ids, lengths and arrivals only: no
    model, tenant, instance, finish time, outputs or cached tokens, and no ids of its own."""
    assert trace.columns is not None
    offsets, values = trace.columns.lists[column]
    return PreparedTrace(
        request_ids=None,
        prompt_tokens=trace.array("prompt_len"),
        offsets=offsets,
        values=values,
        source_block_size=trace.source_block_size if column == "prompt_block_ids" else None,
        model_codes=np.zeros(trace.num_requests, dtype=np.int64),
        tenant_codes=None,
        tenant_labels=(),
        instance_codes=None,
        instance_labels=(),
        arrival_s=trace.array("arrival_s", np.float64),
        finish_s=None,
        output_offsets=None,
        output_values=None,
        cached_tokens=None,
        _small_chains=built,
    )
