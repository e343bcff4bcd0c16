"""Speed of reading vllm-vcr's step-stats sidecar (`ingest/traces/vcr_steps.py`), as the step
log (`--steps`) and as the engine's series (`--metrics`), against the floor of any reader of
it: `json.loads` of every line and nothing else.

The sidecar is the fixture `tests/fixtures/captures/vcr/stats/multi_tenant.step-stats.jsonl`
(vLLM's own statistics of 608 steps, every block's eviction events) repeated end to end, each
copy's times shifted after the last, to `--lines` lines (a step a line: 100,000 lines are
about a minute of a busy engine). Best of `--repeat` runs, after a warm-up.

    python benchmarks/vcr_sidecar.py [--lines 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import best_of  # noqa: E402

FIXTURE = (ROOT / "tests" / "fixtures" / "captures" / "vcr" / "stats"
           / "multi_tenant.step-stats.jsonl")


def main(argv: list[str] | None = None) -> int:
    """Write the long sidecar, time the three lines, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from yaotu_trace.ingest.load import read_metrics
    from yaotu_trace.ingest.traces.vcr_steps import read_step_stats

    base = [json.loads(x) for x in FIXTURE.read_text().splitlines() if x.strip()]
    span = base[-1]["ts_ms"] + 1.0
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "step-stats.jsonl"
        with path.open("w") as fh:
            for n in range(args.lines):
                line = dict(base[n % len(base)])
                line["ts_ms"] = line["ts_ms"] + span * (n // len(base))
                fh.write(json.dumps(line, separators=(",", ":")) + "\n")
        megabytes = path.stat().st_size / 1e6

        def floor() -> None:
            with path.open() as fh:
                for text in fh:
                    json.loads(text)

        rows = [("json.loads of every line (the floor)", best_of(floor, args.repeat)[0])]
        rows.append(("as the step log (--steps)",
                     best_of(lambda: read_step_stats(path), args.repeat)[0]))
        rows.append(("as the engine's series (--metrics)",
                     best_of(lambda: read_metrics(path), args.repeat)[0]))
    print(f"sidecar: {args.lines:,} lines, {megabytes:,.0f} MB")
    print(f"{'line':<40} {'seconds':>8} {'lines/s':>10} {'vs floor':>9}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:>8.2f} {args.lines / seconds:>10,.0f} "
              f"{seconds / rows[0][1]:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
