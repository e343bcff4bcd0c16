"""Prometheus text exposition (`curl .../metrics`) as `--metrics`: snapshots, scrape series,
`_created` dating, counter resets and one-line errors. Fixtures: tests/fixtures/prom_text/README.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from yaotu_trace.errors import ExitCode, TraceReadError
from yaotu_trace.ingest.load import read_metrics
from yaotu_trace.ingest.telemetry.prom_text import time_in_name

ROOT = Path(__file__).resolve().parents[2]
DATA = FIXTURES / "prom_text"
SGL = "model_name=meta-llama/Llama-3.1-8B-Instruct"


def _value(m, metric: str, labels: str) -> float:
    rows = m.frame[(m.frame["metric"] == metric) & (m.frame["labels"] == labels)]
    assert len(rows) == 1, (metric, labels, rows)
    return float(rows["value"].iloc[0])


def test_sglang_docs_snapshot_gauges_and_counters() -> None:
    """SGLang's own docs/references/production_metrics.md example (values copied by hand from
    it): the gauges at one instant, the counters as totals, and a note that no time is known."""
    m = read_metrics(DATA / "sglang_docs_snapshot.prom")
    # One instant's gauges are named with their values and not judged (a queue or a KV usage
    # needs them over time).
    assert m.gauge("num_running") is None and m.gauge("cache_hit_rate") is None
    assert "(num_waiting 2826, num_running 162, kv_usage 0.28) are shown here and not judged" \
        in m.notes[-1]
    assert _value(m, "sglang:prompt_tokens_total", SGL) == 8.128902e06
    assert _value(m, "sglang:generation_tokens_total", SGL) == 7.557572e06
    assert _value(m, "sglang:time_to_first_token_seconds_bucket", "le=+Inf," + SGL) == 11008.0
    assert _value(m, "sglang:func_latency_seconds_count", "name=generate_request") == 14007.0
    assert len(m.frame) == 17 - 4  # every sample line of the excerpt but the 4 gauges
    assert set(m.frame["time_s"]) == {0.0}
    # One instant: the counters are read as totals since the engine started, and the notes say
    # so (and name the series no quantity reads).
    assert m.instant
    assert m.counter_increase("prompt_tokens") == 8.128902e06
    assert m.histogram_mean("ttft_s") is not None
    assert "counters are totals since the engine started" in m.notes[0]
    assert "sglang:func_latency_seconds_count" in m.notes[1]


def test_vllm_docs_snapshot_detected_by_content_in_a_txt() -> None:
    """vLLM's own docs/usage/metrics.md example, saved as .txt: read by content, labels as the
    JSON and CSV exports key them (sorted k=v)."""
    m = read_metrics(DATA / "vllm_docs_snapshot.txt")
    labels = "le=512.0,model_name=unsloth/Llama-3.2-1B-Instruct"
    assert _value(m, "vllm:iteration_tokens_total_bucket", labels) == 3.0
    assert _value(m, "vllm:iteration_tokens_total_sum",
                  "model_name=unsloth/Llama-3.2-1B-Instruct") == 0.0
    assert len(m.frame) == 9


def test_one_snapshot_dated_by_created(tmp_path: Path) -> None:
    """A vLLM snapshot whose counters carry `_created` (the Unix time prometheus_client gives a
    series when it is made): the counter is zero then, so its increase is its value, dated from
    the engine's start (hand-checked: 1234 prompt tokens over 300 s)."""
    path = tmp_path / "snap.prom"
    path.write_text(
        "# scrape 1776930473.5\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0\n'
        "# TYPE vllm:prompt_tokens_created gauge\n"
        'vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7769301735e+09\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n',
        encoding="utf-8",
    )
    m = read_metrics(path)
    assert m.counter_increase("prompt_tokens") == 1234.0
    assert "vllm:prompt_tokens_created" not in m.names  # a date, not a quantity
    times = m.frame[m.frame["metric"] == "vllm:prompt_tokens_total"]["time_s"].tolist()
    assert times == [1776930173.5, 1776930473.5]
    assert m.gauge("num_waiting")["time_s"].tolist() == [1776930473.5]
    assert "1 series date" in m.notes[0]


def test_vllm_scrape_series_with_restart() -> None:
    """Five `# scrape` snapshots (vllm_scrapes.prom, hand-written): the engine restarts between
    60 s and 90 s (`_created` goes from -5 to 75). Hand-checked as Prometheus' increase():
    preemptions 2→7→19→(restart)→2→5 gives 5+12+2+3 = 22; prompt tokens 1000→41000→90000→
    (restart)→6000→9000 gives 40000+49000+6000+3000 = 98000."""
    m = read_metrics(DATA / "vllm_scrapes.prom")
    assert m.counter_increase("preemptions") == 22.0
    assert m.counter_increase("prompt_tokens") == 98000.0
    waiting = m.gauge("num_waiting")
    assert waiting["time_s"].tolist() == [0.0, 30.0, 60.0, 90.0, 115.0]
    assert waiting["value"].tolist() == [0.0, 4.0, 9.0, 0.0, 0.0]
    steps = m.counter_steps("preemptions")
    assert steps["time_s"].tolist() == [30.0, 60.0, 90.0, 115.0]
    assert steps["delta"].tolist() == [5.0, 12.0, 2.0, 3.0]
    # The restart's zero sits at the new `_created` time.
    zero = m.frame[(m.frame["metric"] == "vllm:num_preemptions_total")
                   & (m.frame["time_s"] == 75.0)]
    assert zero["value"].tolist() == [0.0]
    assert "5 /metrics snapshots from 0.0 s to 115.0 s" in m.notes[0]
    assert "2 series restarted" in m.notes[1]


