"""Every bad input is a documented exit code and one line on stderr: what, where, and the fix.

Each case makes its files in a fresh folder, runs `trace` in this process, and checks the exit
code (2 for an option, 3 for a file, never 4), that stderr is exactly one line starting with
`error: `, and that the line names the file, row or column and says what to do. The list is the
matrix quoted in the docs; `python -m pytest tests/test_bad_input_matrix.py -v` prints it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import FIXTURES

from yaotu_trace.errors import ExitCode

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
MODEL = ["--model", "Llama-3.1-8B", "--gpu", "H100"]
USAGE, INPUT = ExitCode.USAGE, ExitCode.INPUT


def _row(i: int, **over: object) -> dict[str, object]:
    row: dict[str, object] = {"request_id": f"r{i}", "arrival_s": float(i), "prompt_len": 4,
                              "output_len": 2}
    row.update(over)
    return row


def jsonl(*rows: dict[str, object]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def good_rows(n: int = 3) -> list[dict[str, object]]:
    return [_row(i, prompt_tokens=[1, 2, 3, 4]) for i in range(n)]


def parquet_bytes(transform: Callable[[bytes], bytes] = lambda b: b) -> Callable[[Path], bytes]:
    """The bundled chat sample, transformed (truncated, a page overwritten)."""
    def make(_: Path) -> bytes:
        return transform((SAMPLES / "chat.parquet").read_bytes())
    return make


def _corrupt_page(data: bytes) -> bytes:
    """Garbage over the middle of the file: inside the data pages, the footer intact."""
    middle = len(data) // 2
    return data[:middle] + bytes(range(256)) * 16 + data[middle + 4096:]


def _parquet_table(columns: dict[str, object]) -> Callable[[Path], bytes]:
    def make(folder: Path) -> bytes:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / ".scratch.parquet"
        pq.write_table(pa.table(columns), path)
        data = path.read_bytes()
        path.unlink()
        return data
    return make


def _shifted_steps(folder: Path) -> bytes:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(SAMPLES / "diag-burst.steps.parquet")
    for name in ("start_s", "end_s"):
        if name in table.column_names:
            i = table.column_names.index(name)
            table = table.set_column(i, name, pc.add(table[name], 1_000_000.0))
    path = folder / ".scratch.parquet"
    pq.write_table(table, path)
    data = path.read_bytes()
    path.unlink()
    return data


def _burst_metrics(folder: Path) -> bytes:
    """The diag-burst run's Prometheus export, as `trace generate --metrics-out` writes it."""
    import pandas as pd

    from yaotu_trace.data.run_id import read_run_id
    from yaotu_trace.sim.generate import ENGINE_BLOCK_SIZE_TOKENS
    from yaotu_trace.sim.metrics_export import metrics_export

    table = metrics_export(pd.read_parquet(SAMPLES / "diag-burst.parquet"),
                           pd.read_parquet(SAMPLES / "diag-burst.steps.parquet"),
                           block_size_tokens=ENGINE_BLOCK_SIZE_TOKENS,
                           run=read_run_id(SAMPLES / "diag-burst.parquet"))
    return table.to_csv(index=False, float_format="%.17g").encode()


def _steps_without(column: str) -> Callable[[Path], bytes]:
    def make(folder: Path) -> bytes:
        import pyarrow.parquet as pq

        table = pq.read_table(SAMPLES / "diag-burst.steps.parquet")
        path = folder / ".scratch.parquet"
        pq.write_table(table.drop_columns([column]), path)
        data = path.read_bytes()
        path.unlink()
        return data
    return make


FileMaker = bytes | Path | Callable[[Path], bytes]


@dataclass(frozen=True)
class Case:
    """One bad input: the files it makes, the command line, the exit code and what stderr says."""

    id: str
    args: list[str]
    code: ExitCode
    says: tuple[str, ...]
    files: dict[str, FileMaker] = field(default_factory=dict)


TRACE = {"t.jsonl": jsonl(*good_rows())}
CHAT = SAMPLES / "chat.parquet"
BURST = {"t.parquet": SAMPLES / "diag-burst.parquet"}

