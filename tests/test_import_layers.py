"""No import circle anywhere in the package, counting imports inside functions and type-only ones.

The import-linter contracts in pyproject.toml check the layers and the cycles among siblings; a
circle through a package's own `__init__` (a parent importing its child, which imports the
parent back) is a sibling of nothing, so this test closes that gap with the same import graph.
"""

from __future__ import annotations

import pytest


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(imports[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return sorted(found)


def test_cycle_finder_sees_a_parent_child_circle() -> None:
    imports = {"p": {"p.a"}, "p.a": {"p"}, "p.b": {"p.a"}}
    assert _cycles(imports) == [["p", "p.a"]]


def test_no_import_circle() -> None:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("yaotu_trace", cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(imports) == []


def test_diff_sits_between_the_gate_and_the_diagnosis() -> None:
    # `trace diff` judges two runs with the diagnosis; `trace check --before` gates on it.
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    contracts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["type"] == "layers")["layers"]
    assert layers.index("gate") + 1 == layers.index("diff") == layers.index("diagnosis") - 1


def _private_imports(source: str, module: str) -> list[str]:
    """`module: from X import _name` for each underscore name `source` (the text of `module`)
    imports from another module of the package. A private module itself (`_lists`, `_lazy`)
    may be imported: it is a name of its package, not another module's private one."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:  # relative: from the module's own package upwards
            parts = module.split(".")[: -node.level]
            base = ".".join([*parts, *([base] if base else [])])
        if base != "yaotu_trace" and not base.startswith("yaotu_trace."):
            continue
        folder = package.joinpath(*base.split("."))
        for alias in node.names:
            name = alias.name
            is_module = (folder / f"{name}.py").exists() or (folder / name).is_dir()
            if name.startswith("_") and not name.startswith("__") and not is_module:
                found.append(f"{module}: from {base} import {name}")
    return found


def test_private_import_finder_sees_one() -> None:
    source = ("from yaotu_trace.prefix.kernels.chains import _keys, offsets_of\n"
              "from yaotu_trace import _lists\n"
              "def f():\n    from .curve import _pinned\n")
    assert _private_imports(source, "yaotu_trace.prefix.kernels.sweep") == [
        "yaotu_trace.prefix.kernels.sweep: from yaotu_trace.prefix.kernels.chains import _keys",
        "yaotu_trace.prefix.kernels.sweep: from yaotu_trace.prefix.kernels.curve import _pinned",
    ]


def test_no_module_imports_another_modules_private_name() -> None:
    # What one module offers another is named without an underscore (a package-private API);
    # an underscore name is its own module's business, inside functions as much as at the top.
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "yaotu_trace").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)  # `p.__init__`: in p
        found += _private_imports(path.read_text(encoding="utf-8"), module)
    assert found == []
