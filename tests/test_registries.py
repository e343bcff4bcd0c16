"""Every registry entry resolves: a typo in one would otherwise fall back without a word.

The renderers' tables fall back to a generic table for an entry that does not import, so that a
new section is never invisible; these tests keep that fallback for sections with no entry only.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.load import READERS
from yaotu_trace.render import console, markdown

PACKAGE = Path(__file__).resolve().parents[1] / "yaotu_trace"


def _resolve(target: str, package: str = "") -> object:
    module_name, _, function = target.partition(":")
    module = importlib.import_module(f"{package}{module_name}")
    return getattr(module, function)


@pytest.mark.parametrize("registry", [console.SECTION_RENDERERS, console.TYPE_RENDERERS,
                                      markdown.SECTION_RENDERERS, markdown.TYPE_RENDERERS],
                         ids=["console-sections", "console-types", "markdown-sections",
                              "markdown-types"])
def test_every_renderer_entry_imports_a_function(registry: dict[str, str]) -> None:
    for target in registry.values():
        assert callable(_resolve(target)), target


def test_console_and_markdown_render_the_same_sections() -> None:
    assert set(console.SECTION_RENDERERS) == set(markdown.SECTION_RENDERERS)
    assert set(console.TYPE_RENDERERS) == set(markdown.TYPE_RENDERERS)


def test_every_type_renderer_names_a_class_of_the_package() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    for name in console.TYPE_RENDERERS:
        assert re.search(rf"^class {name}\b", source, re.M), name


def test_every_trace_format_has_a_reader_that_imports() -> None:
    assert set(READERS) == set(TraceFormat)
    for target in READERS.values():
        assert callable(_resolve(target, "")), target
