"""The chains streamed from a file, kept for the analyses that prepare it again.

One analysis can replay a trace several times from new `prepare` calls (diagnose: the KV
axis's shared blocks, the waterfall, the routing replay), and hashing a large file's prompts is
most of each. While an analysis holds the cache (`holding_streamed_chains`), the last build
without namespaces is kept, keyed by what it depends on; namespaced chains are derived from it
(`partition.with_namespaces`). Outside a hold a build is used once and dropped, with the
namespaces hashed in: a replay alone keeps neither a second copy of the ids beside its
namespaced ones (2.3 GB at 1e10 tokens) nor the relabelling's table (1.8 GiB).
Nothing here imports numpy or pandas, so the commands can hold it at no start-up cost.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# One entry: (chains, the file's ids per request), by the build's key.
_KEPT: dict[tuple[object, ...], tuple[Any, Any]] = {}
# One entry: the last namespaced chains derived from it, by the build's key and the namespaces'
# digest (diagnose's waterfall and routing replay both ask for the tenants' chains).
_NAMED: dict[tuple[object, ...], Any] = {}
_holds = 0


@contextlib.contextmanager
def holding_streamed_chains() -> Iterator[None]:
    """Keep the streamed chains for everything inside (re-entrant); leaving the outermost
    hold drops them, and their memory comes back."""
    global _holds
    _holds += 1
    try:
        yield
    finally:
        _holds -= 1
        if _holds == 0:
            forget_streamed_chains()


def holds_streamed_chains(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run inside `holding_streamed_chains()`: for an analysis that prepares its trace
    more than once."""

    @functools.wraps(fn)
    def held(*args: P.args, **kwargs: P.kwargs) -> R:
        with holding_streamed_chains():
            return fn(*args, **kwargs)

    return held


def holding() -> bool:
    """Whether an analysis holds the cache now."""
    return _holds > 0


def kept(key: tuple[object, ...]) -> tuple[Any, Any] | None:
    """The build kept under `key`, if any."""
    return _KEPT.get(key)


def keep(key: tuple[object, ...], chains: Any, unit_offsets: Any) -> None:
    """Keep a build while held (the last file's is dropped first); outside a hold, nothing."""
    forget_streamed_chains()
    if _holds:
        _KEPT[key] = (chains, unit_offsets)


def kept_namespaced(key: tuple[object, ...], namespaces: str) -> Any | None:
    """The namespaced chains kept for the build `key` and the namespaces' digest, if any."""
    return _NAMED.get((key, namespaces))


def keep_namespaced(key: tuple[object, ...], namespaces: str, chains: Any) -> None:
    """Keep the namespaced chains of a kept build while held (the last ones dropped first)."""
    _NAMED.clear()
    if _holds and key in _KEPT:
        _NAMED[(key, namespaces)] = chains


def forget_streamed_chains() -> None:
    """Drop the kept chains (their memory comes back), held or not."""
    _KEPT.clear()
    _NAMED.clear()
