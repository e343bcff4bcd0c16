"""docs/rules.md and docs/axes.md agree with the code; every rule is reachable by id."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from yaotu_trace.axes.kv_memory import KvMetrics
from yaotu_trace.axes.pd_interference import InterferenceMetrics
from yaotu_trace.axes.prefix_reuse import PrefixMetrics
from yaotu_trace.axes.queueing import QueueingMetrics
from yaotu_trace.axes.rules import RULES, rules_markdown
from yaotu_trace.axes.thresholds import THRESHOLDS

ROOT = Path(__file__).resolve().parents[2]


def test_rules_doc_is_generated_from_the_catalog() -> None:
    # Regenerate with: python -c "from yaotu_trace.axes.rules import rules_markdown;
    # open('docs/rules.md', 'w').write(rules_markdown())"
    assert (ROOT / "docs" / "rules.md").read_text(encoding="utf-8") == rules_markdown()


def test_rule_ids_in_code_and_catalog_agree() -> None:
    # Every rule is emitted by its own check, in its own file under axes/<axis>/rules/.
    emitted: set[str] = set()
    for path in (ROOT / "yaotu_trace" / "axes").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "check=_check" in text:
            emitted |= set(re.findall(r'\bid="([QKPD]\d{3})"', text))
    assert emitted == set(RULES)


def test_rules_have_unique_prefixed_ids_and_words() -> None:
    prefix = {"queueing": "Q", "kv_memory": "K", "prefix_reuse": "P", "pd_interference": "D"}
    for rule_id, rule in RULES.items():
        assert rule.id == rule_id
        assert rule_id.startswith(prefix[rule.axis])
        assert rule.title and rule.trigger and rule.evidence and rule.fix


def test_every_threshold_has_a_one_line_rationale_and_is_documented() -> None:
    doc = rules_markdown()
    for name, t in THRESHOLDS.items():
        assert t.rationale and "\n" not in t.rationale and len(t.rationale) <= 100
        assert f"| {name} |" in doc


def test_axes_doc_defines_every_metric() -> None:
    doc = (ROOT / "docs" / "axes.md").read_text(encoding="utf-8")
    for cls in (QueueingMetrics, KvMetrics, PrefixMetrics, InterferenceMetrics):
        for f in dataclasses.fields(cls):
            assert f"`{f.name}`" in doc, f"{cls.__name__}.{f.name} is not in docs/axes.md"


def test_axes_doc_lists_every_engine_metric_name() -> None:
    from yaotu_trace.data.metric_names import COUNTERS, GAUGES, HISTOGRAMS

    doc = (ROOT / "docs" / "axes.md").read_text(encoding="utf-8")
    for table in (GAUGES, COUNTERS, HISTOGRAMS):
        for key, names in table.items():
            assert f"| {key} |" in doc
            for name in names:
                assert f"`{name}`" in doc
