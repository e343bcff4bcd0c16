"""What AIPerf's TraceLab loader reads from the public TraceLab example: per session, each
round's submission time, prompt and output length, written to
`tests/fixtures/tracelab/aiperf_rounds.json` for `tests/ingest/test_tracelab.py`.

Runs AIPerf's own conversion (`aiperf/dataset/loader/_tracelab_convert.py`: `order_rounds`,
then `build_trace`, as `TraceLabTraceDatasetLoader` calls it, subagent join off) over the
rows of `../shared/traces/tracelab_example/round_trace.jsonl` grouped by `session_id`, and
keeps for each session the absolute submission time of its first round (`order_rounds`) and
each request's `t` (seconds since it), `in` and `out`. AIPerf lives in its own environment:

    python3 -m venv /tmp/venv-aiperf && /tmp/venv-aiperf/bin/pip install aiperf==0.13.0
    /tmp/venv-aiperf/bin/python benchmarks/engines/tracelab_aiperf.py
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

from aiperf.dataset.loader._tracelab_convert import build_trace, order_rounds

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "traces" / "tracelab_example" / "round_trace.jsonl"
OUT = ROOT / "tests" / "fixtures" / "tracelab" / "aiperf_rounds.json"
BLOCK_SIZE = 64  # the loader's default; the block ids it mints are not kept here


def main() -> int:
    """Convert every session and write the fixture."""
    if not TRACE.exists():
        print(f"skipped: {TRACE} is not here")
        return 0
    sessions: dict[str, list[dict]] = defaultdict(list)
    for line in TRACE.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            sessions[row["session_id"]].append(row)
    out = {"producer": f"aiperf {version('aiperf')} _tracelab_convert.build_trace",
           "trace": "tracelab_example/round_trace.jsonl", "sessions": {}}
    for sid, rows in sessions.items():
        first_s = order_rounds(rows)[0][0]
        blob = build_trace(sid, rows, BLOCK_SIZE)
        assert blob is not None
        out["sessions"][sid] = {
            "first_submission_unix_s": first_s,
            "requests": [{"t": r["t"], "in": r["in"], "out": r["out"]}
                         for r in blob["requests"] if r["type"] == "n"],
        }
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {sum(len(s['requests']) for s in out['sessions'].values())} requests "
          f"in {len(out['sessions'])} sessions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
