"""What the input checks cost: this tree against an earlier checkout, on the same traces.

The checks of values (whole token ids, int64 bounds, finite times), damaged files, compressed
input, output identities and the telemetry's clock all run on every command. This prints, for
each trace and command, the wall time and peak memory of this tree and of a baseline tree (an
earlier commit checked out elsewhere: `git worktree add /tmp/base <commit>`), their ratio, and
whether the JSON reports are the same.

    python benchmarks/trust.py --baseline-tree /tmp/base
    python benchmarks/trust.py --baseline-tree /tmp/base --traces mooncake --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from common import ROOT, run_trace  # type: ignore[import-not-found]

SHARED = ROOT.parent / "shared" / "traces"
TRACES = {
    "chat-sample": ROOT / "sample_traces" / "chat.parquet",
    "mooncake": SHARED / "mooncake" / "conversation_trace.jsonl",
    "azure-code": SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv",
}
COMMANDS = {"analyze": ["analyze"], "replay": ["replay", "--no-waterfall"]}


def _run(tree: Path, args: list[str], repeat: int) -> dict[str, object]:
    """The median of `repeat` fresh processes of `trace ARGS` importing the package from `tree`."""
    head = ["-c", f"import sys; sys.path.insert(0, {str(tree)!r}); "
                  "from yaotu_trace.cli import main; sys.exit(main(sys.argv[1:]))"]
    runs = [run_trace([*args, "--format", "json"], head) for _ in range(repeat)]
    ok = [r for r in runs if r["ok"]]
    if not ok:
        return {"ok": False, "code": runs[-1]["returncode"]}
    return {"ok": True, "wall_s": statistics.median(r["wall_s"] for r in ok),
            "peak_gib": max(r["peak_gib"] or 0.0 for r in ok), "report": _comparable(ok[0])}


def _comparable(run: dict[str, object]) -> object:
    """The JSON report without what names the tree (the tool's version)."""
    doc = json.loads(str(run["out"]))
    doc.pop("tool", None)
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-tree", type=Path, required=True,
                        help="a checkout of an earlier commit (its yaotu_trace/ is imported)")
    parser.add_argument("--traces", default=",".join(TRACES), help="comma-separated names")
    parser.add_argument("--repeat", type=int, default=3, help="processes per cell (median)")
    args = parser.parse_args()
    rows = []
    for name in args.traces.split(","):
        path = TRACES[name]
        if not path.exists():
            print(f"skip {name}: {path} not found", file=sys.stderr)
            continue
        for command, words in COMMANDS.items():
            line = [*words[:1], str(path), *words[1:]]
            now = _run(ROOT, line, args.repeat)
            base = _run(args.baseline_tree, line, args.repeat)
            rows.append((name, command, now, base))
    print("| trace | command | this tree s | GiB | baseline s | GiB | time ratio | same JSON |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, command, now, base in rows:
        if not (now["ok"] and base["ok"]):
            def outcome(run: dict[str, object]) -> str:
                return "ok" if run["ok"] else f"exit {run['code']}"

            print(f"| {name} | {command} | {outcome(now)} | | {outcome(base)} | | | |")
            continue
        ratio = float(now["wall_s"]) / float(base["wall_s"])  # type: ignore[arg-type]
        same = "yes" if now["report"] == base["report"] else "no"
        print(f"| {name} | {command} | {now['wall_s']:.2f} | {now['peak_gib']:.2f} | "
              f"{base['wall_s']:.2f} | {base['peak_gib']:.2f} | {ratio:.2f}× | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
