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


def write_fixture(path: Path, *, engine: str, engine_version: str, torch_version: str,
                  trace: str, protocol: str, configs: list[dict]) -> None:
    """A golden fixture of the tier drivers: which engine and versions recorded it, on which
    trace and protocol, then one configuration a line (`dump_configs`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_configs({"engine": engine, "engine_version": engine_version,
                  "torch_version": torch_version, "trace": trace, "protocol": protocol,
                  "configs": configs}, path)
