"""Speed of reading the engine's own per-step files, each against the floor of any reader of
it, in the same run:

- vllm-vcr's step-stats sidecar (`ingest/traces/vcr_steps.py`) as the step log (`--steps`)
  and as the engine's series (`--metrics`), against `json.loads` of every line;
- vLLM's `--enable-logging-iteration-details` server log as the step log
  (`serverlog.server_log_steps`), against finding each line's iteration number.

The files are the fixtures of `tests/fixtures/captures/vcr/stats/` for multi_tenant (vLLM's own
statistics and log of 608 steps) repeated end to end, each copy's times after the last, to
`--lines` lines (a step a line: 100,000 lines are about a minute of a busy engine). Best of
`--repeat` runs, after a warm-up.

    python benchmarks/step_sources.py [--lines 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import best_of  # noqa: E402

STATS = ROOT / "tests" / "fixtures" / "captures" / "vcr" / "stats"
FIXTURE = STATS / "multi_tenant.step-stats.jsonl"
LOG = STATS / "multi_tenant.vllm.log"  # its steps within the first seconds of 2026-01-01


def main(argv: list[str] | None = None) -> int:
    """Write the long files, time each reading, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from yaotu_trace.ingest.load import read_metrics
    from yaotu_trace.ingest.telemetry.serverlog import server_log_steps
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

        sidecar = [("sidecar: json.loads of every line (floor)", best_of(floor, args.repeat)[0])]
        sidecar.append(("sidecar as the step log (--steps)",
                        best_of(lambda: read_step_stats(path), args.repeat)[0]))
        sidecar.append(("sidecar as the series (--metrics)",
                        best_of(lambda: read_metrics(path), args.repeat)[0]))
        log = Path(folder) / "vllm.log"
        log.write_text(_long_log(args.lines))
        number = re.compile(r"Iteration\((\d+)\)")

        def log_floor() -> None:
            with log.open() as fh:
                for text in fh:
                    number.search(text)

        iteration = [("log: each line's iteration number (floor)",
                      best_of(log_floor, args.repeat)[0]),
                     ("log as the step log (--steps)",
                      best_of(lambda: server_log_steps(log), args.repeat)[0])]
    print(f"{args.lines:,} lines each; the sidecar {megabytes:,.0f} MB")
    print(f"{'line':<44} {'seconds':>8} {'lines/s':>10} {'vs floor':>9}")
    for rows in (sidecar, iteration):
        for name, seconds in rows:
            print(f"{name:<44} {seconds:>8.2f} {args.lines / seconds:>10,.0f} "
                  f"{seconds / rows[0][1]:>8.2f}x")
    return 0


def _long_log(lines: int) -> str:
    """vLLM's log of multi_tenant's steps repeated to `lines` lines, copy k a minute later."""
    base = LOG.read_text().splitlines()
    stamp = re.compile(r"01-01 00:00:(\d\d)")
    out = []
    for n in range(lines):
        k = n // len(base)
        out.append(stamp.sub(lambda m, k=k: f"01-{1 + k // 1440:02d} {k // 60 % 24:02d}:"
                                             f"{k % 60:02d}:{m.group(1)}", base[n % len(base)]))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
