"""Every entry of the diagnosis registries resolves: axes, rules, thresholds and remedies; and
every rule declares what it means to the verdict and the ledger.

An axis entry is a "module:function" string and a threshold is read as an attribute by name, so
a typo in either fails only when that code path runs; these tests find it on every run. The
registries are imported in one place below, so that moving them means editing only that block.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import replace
from pathlib import Path

import pytest

from yaotu_trace.axes import AXES, AxisName, analyzer
from yaotu_trace.axes.base import Cause, Severity
from yaotu_trace.axes.rule import Remedy, Rule
from yaotu_trace.axes.rules import RULES, SEVERITY_OF, undeclared
from yaotu_trace.axes.thresholds import THRESHOLDS, Thresholds, make_thresholds
from yaotu_trace.diagnosis.ledger import REMEDIES

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


def test_every_rule_declares_its_effect_on_the_verdict_and_the_ledger() -> None:
    assert undeclared(RULES.values()) == []


def test_a_rule_that_leaves_its_effect_undeclared_fails() -> None:
    # A rule cannot leave out its cause or its remedies: they have no default.
    with pytest.raises(TypeError, match="cause"):
        Rule(id="Q099", axis=AxisName.QUEUEING, severity=Severity.BOTTLENECK,  # type: ignore[call-arg]
             title="t", trigger="t", evidence="e", fix="f", remedies=(),
             check=RULES["Q003"].check)
    # A bottleneck that names no cause would leave the verdict without one.
    silent = replace(RULES["Q003"], id="Q099", cause=None)
    assert undeclared([*RULES.values(), silent]) == [
        "Q099: a bottleneck rule names no cause (declare `cause`)"]
    # A cause belongs to one axis: the axis' cause is the first of its own rules'.
    stray = replace(RULES["K006"], id="K099", cause=Cause.KV_ADMISSION)
    assert undeclared([*RULES.values(), stray]) == [
        "cause kv_admission is named on more than one axis: kv_memory, queueing"]
    # A remedy no rule names is never priced.
    unnamed = [replace(r, remedies=tuple(m for m in r.remedies if m is not Remedy.BATCH_BUDGET))
               for r in RULES.values()]
    assert undeclared(unnamed) == ["no rule names remedy batch_budget: the ledger never prices it"]


def test_the_ledger_prices_every_remedy_in_its_order() -> None:
    assert list(REMEDIES) == list(Remedy)


# A rule id as a whole string, as code names it ("Q005"); words that cite one are text.
RULE_ID = re.compile(r"[QKPD]\d{3}")


def test_no_code_names_a_rule_outside_its_own_file() -> None:
    # The verdict, the ledger and the analyzers ask what the rules declare, never which fired.
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = re.fullmatch(r"[qkpd]\d{3}_\w+\.py", path.name) and path.parent.name == "rules"
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value}"
                  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and RULE_ID.fullmatch(node.value)
                  and not (own and node.value == path.name[:4].upper())]
    assert found == []
