"""SGLang's own `/metrics` for hits split by tier: `sglang:cached_tokens_total{cache_source}`.

Feeds SGLang 0.5.23's `TokenizerMetricsCollector.observe_one_finished_request`
(`sglang/srt/observability/metrics_collector.py`) one finished request at a time with the
`cached_tokens_details` its scheduler's `OutputStreamer.get_cached_tokens_details` builds
(`{"device": D, "host": H, "storage": S}`, storage present when an L3 backend is on), and
scrapes the registry with prometheus_client's `generate_latest`: the counters the tokenizer
manager exports, `sglang:prompt_tokens_total` and `sglang:cached_tokens_total{cache_source=
device|host|storage}` among them.

The per-request splits fed are not SGLang's cache: they are the requests file `--requests`
(columns request_id, prompt_tokens, gpu_hit_tokens, cpu_hit_tokens, disk_hit_tokens), by default
`tests/fixtures/tier_metrics/sglang_hicache_mixed.requests.csv`, written from yaotu-trace's
tiered replay under SGLang's HiCache rules:

    trace replay tests/fixtures/engines/trace_mixed.parquet --preset sglang --capacity 1200 \\
        --tier cpu=2400tokens --tier disk=20000tokens --no-waterfall --out split.csv

This fixture checks how the series are read (what goes in comes out by tier), not the replay.
Run in an environment with SGLang 0.5.23:

    cd / && /tmp/venv-sglang/bin/python /work/…/benchmarks/engines/tier_metrics_sglang.py \
        [--requests split.csv]

(from a folder without Python files of its own names: SGLang imports `inspect` and friends).

Deterministic but for the `_created` timestamps, which it leaves out.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tier_metrics"
REQUESTS = OUT / "sglang_hicache_mixed.requests.csv"
COLUMNS = ("request_id", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "disk_hit_tokens")


def _publish() -> None:
    """The process-wide config the collector reads its buckets from, as the tokenizer manager's
    process publishes it (`runtime_context.publish`), for a one-layer model with no weights."""
    import json
    import tempfile

    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    folder = Path(tempfile.mkdtemp(prefix="tier-metrics-sglang-"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
        "num_hidden_layers": 1, "vocab_size": 32000, "max_position_embeddings": 4096}))
    publish(ServerArgs(model_path=str(folder), enable_metrics=True, skip_tokenizer_init=True,
                       device="cpu"), role="tokenizer")


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from golden_sglang import _stub_torchvision

    _stub_torchvision()  # a CPU torch has no torchvision; SGLang's configs import it
    import prometheus_client
    import sglang
    from sglang.srt.observability.metrics_collector import TokenizerMetricsCollector

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=Path, default=REQUESTS)
    args = parser.parse_args(argv)
    with args.requests.open() as fh:
        rows = [{k: row[k] for k in COLUMNS} for row in csv.DictReader(fh)]
    if args.requests != REQUESTS:
        with REQUESTS.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    _publish()
    labels = {"model_name": "tiers-mixed"}
    collector = TokenizerMetricsCollector(labels=labels)
    for row in rows:
        device, host, storage = (int(row[c]) for c in COLUMNS[2:])
        details = ({"device": device, "host": host, "storage": storage}
                   if device or host or storage else None)
        collector.observe_one_finished_request(
            labels, int(row["prompt_tokens"]), 1, device + host + storage, 0.0, False,
            details)
    scrape = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    scrape = "".join(line + "\n" for line in scrape.splitlines()
                     if not re.match(r"^\S+_created[{ ]", line))
    (OUT / "sglang_hicache_mixed.metrics.txt").write_text(scrape)
    print(f"sglang {sglang.__version__}: {len(rows)} requests")
    print("\n".join(line for line in scrape.splitlines()
                    if line.startswith(("sglang:cached_tokens_total", "sglang:prompt_tokens_t"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
