"""Dotted paths into a JSON report, as `trace check` and its config name metrics.

Grammar: segments separated by dots, each a key optionally followed by selectors in brackets:
`prefix_reuse.hit_ratio`, `axes.kv_memory.status`, `axes[name=kv_memory].status`,
`ledger[0].remedy`. A plain key applied to a list picks the element whose identity field
(`name`, `axis`, `label`, `id`, `step` or `remedy`) equals it, so `axes.kv_memory.status`
works whether `axes` is a mapping by axis name or a list of axis objects. An axis name may also
lead a path on its own: `queueing.queue_time_s.p99` means `axes.queueing.metrics.queue_time_s.p99`
(or `axes.queueing.<rest>` for the axis' own fields such as `status`), unless the report has a
top-level key of that name holding the rest of the path.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from yaotu_trace.errors import ConfigError

# Fields that name an element of a list of objects, in the order they are tried.
IDENTITY_KEYS = ("name", "axis", "label", "id", "step", "remedy")

_TOKEN = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)|(\.)")


@dataclass(frozen=True, slots=True)
class Selector:
    """One step of a path: a key, a list index, or a `field=value` match in a list."""

    key: str | None = None
    index: int | None = None
    field: str | None = None
    value: str | None = None

    def __str__(self) -> str:
        if self.key is not None:
            return self.key
        if self.index is not None:
            return f"[{self.index}]"
        return f"[{self.field}={self.value}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """Where a path led: `found` is False for an unknown path; `value` None means null there."""

    path: str
    found: bool
    value: Any = None
    resolved_path: str | None = None
    null_at: str | None = None


def parse_path(path: str) -> tuple[Selector, ...]:
    """Split a path into selectors; a malformed path is a ConfigError naming it."""
    text = path.strip()
    if not text:
        raise ConfigError("empty metric path; give a JSON path such as prefix_reuse.hit_ratio")
    selectors: list[Selector] = []
    pos = 0
    expect_key = True
    for match in _TOKEN.finditer(text):
        if match.start() != pos:
            break
        bracket, key, dot = match.groups()
        if dot is not None:
            if expect_key:
                break
            expect_key = True
        elif key is not None:
            if not expect_key:
                break
            selectors.append(Selector(key=key.strip()))
            expect_key = False
        else:
            inner = (bracket or "").strip()
            if not selectors or expect_key:
                break
            if inner.lstrip("-").isdigit():
                selectors.append(Selector(index=int(inner)))
            elif "=" in inner:
                fld, _, val = inner.partition("=")
                selectors.append(Selector(field=fld.strip(), value=val.strip().strip("'\"")))
            else:
                break
        pos = match.end()
    if pos != len(text) or expect_key or not selectors:
        raise ConfigError(
            f"metric path {path!r} is malformed; use dotted keys with optional [index] or "
            "[field=value] selectors, e.g. axes[name=kv_memory].status"
        )
    return tuple(selectors)


def _is_node(value: Any) -> bool:
    """Whether a value has children in the JSON view (an object or an array)."""
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)) or (
        isinstance(value, Mapping | list | tuple) and not isinstance(value, Enum))


def _leaf(value: Any) -> Any:
    """A value as the JSON view holds it: nodes as they are, scalars as builtins."""
    if _is_node(value):
        return value
    from yaotu_trace.data.report import to_builtins

    return to_builtins(value)


def view(node: Any) -> Any:
    """One level of `node` as JSON shows it (`data.report.to_builtins`), its children left as
    they are: a path is walked over a report's section values without converting all of them.

    A dataclass is an object of its fields, a mapping an object keyed by `str(key)`, a tuple an
    array, an enum its value, a NumPy number a builtin and NaN null.
    """
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {f.name: _leaf(getattr(node, f.name)) for f in dataclasses.fields(node)}
    if isinstance(node, Mapping):
        return {str(k): _leaf(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_leaf(v) for v in node]
    return _leaf(node)


def _identity(item: Any) -> str | None:
    item = view(item)
    if isinstance(item, dict):
        for key in IDENTITY_KEYS:
            value = item.get(key)
            if isinstance(value, str):
                return value
    return None


def _step(node: Any, sel: Selector) -> tuple[bool, Any]:
    """Apply one selector; (False, None) when it does not exist at this node."""
    node = view(node)
    if sel.key is not None:
        if isinstance(node, dict):
            return (sel.key in node), node.get(sel.key)
        if isinstance(node, list):
            for item in node:
                if _identity(item) == sel.key:
                    return True, item
        return False, None
    if sel.index is not None:
        if isinstance(node, list) and -len(node) <= sel.index < len(node):
            return True, node[sel.index]
        return False, None
    if isinstance(node, list):
        for item in node:
            shown = view(item)
            if isinstance(shown, dict) and str(shown.get(sel.field or "")) == sel.value:
                return True, item
    if isinstance(node, dict) and sel.value in node:
        # `axes[name=kv_memory]` on the mapping form of axes.
        return True, node[sel.value]
    return False, None


def _walk(doc: Any, selectors: tuple[Selector, ...]) -> Resolved:
    node = doc
    done: list[str] = []
    text = _join(selectors)
    for sel in selectors:
        parent = view(node)
        ok, node = _step(node, sel)
        node = _leaf(node)
        done.append(str(sel))
        if not ok:
            if isinstance(parent, list) and sel.key is None:
                # An index or `[field=value]` that matches nothing in a list the report has:
                # the element is absent on this trace (no such remedy), not a wrong path.
                return Resolved(path=text, found=True, value=None, resolved_path=text,
                                null_at=_join_text(done))
            return Resolved(path=text, found=False)
        if node is None and len(done) < len(selectors):
            return Resolved(path=text, found=True, value=None, resolved_path=text,
                            null_at=_join_text(done))
    from yaotu_trace.data.report import to_builtins

    return Resolved(path=text, found=True, value=to_builtins(node), resolved_path=text,
                    null_at=text if node is None else None)


def _join_text(parts: list[str]) -> str:
    out = ""
    for part in parts:
        out += part if (not out or part.startswith("[")) else "." + part
    return out


def _join(selectors: tuple[Selector, ...]) -> str:
    return _join_text([str(s) for s in selectors])


def candidates(doc: Any, selectors: tuple[Selector, ...]) -> Iterator[tuple[Selector, ...]]:
    """The literal path, then the axis shorthand forms when the first key names an axis."""
    yield selectors
    first = selectors[0]
    doc = view(doc)
    if first.key is None or not isinstance(doc, dict) or "axes" not in doc:
        return
    found, _ = _step(doc.get("axes"), first)
    if not found:
        return
    axes, metrics = Selector(key="axes"), Selector(key="metrics")
    yield (axes, first, metrics, *selectors[1:])
    yield (axes, first, *selectors[1:])


def resolve(doc: Any, path: str) -> Resolved:
    """Resolve `path` in `doc`: the first candidate form that exists wins."""
    selectors = parse_path(path)
    for form in candidates(doc, selectors):
        result = _walk(doc, form)
        if result.found:
            return Resolved(path=path, found=True, value=result.value,
                            resolved_path=result.resolved_path, null_at=result.null_at)
    return Resolved(path=path, found=False)


def leaf_paths(doc: Any, prefix: str = "", limit: int = 5000) -> list[str]:
    """Every path of `doc` (intermediate and leaf), lists of objects by identity, else `[0]`."""
    out: list[str] = []

    def walk(node: Any, here: str) -> None:
        if len(out) >= limit:
            return
        node = view(node)
        if here:
            out.append(here)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{here}.{key}" if here else str(key))
        elif isinstance(node, list) and node:
            named = [(_identity(item), item) for item in node]
            if all(name is not None for name, _ in named):
                for name, item in named:
                    walk(item, f"{here}.{name}" if here else str(name))
            else:
                walk(node[0], f"{here}[0]")

    walk(doc, prefix)
    return out


def close_paths(doc: Any, path: str, n: int = 5) -> list[str]:
    """Valid paths that look like `path` (typos, wrong section, shorthand forms)."""
    paths = leaf_paths(doc)
    short = []
    for p in paths:
        parts = p.split(".")
        if len(parts) > 3 and parts[0] == "axes" and parts[2] == "metrics":
            short.append(".".join([parts[1], *parts[3:]]))
    pool = list(dict.fromkeys(paths + short))
    matches = difflib.get_close_matches(path, pool, n=n, cutoff=0.6)
    if not matches:
        last = path.rsplit(".", 1)[-1]
        matches = [p for p in pool if p.endswith("." + last) or p == last][:n]
    return matches


def require(doc: Any, path: str, where: str = "the report") -> Resolved:
    """`resolve`, but an unknown path is a one-line ConfigError listing close valid paths."""
    result = resolve(doc, path)
    if not result.found:
        near = close_paths(doc, path)
        hint = f"; close valid paths: {', '.join(near)}" if near else (
            "; see docs/json.md for the paths each command reports")
        raise ConfigError(f"unknown metric path {path!r} in {where}{hint}")
    return result
