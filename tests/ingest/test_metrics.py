"""Prometheus metrics exports: JSON and CSV readers, canonical lookups and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from yaotu_trace.errors import TraceReadError
from yaotu_trace.ingest.load import read_metrics


def test_metrics_prometheus_json_range_query() -> None:
    m = read_metrics(FIXTURES / "prom_vllm_small.json")
    assert "vllm:num_requests_waiting" in m.names
    waiting = m.gauge("num_waiting")
    assert waiting is not None
    # Summed over the two engines per timestamp; engine 0's NaN sample is dropped.
    assert waiting["value"].tolist() == [1.0, 4.0, 5.0]
    assert m.counter_increase("preemptions") == 3.0  # 10 → 12, then a reset to 1
    assert m.counter_increase("prefix_queries") == 4000.0
    assert m.counter_increase("prefix_hits") == 1000.0
    assert m.histogram_mean("iteration_tokens") == 150.0
    assert m.gauge("kv_usage", how="max")["value"].tolist() == [0.42, 0.97, 0.99]
    steps = m.counter_steps("preemptions")
    assert steps["delta"].tolist() == [2.0, 1.0]
    assert m.name_of("num_running") is None


def test_metrics_csv_with_sglang_names() -> None:
    m = read_metrics(FIXTURES / "prom_sglang_small.csv")
    assert m.name_of("num_waiting") == "sglang:num_queue_reqs"
    waiting = m.gauge("num_waiting")
    assert waiting["time_s"].tolist() == [1732931200.0, 1732931215.0]  # ISO time converted
    assert waiting["value"].tolist() == [2.0, 4.0]
    assert m.name_of("kv_usage") == "sglang:token_usage"
    assert m.counter_increase("preemptions") == 3.0
    assert m.gauge("cache_hit_rate")["value"].tolist() == [0.25, 0.35]
    # Both label spellings name the same series.
    assert set(m.frame.loc[m.frame["metric"] == "sglang:num_queue_reqs", "labels"]) == {
        "tp_rank=0"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("prom_error.json", "field 'status': 'error' (parse error at char 5)"),
        ("prom_bad_value.json", "result[0].values[1], field 'value': 'two' is not a number"),
        ("prom_bad_value.csv", "line 3, field 'value': 'many' is not a number"),
        ("prom_bad_header.csv", "line 1, header lacks column(s) 'timestamp', 'metric'"),
    ],
)
def test_metrics_errors_are_one_line_with_location(name: str, expected: str) -> None:
    with pytest.raises(TraceReadError) as info:
        read_metrics(FIXTURES / name)
    message = str(info.value)
    assert message.startswith(str(FIXTURES / name))
    assert expected in message
    assert "\n" not in message


def test_metrics_invalid_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"status": "success",\n "data": {')
    with pytest.raises(TraceReadError, match=r"line 2, column \d+: not valid JSON"):
        read_metrics(path)


def test_metrics_missing_name_and_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"status":"success","data":{"resultType":"matrix","result":'
                    '[{"metric":{"job":"x"},"values":[[1,"2"]]}]}}')
    with pytest.raises(TraceReadError, match=r"result\[0\], field 'metric.__name__'"):
        read_metrics(path)
    other = tmp_path / "m.yaml"
    other.write_text("x")
    with pytest.raises(TraceReadError, match=r"metrics are read from \.json"):
        read_metrics(other)
    text = tmp_path / "m.txt"
    text.write_text("x")
    with pytest.raises(TraceReadError, match=r"m.txt: is neither /metrics text"):
        read_metrics(text)
    with pytest.raises(TraceReadError, match="no such metrics file"):
        read_metrics(tmp_path / "absent.json")


def test_metrics_empty_export_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"status":"success","data":{"resultType":"matrix","result":[]}}')
    with pytest.raises(TraceReadError, match="holds no samples"):
        read_metrics(path)