CASES = [
    # -- the trace file --------------------------------------------------------------------
    Case("missing-trace", ["analyze", "nope.jsonl"], INPUT, ("nope.jsonl", "no such file")),
    Case("empty-jsonl", ["analyze", "t.jsonl"], INPUT, ("t.jsonl",), {"t.jsonl": b""}),
    Case("empty-parquet", ["analyze", "t.parquet"], INPUT, ("t.parquet",), {"t.parquet": b""}),
    Case("text-named-parquet", ["analyze", "t.parquet"], INPUT, ("t.parquet", "Parquet"),
         {"t.parquet": b"request_id,arrival_s\nr0,0\n"}),
    Case("truncated-parquet", ["analyze", "t.parquet"], INPUT, ("t.parquet",),
         {"t.parquet": parquet_bytes(lambda b: b[: len(b) // 2])}),
    Case("corrupt-parquet-page", ["replay", "t.parquet"], INPUT, ("t.parquet",),
         {"t.parquet": parquet_bytes(_corrupt_page)}),
    Case("corrupt-parquet-page-analyze", ["analyze", "t.parquet"], INPUT, ("t.parquet",),
         {"t.parquet": parquet_bytes(_corrupt_page)}),
    Case("invalid-json-line", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "line 2"),
         {"t.jsonl": jsonl(_row(0)) + b'{"request_id": "r1", \n'}),
    Case("json-array-not-jsonl", ["analyze", "t.jsonl"], INPUT, ("t.jsonl",),
         {"t.jsonl": json.dumps([_row(0), _row(1)]).encode()}),
    Case("missing-arrival", ["diagnose", "t.jsonl"], INPUT, ("t.jsonl", "arrival_s"),
         {"t.jsonl": jsonl({"request_id": "r0", "prompt_len": 3, "output_len": 1})}),
    Case("text-arrival", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "arrival_s"),
         {"t.jsonl": jsonl(_row(0), _row(1, arrival_s="soon"))}),
    Case("nan-arrival", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "arrival_s"),
         {"t.jsonl": b'{"request_id":"r0","arrival_s":NaN,"prompt_len":3,"output_len":1}\n'}),
    Case("negative-prompt-len", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "prompt_len"),
         {"t.jsonl": jsonl(_row(0), _row(1, prompt_len=-4))}),
    Case("negative-output-len", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "output_len"),
         {"t.jsonl": jsonl(_row(0), _row(1, output_len=-1))}),
    Case("prompt-len-beyond-int64", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "prompt_len"),
         {"t.jsonl": jsonl(_row(0), _row(1, prompt_len=2**70))}),
    Case("token-id-beyond-int64", ["replay", "t.jsonl"], INPUT, ("t.jsonl", "prompt_tokens"),
         {"t.jsonl": jsonl(_row(0, prompt_tokens=[1, 2, 3, 2**70]))}),
    Case("fractional-token-id", ["replay", "t.jsonl"], INPUT, ("t.jsonl", "prompt_tokens"),
         {"t.jsonl": jsonl(_row(0, prompt_tokens=[1, 2, 3, 4]),
                           _row(1, prompt_tokens=[1, 2, 3, 1.5]))}),
    Case("text-token-id", ["replay", "t.jsonl"], INPUT, ("t.jsonl", "prompt_tokens"),
         {"t.jsonl": jsonl(_row(0, prompt_tokens=[1, "two", 3, 4]))}),
    Case("duplicate-request-id", ["analyze", "t.jsonl"], INPUT, ("t.jsonl", "line 2",
                                                                 "request_id"),
         {"t.jsonl": jsonl(_row(0), {**_row(1), "request_id": "r0"})}),
    Case("csv-missing-column", ["diagnose", "t.csv"], INPUT, ("t.csv", "arrival_s"),
         {"t.csv": b"request_id,prompt_len,output_len\nr0,3,1\n"}),
    Case("csv-ragged-row", ["analyze", "t.csv"], INPUT, ("t.csv",),
         {"t.csv": b"request_id,arrival_s,prompt_len,output_len\nr0,0,3,1\nr1,1,3,1,9,9\n"}),
    Case("csv-text-length", ["analyze", "t.csv"], INPUT, ("t.csv", "prompt_len"),
         {"t.csv": b"request_id,arrival_s,prompt_len,output_len\nr0,0,3,1\nr1,1,many,1\n"}),
    Case("csv-negative-length", ["analyze", "t.csv"], INPUT, ("t.csv", "output_len"),
         {"t.csv": b"request_id,arrival_s,prompt_len,output_len\nr0,0,3,1\nr1,1,3,-2\n"}),
    Case("csv-not-utf8", ["analyze", "t.csv"], INPUT, ("t.csv",),
         {"t.csv": b"request_id,arrival_s,prompt_len,output_len\nr\xff\xfe0,0,3,1\n"}),
    Case("unknown-extension", ["analyze", "t.xyz"], INPUT, ("t.xyz", "--input-format"),
         {"t.xyz": b"\x00\x01binary"}),
    Case("unknown-json-shape", ["analyze", "t.json"], INPUT, ("t.json",),
         {"t.json": b'{"hello": "world"}'}),
    Case("corrupt-gzip", ["analyze", "t.jsonl.gz"], INPUT, ("t.jsonl.gz", "gzip"),
         {"t.jsonl.gz": lambda _: gzip.compress(jsonl(*good_rows()))[:-12] + b"\x00" * 12}),
    Case("gzip-of-garbage", ["analyze", "t.jsonl.gz"], INPUT, ("t.jsonl.gz",),
         {"t.jsonl.gz": lambda _: gzip.compress(b"\x00\xff" * 50)}),
    Case("mooncake-hash-ids-not-a-list", ["analyze", "m.jsonl"], INPUT, ("m.jsonl",
                                                                         "hash_ids"),
         {"m.jsonl": b'{"timestamp": 0, "input_length": 600, "output_length": 5, '
                     b'"hash_ids": [0, 1]}\n{"timestamp": 1, "input_length": 600, '
                     b'"output_length": 5, "hash_ids": "zero"}\n'}),
    Case("mooncake-negative-length", ["analyze", "m.jsonl"], INPUT, ("m.jsonl",
                                                                     "input_length"),
         {"m.jsonl": b'{"timestamp": 0, "input_length": -600, "output_length": 5, '
                     b'"hash_ids": [0, 1]}\n'}),
    Case("azure-bad-timestamp", ["analyze", "azure_bad_timestamp.csv"], INPUT,
         ("azure_bad_timestamp.csv", "TIMESTAMP"),
         {"azure_bad_timestamp.csv": FIXTURES / "azure_bad_timestamp.csv"}),
    Case("burstgpt-bad-tokens", ["analyze", "burstgpt_bad_tokens.csv"], INPUT,
         ("burstgpt_bad_tokens.csv",), {"burstgpt_bad_tokens.csv": FIXTURES /
                                        "burstgpt_bad_tokens.csv"}),
    Case("bailian-bad-hash-ids", ["analyze", "bailian_bad_hash_ids.jsonl"], INPUT,
         ("bailian_bad_hash_ids.jsonl", "hash_ids"),
         {"bailian_bad_hash_ids.jsonl": FIXTURES / "bailian_bad_hash_ids.jsonl"}),
    Case("otel-bad-start", ["analyze", "otel_bad_start.json"], INPUT, ("otel_bad_start.json",),
         {"otel_bad_start.json": FIXTURES / "otel_bad_start.json"}),
    # A trace of lengths only (Azure's, BurstGPT's) has nothing to replay: the file lacks the
    # column, as a summary does.
    Case("replay-without-content", ["replay", "t.jsonl"], INPUT, ("t.jsonl", "prompt_tokens"),
         {"t.jsonl": jsonl(_row(0), _row(1))}),
    Case("vllm-bench-summary-replayed", ["replay", "vllm_bench_no_detail.json"], INPUT,
         ("vllm_bench_no_detail.json", "--save-detailed"),
         {"vllm_bench_no_detail.json": FIXTURES / "vllm_bench_no_detail.json"}),
    Case("aiperf-unknown-unit", ["analyze", "profile_export.jsonl"], INPUT,
         ("profile_export.jsonl", "line 1", "request_latency"),
         {"profile_export.jsonl": (FIXTURES / "aiperf" / "profile_export.jsonl").read_bytes()
          .replace(b'"unit": "ms"}, "output_token_count"',
                   b'"unit": "min"}, "output_token_count"')}),
    Case("guidellm-benchmarks-not-a-list", ["analyze", "benchmarks.json"], INPUT,
         ("benchmarks.json", "'benchmarks'"),
         {"benchmarks.json": b'{"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": 3}'}),
    Case("inference-perf-summary-replayed", ["replay", "stage_0_lifecycle_metrics.json"], INPUT,
         ("stage_0_lifecycle_metrics.json", "per_request_lifecycle_metrics.json"),
         {"stage_0_lifecycle_metrics.json": FIXTURES / "inference_perf" /
          "stage_0_lifecycle_metrics.json"}),
    Case("wrong-input-format", ["analyze", "t.jsonl", "--input-format", "azure"], INPUT,
         ("t.jsonl",), TRACE),
    Case("map-to-a-missing-column", ["analyze", "t.jsonl", "--map", "arrival_s=nope"], INPUT,
         ("t.jsonl", "nope"), TRACE),
    Case("parquet-text-lengths", ["analyze", "t.parquet"], INPUT, ("t.parquet", "prompt_len"),
         {"t.parquet": _parquet_table({"request_id": ["a", "b"], "arrival_s": [0.0, 1.0],
                                       "prompt_len": ["x", "y"], "output_len": [1, 1]})}),
    Case("parquet-uint64-beyond-int64", ["analyze", "t.parquet"], INPUT,
         ("t.parquet", "prompt_len"),
         {"t.parquet": _parquet_table({"request_id": ["a", "b"], "arrival_s": [0.0, 1.0],
                                       "prompt_len": __import__("pyarrow").array(
                                           [3, 2**64 - 1], __import__("pyarrow").uint64()),
                                       "output_len": [1, 1]})}),
    Case("folder-without-a-trace", ["analyze", "."], INPUT, (".",), {"notes.txt": b"hello"}),
    # -- telemetry ---------------------------------------------------------------------------
    Case("steps-missing-file", ["diagnose", "t.parquet", "--steps", "nope.parquet"], INPUT,
         ("nope.parquet",), BURST),
    Case("steps-missing-column", ["diagnose", "t.parquet", "--steps", "s.parquet"], INPUT,
         ("s.parquet", "start_s"), {**BURST, "s.parquet": _steps_without("start_s")}),
    Case("steps-truncated", ["diagnose", "t.parquet", "--steps", "s.parquet"], INPUT,
         ("s.parquet",), {**BURST, "s.parquet": lambda _: (
             SAMPLES / "diag-burst.steps.parquet").read_bytes()[:5000]}),
    Case("steps-from-another-run", ["diagnose", "t.parquet", "--steps", "s.parquet"], INPUT,
         ("s.parquet", "t.parquet"), {**BURST, "s.parquet": _shifted_steps}),
    Case("metrics-of-another-simulated-run", ["diagnose", "t.parquet", "--metrics", "m.csv"],
         INPUT, ("m.csv", "t.parquet", "yaotu:run_info", "different runs"),
         {"t.parquet": SAMPLES / "diag-kv-churn.parquet", "m.csv": _burst_metrics}),
    Case("steps-of-another-simulated-run", ["diagnose", "t.parquet", "--steps", "s.parquet"],
         INPUT, ("s.parquet", "t.parquet", "yaotu.run_id", "different runs"),
         {"t.parquet": SAMPLES / "diag-kv-churn.parquet",
          "s.parquet": SAMPLES / "diag-burst.steps.parquet"}),
    Case("metrics-error-response", ["diagnose", "t.parquet", "--metrics", "prom_error.json"],
         INPUT, ("prom_error.json",), {**BURST, "prom_error.json": FIXTURES / "prom_error.json"}),
    Case("metrics-bad-csv-header", ["diagnose", "t.parquet", "--metrics",
                                    "prom_bad_header.csv"], INPUT, ("prom_bad_header.csv",),
         {**BURST, "prom_bad_header.csv": FIXTURES / "prom_bad_header.csv"}),
    Case("metrics-bad-value", ["diagnose", "t.parquet", "--metrics", "prom_bad_value.json"],
         INPUT, ("prom_bad_value.json",),
         {**BURST, "prom_bad_value.json": FIXTURES / "prom_bad_value.json"}),
    # -- check, scenario and baseline files --------------------------------------------------
    Case("check-invalid-toml", ["check", "t.jsonl", "--config", "c.toml"], INPUT,
         ("c.toml", "TOML"), {**TRACE, "c.toml": b"[[check]\n"}),
    Case("check-unknown-key", ["check", "t.jsonl", "--config", "c.toml"], INPUT,
         ("c.toml", "unknown key"), {**TRACE, "c.toml": b"treshold = 1\n"}),
    Case("check-unknown-metric", ["check", "t.jsonl", "--config", "c.toml"], INPUT,
         ("hit_rato", "prefix_reuse.hit_ratio"),
         {**TRACE, "c.toml": b'[[check]]\npath = "prefix_reuse.hit_rato"\nop = ">="\n'
                             b"value = 0.4\n"}),
    Case("check-text-value", ["check", "t.jsonl", "--config", "c.toml"], INPUT,
         ("c.toml", "check #1"), {**TRACE, "c.toml": b'[[check]]\npath = "prefix_reuse.'
                                                     b'hit_ratio"\nop = ">="\nvalue = "high"\n'}),
    Case("baseline-not-json", ["check", "t.jsonl", "--baseline", "b.json"], INPUT,
         ("b.json", "trace diagnose --format json"), {**TRACE, "b.json": b"{not json"}),
    Case("baseline-not-a-report", ["check", "t.jsonl", "--baseline", "b.json"], INPUT,
         ("b.json", "schema_version"), {**TRACE, "b.json": b"[1, 2]"}),
    Case("baseline-unknown-version", ["check", "t.jsonl", "--baseline", "b.json"], INPUT,
         ("b.json", "schema_version 999"),
         {**TRACE, "b.json": b'{"schema_version": 999, "command": "diagnose"}'}),
    Case("scenario-invalid-toml", ["simulate", "t.jsonl", "--scenario", "s.toml", "--out",
                                   "o.parquet"], INPUT, ("s.toml", "TOML"),
         {**TRACE, "s.toml": b"model = \n"}),
    Case("scenario-unknown-option", ["simulate", "t.jsonl", "--scenario", "s.toml", "--out",
                                     "o.parquet"], INPUT, ("s.toml", "kv-blokcs"),
         {**TRACE, "s.toml": b'model = "Llama-3.1-8B"\ngpu = "H100"\nkv-blokcs = 10\n'}),
    Case("scenario-text-number", ["simulate", "t.jsonl", "--scenario", "s.toml", "--out",
                                  "o.parquet"], INPUT, ("s.toml", "kv-blocks"),
         {**TRACE, "s.toml": b'model = "Llama-3.1-8B"\ngpu = "H100"\nkv-blocks = "lots"\n'}),
    Case("scenario-missing", ["compare", "t.jsonl", *MODEL, "--scenario", "a.toml",
                              "--scenario", "b.toml"], INPUT, ("a.toml",), TRACE),
    # -- option values: usage errors ---------------------------------------------------------
    Case("replay-unknown-preset", ["replay", "t.jsonl", "--preset", "nonsense"], USAGE,
         ("--preset", "nonsense"), TRACE),
    Case("sweep-unknown-preset", ["sweep", "t.jsonl", "--preset", "nonsense"], USAGE,
         ("nonsense", "vllm"), TRACE),
    Case("diagnose-unknown-preset", ["diagnose", "t.jsonl", "--preset", "nonsense"], USAGE,
         ("nonsense", "vllm"), TRACE),
    Case("capacity-absurd", ["replay", "t.jsonl", "--capacity", "1e30"], USAGE,
         ("capacity", "1e30"), TRACE),
    Case("capacity-negative", ["replay", "t.jsonl", "--capacity", "-5"], USAGE,
         ("capacity", "-5"), TRACE),
    Case("capacity-not-a-size", ["replay", "t.jsonl", "--capacity", "lots"], USAGE,
         ("capacity", "lots"), TRACE),
    Case("kv-capacity-absurd", ["diagnose", "t.jsonl", "--kv-capacity", "1e30"], USAGE,
         ("capacity", "1e30"), TRACE),
    Case("block-size-zero", ["replay", "t.jsonl", "--block-size", "0"], USAGE,
         ("--block-size",), TRACE),
    Case("tier-smaller-than-a-chunk", ["replay", "t.jsonl", "--tier", "cpu=8tok"], USAGE,
         ("cpu=8tok", "16-token chunk"), TRACE),
    Case("tier-bytes-without-model", ["replay", "t.jsonl", "--tier", "cpu=64GiB"], USAGE,
         ("cpu=64GiB", "--model"), TRACE),
    Case("tier-first-unlimited", ["replay", "t.jsonl", "--tier", "cpu=unlimited"], USAGE,
         ("cpu=unlimited", "needs a size"), TRACE),
    Case("tier-lookup-never-settles", ["replay", "t.parquet", "--preset", "vllm", "--capacity",
                                       "39", "--tier", "cpu=19blocks", "--tier",
                                       "disk=unlimited"], USAGE,
         ("request sessions-0029", "at least its 31 chunks"),
         {"t.parquet": FIXTURES / "tiers_vllm" / "sessions_first40.parquet"}),
    Case("tier-lookup-never-settles-arc", ["replay", "t.parquet", "--preset", "vllm",
                                           "--block-size", "4", "--capacity", "30",
                                           "--tier-policy", "vllm-native-arc", "--tier",
                                           "cpu=30blocks", "--tier", "disk=unlimited"], USAGE,
         ("request f4-0008", "could hold them all", "try another size"),
         {"t.parquet": FIXTURES / "tiers_vllm" / "arc_first9.parquet"}),
    Case("tier-policy-not-the-engines", ["replay", "t.jsonl", "--preset", "sglang", "--tier",
                                         "cpu=1000", "--tier-policy", "lmcache"], USAGE,
         ("lmcache", "sglang"), TRACE),
    Case("tier-chunk-not-sglangs-page", ["replay", "t.jsonl", "--preset", "sglang", "--capacity",
                                         "1000", "--tier", "cpu=1000", "--tier-chunk", "32"],
         USAGE, ("--tier-chunk 32", "--block-size"), TRACE),
    Case("tier-metrics-of-another-engine", ["replay", "t.parquet", "--capacity", "66", "--tier",
                                            "cpu=176blocks", "--metrics", "m.txt"], USAGE,
         ("m.txt", "sglang:cached_tokens_total", "--tier-policy write_through"),
         {"t.parquet": FIXTURES / "engines" / "trace_mixed.parquet",
          "m.txt": FIXTURES / "tier_metrics" / "sglang_hicache_mixed.metrics.txt"}),
    Case("sweep-price-not-a-number", ["sweep", "t.jsonl", "--model", "Llama-3.1-8B", "--gpu",
                                      "H100", "--gpu-price", "two"], USAGE,
         ("--gpu-price", "two"), TRACE),
    Case("sweep-price-absurd", ["sweep", "t.jsonl", "--model", "Llama-3.1-8B", "--gpu", "H100",
                                "--gpu-price", "1e300"], USAGE, ("--gpu-price", "1e300"), TRACE),
    Case("analyze-price-without-tier", ["analyze", "t.jsonl", "--gpu", "H100", "--gpu-price",
                                        "2.5"], USAGE, ("--tier",), TRACE),
    Case("mfu-zero", ["simulate", "t.jsonl", *MODEL, "--mfu", "0", "--out", "o.parquet"], USAGE,
         ("--mfu",), TRACE),
    Case("mbu-zero", ["simulate", "t.jsonl", *MODEL, "--mbu", "0", "--out", "o.parquet"], USAGE,
         ("--mbu",), TRACE),
    Case("unknown-model", ["simulate", "t.jsonl", "--model", "no-such-model", "--gpu", "H100",
                           "--out", "o.parquet"], USAGE, ("no-such-model", "trace models"),
         TRACE),
    Case("unknown-gpu", ["simulate", "t.jsonl", "--model", "Llama-3.1-8B", "--gpu", "Z9000",
                         "--out", "o.parquet"], USAGE, ("Z9000",), TRACE),
    Case("unknown-threshold", ["diagnose", "t.jsonl", "--threshold", "nope=1"], USAGE,
         ("nope", "window_s"), TRACE),
    Case("threshold-not-a-number", ["diagnose", "t.jsonl", "--threshold", "window_s=abc"],
         USAGE, ("window_s", "abc"), TRACE),
    Case("unknown-format", ["analyze", "t.jsonl", "--format", "pdf"], USAGE, ("--format",),
         TRACE),
    Case("grid-bad-block-size", ["replay", "t.jsonl", "--grid", "block-size=0"], USAGE,
         ("--grid", "block-size"), TRACE),
    Case("grid-with-out", ["replay", "t.jsonl", "--grid", "block-size=16", "--out",
                           "h.parquet"], USAGE, ("--out", "--grid"), TRACE),
    Case("replay-out-extension", ["replay", "t.jsonl", "--out", "h.txt"], USAGE,
         ("--out", ".parquet"), TRACE),
    Case("convert-out-extension", ["convert", "t.jsonl", "--out", "x.txt"], USAGE,
         ("x.txt", ".parquet"), TRACE),
    Case("report-as-parquet", ["analyze", "t.jsonl", "-o", "r.parquet"], USAGE,
         ("r.parquet", ".json"), TRACE),
    Case("steps-out-needs-diag", ["generate", "chat", "--out", "c.jsonl", "--steps-out",
                                  "s.parquet"], USAGE, ("--steps-out", "diag-"), {}),
    Case("generate-requests-absurd", ["generate", "chat", "-n", "1000000000000", "--out",
                                      "c.jsonl"], USAGE, ("--requests 1000000000000",), {}),
    Case("generate-requests-beyond-int64", ["generate", "chat", "-n", str(2**70), "--out",
                                            "c.jsonl"], USAGE, ("--requests", "64-bit"), {}),
    Case("unknown-command", ["analyse", "t.jsonl"], USAGE, ("analyse",), TRACE),
    Case("unknown-option", ["analyze", "t.jsonl", "--colour"], USAGE, ("--colour",), TRACE),
    # -- outputs -----------------------------------------------------------------------------
    Case("output-in-proc", ["analyze", "t.jsonl", "-o", "/proc/version"], INPUT,
         ("/proc/version", "pick another path"), TRACE),
    Case("output-folder-missing", ["analyze", "t.jsonl", "-o", "no/such/r.json"], INPUT,
         ("no/such/r.json", "does not exist"), TRACE),
    Case("output-is-the-trace", ["analyze", "t.jsonl", "-o", "t.jsonl"], INPUT,
         ("t.jsonl", "is the input TRACE"), TRACE),
    Case("steps-out-is-the-trace", ["simulate", "t.jsonl", *MODEL, "--out", "o.parquet",
                                    "--steps-out", "t.jsonl"], INPUT,
         ("--steps-out t.jsonl", "is the input"), TRACE),
]


