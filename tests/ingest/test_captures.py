"""The captures a deployment writes (tests/fixtures/captures/, written by each producer's own code)
are read with the request count and token totals the producer was fed (`workload.py`)."""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from yaotu_trace.errors import ExitCode, TraceReadError, TraceSchemaError
from yaotu_trace.ingest.detect import detect_format
from yaotu_trace.ingest.formats import TraceFormat
from yaotu_trace.ingest.load import read_trace

CAPTURES = FIXTURES / "captures"
sys.path.insert(0, str(CAPTURES))
import workload  # noqa: E402

ALL = workload.requests()


def _fed(reqs: list[workload.Request], *, cached_block: int | None = None,
         flush_at_s: float | None = None) -> dict[str, int]:
    out = workload.totals(reqs)
    if cached_block is not None:
        engine = workload.Engine(block_tokens=cached_block, flush_at_s=flush_at_s)
        out["cached_tokens"] = sum(engine.serve(r) for r in ALL if r in reqs)
    return out


def _read(path: Path) -> dict[str, int]:
    df = read_trace(path).requests
    out = {"requests": len(df), "prompt_tokens": int(df["prompt_len"].sum()),
           "output_tokens": int(df["output_len"].sum())}
    if "cached_tokens" in df:
        out["cached_tokens"] = int(df["cached_tokens"].sum())
    return out


CASES = [
    ("vllm/vllm_requests.log", TraceFormat.VLLM_LOG, _fed(ALL)),
    ("sglang/requests_level3.log", TraceFormat.SGLANG_LOG, _fed(ALL[:16], cached_block=1)),
    ("sglang/requests_level2.jsonl.log", TraceFormat.SGLANG_LOG,
     _fed(ALL[:16], cached_block=1)),
    ("sglang/metrics_agree", TraceFormat.SGLANG_METRICS, _fed(ALL, cached_block=1)),
    ("sglang/metrics_flush", TraceFormat.SGLANG_METRICS,
     _fed(ALL, cached_block=1, flush_at_s=300.0)),
    ("dynamo", TraceFormat.DYNAMO, _fed(ALL, cached_block=16)),
    ("litellm/spend_logs.jsonl", TraceFormat.LITELLM, _fed(ALL[:24], cached_block=16)),
    ("lmcache", TraceFormat.LMCACHE, {**_fed(ALL), "output_tokens": 0}),
    ("vcr/workload.jsonl", TraceFormat.VLLM_VCR, _fed(ALL, cached_block=16)),
]


@pytest.mark.parametrize(("name", "fmt", "fed"), CASES, ids=[c[0] for c in CASES])
def test_capture_reads_the_requests_its_producer_was_fed(name: str, fmt: TraceFormat,
                                                         fed: dict[str, int]) -> None:
    path = CAPTURES / name
    assert detect_format(path) is fmt
    assert _read(path) == fed


def test_baseten_keeps_the_cancelled_request_without_output() -> None:
    trace = read_trace(CAPTURES / "baseten" / "baseten_trace.parquet")
    df = trace.requests
    cancelled = ALL[7]
    assert _read(CAPTURES / "baseten" / "baseten_trace.parquet") == {
        **_fed(ALL, cached_block=16), "output_tokens": 1215 - len(cancelled.output)}
    assert df.loc[df["status"] == "aborted", "prompt_len"].tolist() == [len(cancelled.prompt)]
    assert trace.source_block_size == 16 and set(df["tenant"]) == {"team-support", "team-coder"}
    assert any("prompt" in note for note in trace.notes)


def test_gateway_log_is_text_only_and_keeps_the_refused_request() -> None:
    trace = read_trace(CAPTURES / "gateway" / "gateway.jsonl")
    df = trace.requests
    refused = next(r for r in ALL if r.request_id == "conv6-turn1")
    fed = _fed(ALL[:24], cached_block=16)
    engine = workload.Engine(block_tokens=16)
    fed["cached_tokens"] = sum(engine.serve(r) for r in ALL[:24] if r is not refused)
    assert _read(CAPTURES / "gateway" / "gateway.jsonl") == {
        **fed, "prompt_tokens": fed["prompt_tokens"] - len(refused.prompt),
        "output_tokens": fed["output_tokens"] - len(refused.output)}
    assert df["status"].tolist().count("error") == 1
    assert "prompt_tokens" not in df and "prompt_block_ids" not in df
    assert any("message text, not token ids" in note for note in trace.notes)


def test_a_replay_of_the_gateway_log_asks_for_the_tokenizer(
        capsys: pytest.CaptureFixture[str]) -> None:
    # the fix the one line names is the one this log needs, not another trace
    for command in ("replay", "sweep"):
        code, _, err = run_cli([command, str(CAPTURES / "gateway" / "gateway.jsonl")], capsys)
        assert code == ExitCode.USAGE
        assert err.count("\n") == 1
        assert "no prompt content" in err and "--tokenizer tokenizer.json" in err


