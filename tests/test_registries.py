"""Every registry entry resolves: a typo in one would otherwise fail far from its cause.

The section views' registry is checked next to it, in tests/render/test_views.py.
"""

from __future__ import annotations

import importlib

from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.load import READERS


def _resolve(target: str, package: str = "") -> object:
    module_name, _, function = target.partition(":")
    module = importlib.import_module(f"{package}{module_name}")
    return getattr(module, function)


def test_every_trace_format_has_a_reader_that_imports() -> None:
    assert set(READERS) == set(TraceFormat)
    for target in READERS.values():
        assert callable(_resolve(target, "")), target
