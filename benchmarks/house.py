"""The house's joints, counted: long signatures, rule ids outside their rule files, imports inside
functions (issue 27's measures). Prints one table; run from the repository root:

    python benchmarks/house.py
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "yaotu_trace"
RULE_ID = re.compile(r"^[A-Z]\d{3}$")
RULE_FILE = re.compile(r"/axes/[a-z_]+/rules/[a-z]\d{3}_")
MAX_PARAMETERS = 7


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    return count - (1 if a.args and a.args[0].arg in ("self", "cls") else 0)


def _compiled(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def main() -> None:
    long_signatures: list[tuple[int, str, str]] = []
    stray_ids: Counter[str] = Counter()
    inner_imports: Counter[str] = Counter()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                inner_imports[rel.split("/")[1]] += sum(
                    isinstance(m, ast.Import | ast.ImportFrom) for m in ast.walk(node))
                if (_parameters(node) > MAX_PARAMETERS and not rel.startswith("yaotu_trace/cli/")
                        and not _compiled(node)):
                    long_signatures.append((_parameters(node), rel, node.name))
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and RULE_ID.match(node.value) and not RULE_FILE.search(rel)):
                stray_ids[rel] += 1
    print(f"{'measure':<58} {'count':>6}")
    print(f"{'functions outside cli/ and numba kernels, > 7 parameters':<58} "
          f"{len(long_signatures):>6}")
    print(f"{'rule-id-shaped literals outside the rule files':<58} {sum(stray_ids.values()):>6}")
    print(f"{'imports inside functions':<58} {sum(inner_imports.values()):>6}")
    for count, rel, name in sorted(long_signatures, reverse=True):
        print(f"  {count:>2} parameters  {rel}:{name}")
    for rel, count in stray_ids.most_common():
        print(f"  {count:>2} id literals  {rel}")
    for package, count in inner_imports.most_common():
        if count:
            print(f"  {count:>3} inner imports  {package}")


if __name__ == "__main__":
    main()
