"""The versioned JSON document (a public contract; see docs/json.md)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from yaotu_trace.data.report import Report

SCHEMA_RESOURCE = "report.schema.json"


def render_json(report: Report) -> str:
    """Deterministic JSON: insertion order of the report, no NaN, two-space indent."""
    return json.dumps(report.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def json_schema() -> dict[str, Any]:
    """The shipped JSON Schema (draft 2020-12) that every command's JSON validates against."""
    text = resources.files("yaotu_trace.resources").joinpath(SCHEMA_RESOURCE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
