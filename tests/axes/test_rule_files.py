"""Each rule is one file: its id, axis, words, the thresholds it reads and its check together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from yaotu_trace.axes.base import AxisName, Cause
from yaotu_trace.axes.rule import Rule, evaluate
from yaotu_trace.axes.rules import RULES
from yaotu_trace.axes.thresholds import THRESHOLDS, Thresholds, make_thresholds

ROOT = Path(__file__).resolve().parents[2]
AXES = ROOT / "yaotu_trace" / "axes"


def test_every_rule_file_holds_one_rule_named_after_its_id() -> None:
    files = sorted(AXES.glob("*/rules/[a-z][0-9][0-9][0-9]_*.py"))
    assert len(files) == len(RULES)
    for path in files:
        rule = RULES[path.name[:4].upper()]
        assert rule.axis == path.parent.parent.name


def test_each_axis_lists_its_rules_in_id_order() -> None:
    for axis in AxisName:
        ids = [r.id for r in RULES.values() if r.axis is axis]
        assert ids == sorted(ids) and ids


def test_a_rule_reads_only_thresholds_that_exist() -> None:
    for rule in RULES.values():
        assert set(rule.reads) <= set(THRESHOLDS), rule.id
        assert len(set(rule.reads)) == len(rule.reads), rule.id
        assert rule.defaults == {n: THRESHOLDS[n].default for n in rule.reads}


def test_a_check_sees_only_the_thresholds_it_declares() -> None:
    def sneaky(facts: object, t: Thresholds, found: frozenset[Cause]) -> None:
        t.stall_factor  # noqa: B018 - reads a threshold it did not declare

    rule: Rule[object] = Rule(id="Q999", axis=AxisName.QUEUEING, severity=RULES["Q001"].severity,
                              title="t", trigger="t", evidence="e", fix="f", cause=None,
                              remedies=(), reads=("window_s",), check=sneaky)
    with pytest.raises(AttributeError):
        evaluate([rule], object(), make_thresholds())


def test_the_axes_never_import_the_diagnosis() -> None:
    for path in AXES.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("yaotu_trace.diagnosis"), path
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("yaotu_trace.diagnosis") for a in node.names)
