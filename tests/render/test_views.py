"""The section views' registry: every entry resolves, every view file is listed, and a broken
entry fails loudly instead of falling back to the generic table."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest

from yaotu_trace.data.report import InputSummary, Report
from yaotu_trace.render import views
from yaotu_trace.render.blocks import Block
from yaotu_trace.render.console import section_renderables
from yaotu_trace.render.html import render_html
from yaotu_trace.render.markdown import section_lines

PACKAGE = Path(__file__).resolve().parents[2] / "yaotu_trace"


@pytest.mark.parametrize("registry", [views.SECTION_VIEWS, views.TYPE_VIEWS],
                         ids=["sections", "types"])
def test_every_view_entry_imports_a_function(registry: dict[str, str]) -> None:
    for target in registry.values():
        assert callable(views.load_view(target)), target


def test_every_view_file_is_registered() -> None:
    files = {m.name for m in pkgutil.iter_modules(views.__path__)}
    assert files == set(views.SECTION_VIEWS.values()) | set(views.TYPE_VIEWS.values())


def test_every_type_view_names_a_class_of_the_package() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    for name in views.TYPE_VIEWS:
        assert re.search(rf"^class {name}\b", source, re.M), name


def test_a_broken_entry_raises_instead_of_falling_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(views.SECTION_VIEWS, "profile", "no_such_view")
    with pytest.raises(ImportError):
        section_lines("profile", object())
    with pytest.raises(ImportError):
        section_renderables("profile", object())


def test_a_section_without_a_view_gets_the_generic_table() -> None:
    assert views.find_view("not_a_section", {"a": 1}) is None
    assert section_lines("not_a_section", {"a": 1})[0] == "### Not A Section"


def test_views_return_blocks_only() -> None:
    checks = {"status": "passed", "passed": 0, "failed": 0, "skipped": 0, "results": []}
    blocks = views.load_view("checks")(checks)
    assert blocks and all(isinstance(b, Block) for b in blocks)


def _report(sections: dict[str, object]) -> Report:
    summary = InputSummary(path="t.csv", format="csv", rows_read=1, requests=1,
                           source_block_size=None, content=None, columns=())
    return Report(command="check", input=summary, sections=sections)


def test_the_html_page_shows_a_section_that_has_a_view() -> None:
    checks = {"status": "failed", "passed": 0, "failed": 1, "skipped": 0, "results": [
        {"status": "failed", "name": "p99 <ttft>", "kind": "threshold", "op": "<",
         "threshold": 1.0, "value": 2.5, "message": "too slow", "path": "x"}]}
    page = render_html(_report({"checks": checks}))
    section = re.search(r'<section id="checks">.*?</section>', page)
    assert section, "a section with a view is on the page"
    assert "<h2>Checks</h2>" in section.group(0)
    assert "p99 &lt;ttft&gt;" in section.group(0)
    assert "FAILED: 0 passed, 1 failed, 0 skipped" in section.group(0)


def test_the_html_page_leaves_out_sections_without_a_view() -> None:
    assert 'id="mystery"' not in render_html(_report({"mystery": {"a": 1}}))