def _make(folder: Path, files: dict[str, FileMaker]) -> None:
    for name, maker in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(maker, Path):
            path.write_bytes(maker.read_bytes())
        elif isinstance(maker, bytes):
            path.write_bytes(maker)
        else:
            path.write_bytes(maker(folder))


def test_the_matrix_is_wide() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.args[0] for c in CASES} >= {"analyze", "replay", "sweep", "diagnose", "check",
                                          "simulate", "compare", "convert", "generate"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    from yaotu_trace.cli import main

    _make(tmp_path, case.files)
    monkeypatch.chdir(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code = main(case.args)
    out, err = capsys.readouterr()
    assert code == case.code, f"exit {code}, stderr: {err}"
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for needle in case.says:
        assert needle in err, f"{needle!r} not in {err!r}"
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before, "a refused command left or changed a file"


def matrix_markdown() -> str:
    """The matrix as the table in docs/errors.md: case, command line, exit code, what it names."""
    lines = ["| case | command | exit | the line names |", "|---|---|---:|---|"]
    for case in CASES:
        args = " ".join(a if " " not in a else repr(a) for a in case.args)
        says = ", ".join(f"`{s}`" for s in case.says)
        lines.append(f"| {case.id} | `trace {args}` | {int(case.code)} | {says} |")
    return "\n".join(lines) + "\n"


def test_the_docs_list_the_matrix() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    assert matrix_markdown() in docs, "regenerate the table in docs/errors.md: " \
        "python -c 'import sys; sys.path[:0] = [\"tests\"]; import test_bad_input_matrix as m; " \
        "print(m.matrix_markdown())'"
