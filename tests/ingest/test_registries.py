"""Every registry entry resolves: a typo in one would otherwise fail far from its cause.

Here the trace formats' registry (`yaotu_trace.ingest.registry`); the section views' registry
is checked next to it, in tests/render/test_views.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHILD_TIMEOUT_S, FIXTURES

from yaotu_trace.data.schema import RawTrace, normalize
from yaotu_trace.ingest import registry
from yaotu_trace.ingest.detect import detect_format
from yaotu_trace.ingest.formats import TraceFormat, TraceFormatSpec

PACKAGE = Path(__file__).resolve().parents[2] / "yaotu_trace"
SAMPLES = PACKAGE.parent / "sample_traces"
CAPTURES = FIXTURES / "captures"
MOONCAKE_LINES = (
    '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
    '{"timestamp": 250, "input_length": 100, "output_length": 3, "hash_ids": [1]}\n'
)


def _sample(fmt: TraceFormat, tmp_path: Path) -> Path:
    """A small file of every registered format (a new format adds its sample here)."""
    if fmt is TraceFormat.MOONCAKE:
        path = tmp_path / "mooncake.jsonl"
        path.write_text(MOONCAKE_LINES, encoding="utf-8")
        return path
    return {
        TraceFormat.CANONICAL_PARQUET: SAMPLES / "chat.parquet",
        TraceFormat.CANONICAL_JSONL: SAMPLES / "bursty.jsonl",
        TraceFormat.CANONICAL_CSV: SAMPLES / "multitenant.csv",
        TraceFormat.BAILIAN: FIXTURES / "bailian_small.jsonl",
        TraceFormat.AZURE: FIXTURES / "azure_small.csv",
        TraceFormat.BURSTGPT: FIXTURES / "burstgpt_small.csv",
        TraceFormat.RAGPULSE: FIXTURES / "ragpulse_mini",
        TraceFormat.WEKA: FIXTURES / "weka_mini",
        TraceFormat.VLLM_BENCH: FIXTURES / "vllm_bench_small.json",
        TraceFormat.OTEL: FIXTURES / "otel_small.json",
        TraceFormat.VIDUR: FIXTURES / "sim_traces" / "vidur_splitwise_code.csv",
        TraceFormat.SPLITWISE: FIXTURES / "sim_traces" / "splitwise_test_trace.csv",
        TraceFormat.AIPERF: FIXTURES / "aiperf" / "profile_export.jsonl",
        TraceFormat.GUIDELLM: FIXTURES / "guidellm" / "benchmarks_mock_server.json",
        TraceFormat.INFERENCE_PERF:
            FIXTURES / "inference_perf" / "per_request_lifecycle_metrics.json",
        TraceFormat.VLLM_LOG: CAPTURES / "vllm" / "vllm_requests.log",
        TraceFormat.SGLANG_LOG: CAPTURES / "sglang" / "requests_level3.log",
        TraceFormat.SGLANG_METRICS: CAPTURES / "sglang" / "metrics_agree",
        TraceFormat.DYNAMO: CAPTURES / "dynamo",
        TraceFormat.LITELLM: CAPTURES / "litellm" / "spend_logs.jsonl",
        TraceFormat.BASETEN: CAPTURES / "baseten" / "baseten_trace.parquet",
        TraceFormat.LMCACHE: CAPTURES / "lmcache",
        TraceFormat.GATEWAY: CAPTURES / "gateway" / "gateway.jsonl",
        TraceFormat.TRACELAB: FIXTURES / "tracelab" / "claude_rounds.jsonl",
        TraceFormat.VLLM_VCR: FIXTURES / "captures" / "vcr" / "cases.jsonl",
    }[fmt]


def test_the_format_registry_and_the_input_format_choices_agree() -> None:
    assert len(registry.ENTRIES) == len({fmt for fmt, _ in registry.ENTRIES})
    names = [spec.name for spec in registry.all_formats()]
    assert len(names) == len(set(names)), "a format is registered twice"
    assert set(names) == set(TraceFormat)
    assert all(isinstance(spec.name, TraceFormat) for spec in registry.all_formats())


@pytest.mark.parametrize("spec", registry.all_formats(), ids=lambda s: s.name.value)
def test_every_trace_format_resolves(spec: TraceFormatSpec) -> None:
    assert callable(spec.reader)
    assert spec.parts_reader is None or callable(spec.parts_reader)
    assert spec.description and "\n" not in spec.description
    assert spec.row_label in ("line", "row", "request", "span")
    detected_by = (spec.extensions, spec.json_keys, spec.json_document, spec.csv_header,
                   spec.folder, spec.parquet_footer, spec.text_head)
    assert any(detected_by), f"{spec.name}: no way to detect it"
    assert all(e.startswith(".") and e == e.lower() for e in spec.extensions)


@pytest.mark.parametrize("spec", registry.all_formats(), ids=lambda s: s.name.value)
def test_every_trace_format_detects_and_reads_its_sample(spec: TraceFormatSpec,
                                                         tmp_path: Path) -> None:
    path = _sample(spec.name, tmp_path)
    assert detect_format(path) is spec.name
    raw = spec.reader(path)
    assert isinstance(raw, RawTrace)
    assert (raw.format_name, raw.row_label) == (spec.name.value, spec.row_label)
    if spec.parts_reader is not None:
        parts = list(spec.parts_reader(path, 50))
        assert len(parts) > 1, "the sample should span several parts"
        assert sum(len(p.requests) for p in parts) == len(raw.requests)
        assert {(p.format_name, p.row_label) for p in parts} == {(raw.format_name,
                                                                 raw.row_label)}


def test_detecting_a_canonical_parquet_trace_loads_no_other_format() -> None:
    # The registry imports a format's module when detection reaches it (the choices of
    # --input-format come from ingest/formats.py, which loads none; tests/cli/test_startup.py).
    # A canonical Parquet trace, asked first, loads no other format's module.
    probe = ("import json, sys; from pathlib import Path; "
             "from yaotu_trace.ingest.detect import detect_format; "
             f"detect_format(Path({str(SAMPLES / 'chat.parquet')!r})); "
             "print(json.dumps(sorted(m for m in sys.modules "
             "if m.startswith('yaotu_trace.ingest.traces.'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=CHILD_TIMEOUT_S)
    assert json.loads(done.stdout) == ["yaotu_trace.ingest.traces.canonical_formats"]


def test_the_formats_page_lists_the_registry() -> None:
    # Regenerate the table with: python -c "from yaotu_trace.ingest.registry import
    # formats_table; print(formats_table())"
    page = (PACKAGE.parent / "docs" / "formats.md").read_text(encoding="utf-8")
    assert registry.formats_table() in page


def test_the_formats_page_example_reads_a_trace(tmp_path: Path) -> None:
    page = (PACKAGE.parent / "docs" / "formats.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", page, re.S)
    assert example is not None
    # The example names a TraceFormat member it asks the reader to add.
    namespace: dict[str, object] = {}
    exec(example.group(1).replace("TraceFormat.MYSERVE", "'myserve'"), namespace)
    spec = namespace["FORMAT"]
    assert isinstance(spec, TraceFormatSpec) and spec.json_keys is not None
    assert spec.json_keys({"ts_ms", "in", "out"})
    path = tmp_path / "t.jsonl"
    path.write_text('{"ts_ms": 1200, "in": 812, "out": 64}\n{"ts_ms": 1500, "in": 9, "out": 1}\n',
                    encoding="utf-8")
    trace = normalize(spec.reader(path), str(path))
    assert trace.requests["arrival_s"].tolist() == [1.2, 1.5]
    assert trace.requests["prompt_len"].tolist() == [812, 9]
