"""How the golden scripts write their fixtures: one key a line, one configuration a line."""

from __future__ import annotations

import json
from pathlib import Path


def dump_configs(document: dict, path: Path) -> None:
    """`document` with its `configs` list one to a line: small, diffable, the same bytes every
    run."""
    head = {k: v for k, v in document.items() if k != "configs"}
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append('  "configs": [')
    configs = [f"    {json.dumps(c, separators=(',', ':'))}" for c in document["configs"]]
    lines.append(",\n".join(configs))
    lines += ["  ]", "}"]
    path.write_text("\n".join(lines) + "\n")
