"""Every entry of the diagnosis registries resolves: axes, rules and thresholds.

An axis entry is a "module:function" string and a threshold is read as an attribute by name, so
a typo in either fails only when that code path runs; these tests find it on every run. The
registries are imported in one place below, so that moving them means editing only that block.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from yaotu_trace.axes import AXES, AxisName, analyzer
from yaotu_trace.axes.rules import RULES, SEVERITY_OF
from yaotu_trace.axes.thresholds import THRESHOLDS, Thresholds, make_thresholds

PACKAGE = Path(__file__).resolve().parents[2] / "yaotu_trace"
# The methods of `Thresholds` itself, which are not thresholds.
THRESHOLDS_OWN = frozenset(name for name in dir(Thresholds) if callable(getattr(Thresholds, name)))


@pytest.mark.parametrize("axis", list(AxisName))
def test_every_axis_has_an_analyzer_that_imports(axis: AxisName) -> None:
    fn = analyzer(axis)
    assert callable(fn), AXES[axis]
    assert fn.__name__ == AXES[axis].partition(":")[2]
    # The registry's contract: analyze_<axis>(inp, thresholds) -> AxisResult.
    assert len(inspect.signature(fn).parameters) == 2, AXES[axis]


def test_axes_registry_names_every_axis_once() -> None:
    assert list(AXES) == list(AxisName)
    assert len(set(AXES.values())) == len(AXES)


def test_every_rule_belongs_to_a_registered_axis_and_every_axis_has_rules() -> None:
    assert {rule.axis for rule in RULES.values()} == set(AXES)
    assert {rid: rule.severity for rid, rule in RULES.items()} == dict(SEVERITY_OF)


def test_every_threshold_default_is_valid() -> None:
    defaults = make_thresholds({name: t.default for name, t in THRESHOLDS.items()})
    assert defaults == Thresholds()
    for name, threshold in THRESHOLDS.items():
        assert threshold.name == name
        assert Thresholds().get(name) == threshold.default


def _threshold_reads(path: Path) -> dict[str, int]:
    """Attribute names read on a parameter or local annotated `Thresholds`, with the line of one
    read."""
    reads: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]
                  if a.annotation is not None and "Thresholds" in ast.unparse(a.annotation)}
        params |= {sub.target.id for sub in ast.walk(node)
                   if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name)
                   and "Thresholds" in ast.unparse(sub.annotation)}
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                    and sub.value.id in params and sub.attr not in THRESHOLDS_OWN):
                reads.setdefault(sub.attr, sub.lineno)
    return reads


def test_every_threshold_the_code_reads_exists_and_every_threshold_is_read() -> None:
    read: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, line in _threshold_reads(path).items():
            assert name in THRESHOLDS, f"{path.relative_to(PACKAGE)}:{line}: no threshold {name}"
            read.add(name)
    assert read, "no function takes a `Thresholds` parameter any more: re-point this test"
    assert set(THRESHOLDS) - read == set(), "thresholds no function reads"
