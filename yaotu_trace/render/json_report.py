"""The versioned JSON document (a public contract; see docs/json.md)."""

from __future__ import annotations

import json

from yaotu_trace.report import Report


def render_json(report: Report) -> str:
    """Deterministic JSON: insertion order of the report, no NaN, two-space indent."""
    return json.dumps(report.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