def test_vllm_log_keeps_each_token_id_and_joins_streamed_deltas() -> None:
    df = read_trace(CAPTURES / "vllm" / "vllm_requests.log").requests.set_index("request_id")
    for r in ALL:
        row = df.loc[f"cmpl-{r.request_id}-0"]
        assert list(row["prompt_tokens"]) == list(r.prompt)
        assert list(row["output_tokens"]) == list(r.output)
    assert df["arrival_s"].min() == 0.0 and df["arrival_s"].max() == pytest.approx(
        int(workload.START_UNIX_S + ALL[-1].arrival_s) - int(workload.START_UNIX_S +
                                                            ALL[0].arrival_s))


def test_block_id_captures_keep_prefixes_shared_and_their_block_size() -> None:
    for name, size in (("dynamo", 16), ("lmcache", 64), ("litellm/spend_logs.jsonl", 16)):
        trace = read_trace(CAPTURES / name)
        ids = trace.requests.set_index("request_id")["prompt_block_ids"]
        assert trace.source_block_size == size
        first, later = (next(i for k, i in ids.items() if k.endswith(f"conv5-turn{t}"))
                        for t in (0, 1))
        assert list(later[:len(first) - 1]) == list(first[:len(first) - 1])


def test_sglang_capture_notes_name_the_fields_it_does_not_use() -> None:
    notes = read_trace(CAPTURES / "sglang" / "metrics_agree").notes
    unused = next(n for n in notes if n.startswith("fields in the file"))
    assert "meta_info.queue_time (48)" in unused and "request.sampling_params (48)" in unused


def test_a_capture_reads_the_same_gzipped(tmp_path: Path) -> None:
    for name in ("vllm/vllm_requests.log", "litellm/spend_logs.jsonl"):
        source = CAPTURES / name
        packed = tmp_path / (source.name + ".gz")
        with source.open("rb") as fh, gzip.open(packed, "wb") as out:
            shutil.copyfileobj(fh, out)
        assert _read(packed) == _read(source)


def test_a_bad_value_is_one_line_naming_file_line_and_field(tmp_path: Path) -> None:
    lines = (CAPTURES / "litellm" / "spend_logs.jsonl").read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace('"prompt_tokens": ', '"prompt_tokens": -', 1)
    bad = tmp_path / "spend.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceSchemaError, match=r"spend.jsonl: line 3, field 'prompt_tokens': "
                                               r"-\d+ is negative; pass LiteLLM"):
        read_trace(bad)


def test_a_vllm_log_without_token_ids_names_the_log_level(tmp_path: Path) -> None:
    text = (CAPTURES / "vllm" / "vllm_requests.log").read_text(encoding="utf-8")
    info_only = tmp_path / "info.log"
    info_only.write_text("".join(line + "\n" for line in text.splitlines() if " DEBUG " not in
                                 line), encoding="utf-8")
    with pytest.raises(TraceSchemaError, match="no prompt_token_ids: vLLM writes them at DEBUG"):
        read_trace(info_only)


def test_a_sglang_export_folder_without_its_files_is_refused(tmp_path: Path) -> None:
    from yaotu_trace.ingest.traces.sglang_metrics import read_sglang_metrics

    with pytest.raises(TraceReadError, match="no sglang-request-metrics-"):
        read_sglang_metrics(tmp_path)


def test_the_formats_page_examples_read_each_capture_as_its_format() -> None:
    import re

    page = (CAPTURES.parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    examples = re.findall(r"^    trace analyze (tests/fixtures/captures/\S+)\s+# (\S+)$", page,
                          re.M)
    assert {fmt for _, fmt in examples} == {f.value for f in CAPTURE_FORMATS}
    for path, fmt in examples:
        target = CAPTURES.parents[2] / path
        assert detect_format(target).value == fmt
        assert len(read_trace(target).requests) > 0


CAPTURE_FORMATS = (TraceFormat.VLLM_LOG, TraceFormat.SGLANG_LOG, TraceFormat.SGLANG_METRICS,
                   TraceFormat.DYNAMO, TraceFormat.LITELLM, TraceFormat.BASETEN,
                   TraceFormat.LMCACHE, TraceFormat.GATEWAY, TraceFormat.VLLM_VCR)


def test_baseten_absurd_start_names_the_row_from_one_and_the_unit(tmp_path: Path) -> None:
    """The second row's `timestamp_start_unix_ms` made 5e15 ms: the error names row 2 (rows
    counted from 1, as the Parquet reader names them) and says the column is milliseconds,
    which the reader divided, rather than "convert ms to s"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(CAPTURES / "baseten" / "baseten_trace.parquet")
    name = "timestamp_start_unix_ms"
    starts = table.column(name).to_pylist()
    starts[1] = 5 * 10**15
    at = table.schema.get_field_index(name)
    pq.write_table(table.set_column(at, name, pa.array(starts, table.schema.field(at).type)),
                   tmp_path / "baseten.parquet")
    with pytest.raises(TraceSchemaError) as err:
        read_trace(tmp_path / "baseten.parquet", fmt=TraceFormat.BASETEN)
    assert f"row 2, column '{name}' (read as arrival_s)" in str(err.value)
    assert "in milliseconds" in str(err.value) and "convert ms" not in str(err.value)