def test_sglang_scrape_folder_dated_by_file_names() -> None:
    """A folder of three SGLang snapshots named by UTC time, 15 s apart; the third follows a
    restart without `_created` (a drop), counted from zero: 2000 + 1500 = 3500 prompt tokens."""
    m = read_metrics(DATA / "scrapes_sglang")
    start = 1747218720.0  # 2025-05-14T10:32:00Z
    usage = m.gauge("kv_usage", how="max")
    assert usage["time_s"].tolist() == [start, start + 15, start + 30]
    assert usage["value"].tolist() == [0.28, 0.31, 0.02]
    assert m.counter_increase("prompt_tokens") == 3500.0
    assert "3 /metrics snapshots from 2025-05-14T10:32:00Z to 2025-05-14T10:32:30Z" in m.notes[0]


def test_sample_millisecond_timestamps_win(tmp_path: Path) -> None:
    """A sample's own timestamp (ms, as the exposition format allows) is its time."""
    path = tmp_path / "metrics"
    path.write_text('vllm:num_requests_waiting{engine="0"} 3 1747218727000\n'
                    'vllm:num_requests_waiting{engine="0"} 5 1747218742500\n', encoding="utf-8")
    m = read_metrics(path)
    assert m.gauge("num_waiting")["time_s"].tolist() == [1747218727.0, 1747218742.5]


@pytest.mark.parametrize(("name", "expected"), [
    ("20250514T103207Z.prom", 1747218727.0),
    ("scrape-2025-05-14T10:32:07Z.txt", 1747218727.0),
    ("2025-05-14_10-32-07.prom", 1747218727.0),
    ("1747218727.prom", 1747218727.0),
    ("1747218727500.txt", 1747218727.5),
    ("metrics.prom", None),
])
def test_time_in_file_name(name: str, expected: float | None) -> None:
    """File-name stamps, hand-converted: 2025-05-14T10:32:07Z is Unix 1747218727."""
    got = time_in_name(name)
    assert got == expected or (expected is not None and math.isclose(got or 0, expected))


@pytest.mark.parametrize(("text", "where", "says"), [
    ("vllm:num_requests_waiting 1\nvllm:num_requests_waiting{engine=0} 2\n", "line 2",
     "labels"),
    ("# TYPE x gauge\nvllm:num_requests_waiting 1\nthis is not a sample\n", "line 3",
     "as a sample"),
    ("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting one\n", "line 2",
     "not a number"),
    ("# scrape yesterday\nvllm:num_requests_waiting 1\n", "line 1", "ISO 8601"),
    ("vllm:num_requests_waiting 1\n# scrape 100\nvllm:num_requests_waiting 2\n", "line 1",
     "has no time"),
])
def test_malformed_lines_are_one_line_errors(tmp_path: Path, text: str, where: str,
                                             says: str) -> None:
    """Bad input: one line naming the file, the line and the fix."""
    path = tmp_path / "bad.prom"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceReadError) as err:
        read_metrics(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {where}") and says in message


def test_folder_of_undated_snapshots_is_refused(tmp_path: Path) -> None:
    """Two snapshots with no time between them cannot be ordered: refused, naming the fix."""
    for name in ("a.prom", "b.prom"):
        (tmp_path / name).write_text("sglang:num_queue_reqs 1\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"a\.prom: line 1: this snapshot has no time"):
        read_metrics(tmp_path)


def test_text_that_is_not_exposition_says_what_it_is_not(tmp_path: Path) -> None:
    """A .txt that is neither /metrics text nor a server log is refused naming both shapes
    and how to save a scrape (not with "got '.txt'", an extension the reader takes)."""
    path = tmp_path / "notes.txt"
    path.write_text("hello world\n", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"notes.txt: is neither /metrics text .* nor an "
                       r"engine server log .*curl -s http://HOST:PORT/metrics > m.prom"):
        read_metrics(path)


def test_diagnose_sample_trace_with_a_scrape_series(capsys) -> None:
    """`trace diagnose` on the bundled diag-kv-churn sample (relative clock, 0–113 s) with
    vllm_scrapes.prom (scrapes at 0…115 s): KV usage is read from the scrapes (mean of
    0.05, 0.93, 0.99, 0.12, 0.02 = 0.422) and the reader's notes reach the report."""
    code, out, err = run_cli(["diagnose", str(ROOT / "sample_traces/diag-kv-churn.parquet"),
                              "--metrics", str(DATA / "vllm_scrapes.prom"),
                              "--model", "llama-3.1-8b", "--gpu", "H100", "-f", "json"], capsys)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    kv = next(a for a in doc["axes"] if a["name"] == "kv_memory")
    assert "metrics" in kv["sources"]
    assert kv["metrics"]["kv_usage_source"] == "metrics"
    assert math.isclose(kv["metrics"]["kv_usage_mean"], 0.422)
    assert kv["metrics"]["kv_usage_max"] == 0.99
    assert any("5 /metrics snapshots" in n for n in doc["input"]["notes"])
    assert doc["config"]["metrics"]["path"].endswith("vllm_scrapes.prom")


def test_label_escapes(tmp_path: Path) -> None:
    """The exposition format escapes `\\`, `"` and a newline in label values (Prometheus'
    exposition_formats.md); the key keeps the unescaped text."""
    path = tmp_path / "esc.prom"
    path.write_text('# TYPE vllm:num_preemptions counter\n'
                    'vllm:num_preemptions_total{a="x\\"y\\\\z\\n",b="2"} 1\n', encoding="utf-8")
    m = read_metrics(path)
    assert m.frame["labels"].tolist() == ['a=x"y\\z\n,b=2']
