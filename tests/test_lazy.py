"""One list of names per lazy package (yaotu_trace/_lazy.py): the mapping given to `lazy_names`
is what the package offers, and its `if TYPE_CHECKING:` imports say the same to mypy."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "yaotu_trace"


def _lazy_inits() -> list[Path]:
    """Every `__init__.py` that calls `lazy_names`."""
    return sorted(p for p in PACKAGE.rglob("__init__.py")
                  if "lazy_names(" in p.read_text(encoding="utf-8"))


def _package(init: Path) -> str:
    return ".".join(init.parent.relative_to(PACKAGE.parent).parts)


def _offered(tree: ast.Module) -> dict[str, str]:
    """The mapping literal given to `lazy_names`: name → module, relative to the package."""
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id == "lazy_names")
    return ast.literal_eval(call.args[1])  # type: ignore[no-any-return]


def _type_checked(tree: ast.Module, package: str) -> dict[str, str]:
    """The names imported under `if TYPE_CHECKING:`, each with its module."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
                for alias in stmt.names:
                    found[alias.asname or alias.name] = stmt.module.removeprefix(f"{package}.")
    return found


def test_every_lazy_package_is_found() -> None:
    assert [_package(p) for p in _lazy_inits()] == [
        "yaotu_trace", "yaotu_trace.diff", "yaotu_trace.ingest", "yaotu_trace.prefix",
        "yaotu_trace.prefix.tiers",
        "yaotu_trace.sim"]


@pytest.mark.parametrize("init", _lazy_inits(), ids=_package)
def test_the_type_checked_imports_are_the_names_offered(init: Path) -> None:
    tree = ast.parse(init.read_text(encoding="utf-8"))
    package = _package(init)
    offered = _offered(tree)
    block = "\n".join(f"    from {package}.{module} import {name}"
                      for name, module in sorted(offered.items(), key=lambda kv: kv[::-1]))
    assert _type_checked(tree, package) == offered, (
        f"{init}: under `if TYPE_CHECKING:` import exactly the names given to lazy_names:\n"
        f"{block}")


@pytest.mark.parametrize("init", _lazy_inits(), ids=_package)
def test_each_name_is_the_one_its_module_defines(init: Path) -> None:
    package = importlib.import_module(_package(init))
    offered = _offered(ast.parse(init.read_text(encoding="utf-8")))
    assert set(offered) <= set(package.__all__) and set(offered) <= set(dir(package))
    for name, module in offered.items():
        defined = importlib.import_module(f"{package.__name__}.{module}")
        assert getattr(package, name) is getattr(defined, name), name
    with pytest.raises(AttributeError, match="has no attribute 'not_offered'"):
        package.not_offered  # noqa: B018


# What a run of sweep, analyze or diagnose on a small trace never imports: numba (the numpy
# passes run instead), pydantic (typer's coercion, `cli/coercion.py`), rich (no bar, no
# table drawn), the `--residency` pass and the engine model (`sim/`: it prices a run with
# `--gpu`, and its import alone was 40 ms of a sweep's start).
NOT_IMPORTED = ("numba", "pydantic", "rich", "yaotu_trace.prefix.residency",
                "yaotu_trace.sim.fetch", "yaotu_trace.sim.scenario")


@pytest.mark.parametrize("command", [["sweep", "--preset", "mooncake"], ["analyze"],
                                     ["diagnose"]], ids=lambda c: c[0])
def test_a_small_trace_imports_no_heavy_module(command: list[str], tmp_path: Path) -> None:
    # GIVEN a small Mooncake file (read by pyarrow whole)
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": 100 * i, "input_length": 1500, "output_length": 20,
                    "hash_ids": [0, 1, 2 + i % 4]}) + "\n" for i in range(40)), encoding="utf-8")
    # WHEN the command runs in a fresh process
    code = ("import sys\nfrom yaotu_trace.cli import main\n"
            f"code = main([{command[0]!r}, {str(trace)!r}, *{command[1:]!r}, '-f', 'json'])\n"
            f"print([m for m in {NOT_IMPORTED!r} if m in sys.modules], file=sys.stderr)\n"
            "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True,
                          text=True, check=False)
    # THEN it succeeds without importing any of them
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"
    assert json.loads(done.stdout)["command"] == command[0]
