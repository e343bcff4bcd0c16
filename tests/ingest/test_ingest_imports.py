"""ingest/ reads traces and imports only the layers below it, even inside a function.

`ingest` sits above `data` and `catalog` and below everything that analyses a trace
(`replay`, `sim`, `profile`, `axes`, ...): a reader that reached up would pull the analysis
into every load, and into import circles.
"""

from __future__ import annotations

import ast
from pathlib import Path

INGEST = Path(__file__).resolve().parents[2] / "yaotu_trace" / "ingest"
BELOW = {"ingest", "data", "catalog", "errors", "files", "_lazy"}


def _imported_parts(tree: ast.AST) -> set[str]:
    """The `yaotu_trace.<part>` names a module imports, at any depth."""
    parts: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "yaotu_trace":
                names = [f"yaotu_trace.{alias.name}" for alias in node.names]
        else:
            continue
        parts |= {n.split(".")[1] for n in names if n.startswith("yaotu_trace.")}
    return parts


def test_ingest_imports_only_the_layers_below() -> None:
    upward = {}
    for path in sorted(INGEST.rglob("*.py")):
        found = _imported_parts(ast.parse(path.read_text(encoding="utf-8"))) - BELOW
        if found:
            upward[path.relative_to(INGEST).as_posix()] = sorted(found)
    assert upward == {}
