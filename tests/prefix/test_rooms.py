"""The prefix package's two rooms: the kernels (`prefix/kernels/`) never import an analysis.

A kernel works on block chains and returns plain values; the analyses at `prefix/` (the
waterfall, the sweep's section, the overview, the grid, ...) are built on them. So a kernel
module may import other kernels and the package's shared vocabulary (the rules, the memory
checks), and nothing else of `prefix/`, inside functions and under TYPE_CHECKING too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaotu_trace.prefix.kernels

KERNELS = Path(yaotu_trace.prefix.kernels.__file__).parent
# What a kernel may import from `prefix/` besides the kernels themselves.
SHARED = ("yaotu_trace.prefix.rules", "yaotu_trace.prefix.memory")


def _analysis_imports(source: str) -> list[str]:
    """The modules of `prefix/` outside the kernels and the shared vocabulary that `source`
    imports (absolute imports: the package uses no relative ones)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if node.module != "yaotu_trace.prefix" else [
                f"yaotu_trace.prefix.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [name for name in names
                  if name.startswith("yaotu_trace.prefix.")
                  and not name.startswith("yaotu_trace.prefix.kernels")
                  and not name.startswith(SHARED)]
    return found


def test_the_finder_sees_an_analysis_import() -> None:
    source = ("from yaotu_trace.prefix import memory, waterfall\n"
              "from yaotu_trace.prefix.kernels.chains import BlockChains\n"
              "def f():\n    from yaotu_trace.prefix.prepare import prepare\n")
    assert _analysis_imports(source) == ["yaotu_trace.prefix.waterfall",
                                         "yaotu_trace.prefix.prepare"]


def test_kernels_import_no_analysis() -> None:
    found = {path.name: names for path in sorted(KERNELS.glob("*.py"))
             if (names := _analysis_imports(path.read_text(encoding="utf-8")))}
    assert found == {}
