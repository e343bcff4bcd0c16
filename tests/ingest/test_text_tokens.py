"""`--tokenizer tokenizer.json` (`ingest/text_tokens.py`): a gateway log of text read as token
ids with the model's tokenizer, checked against the server's counts, never guessed.

The gateway log was written by the `openai` client 3.60.0 through a logging gateway to a mock
server (tests/fixtures/captures/gateway/make_fixtures.py), each workload token id N as the word
`wN`; its tokenizer (`tokenizer/`) was made and saved by the `tokenizers` library itself
(make_tokenizer.py). Tokenizers that disagree with the server are built here with the same
library."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from yaotu_trace.errors import ConfigError, ExitCode, TraceReadError, TraceSchemaError
from yaotu_trace.ingest.load import read_trace

tokenizers = pytest.importorskip("tokenizers")

CAPTURES = FIXTURES / "captures"
GATEWAY = CAPTURES / "gateway" / "gateway.jsonl"
TOKENIZER = CAPTURES / "gateway" / "tokenizer" / "tokenizer.json"
sys.path.insert(0, str(CAPTURES))
import workload  # noqa: E402

REFUSED = "conv6-turn1"  # the request the mock server refused with HTTP 429 (make_fixtures.py)


def test_the_gateway_log_reads_back_the_token_ids_the_server_counted() -> None:
    trace = read_trace(GATEWAY, tokenizer=TOKENIZER)
    assert trace.content_column == "prompt_tokens"
    fed = {r.request_id: r.prompt for r in workload.requests()[:24]}
    got = dict(zip(trace.requests["request_id"], trace.requests["prompt_tokens"], strict=True))
    assert len(got) == 24
    for request_id, prompt in fed.items():
        ids = got[f"chatcmpl-{request_id}"] if request_id != REFUSED else None
        if ids is not None:
            assert list(ids) == list(prompt)
    assert any("tokenized with" in note for note in trace.notes)


def test_the_tokenized_log_is_reconciled_and_agrees_with_the_engine(capsys) -> None:
    # The mock server's cached tokens come from a 16-token block cache salted per tenant, the
    # vllm preset's rules: the replay of the tokenized prompts hits exactly as much.
    code, out, _ = run_cli(["check", str(GATEWAY), "--tokenizer", str(TOKENIZER),
                            "--fail-on", "observed-shortfall", "--format", "json"], capsys)
    assert code == ExitCode.OK
    assert '"status": "passed"' in out and '"differing_requests": 0' in out


def test_without_the_tokenizer_the_log_has_no_prompt_content() -> None:
    trace = read_trace(GATEWAY)
    assert trace.content_column is None
    assert any("never guessed" in note for note in trace.notes)


def _split_tokenizer(folder: Path) -> Path:
    """A tokenizer that splits `w61` into `w` and `61`: twice the server's counts."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Sequence, Split, WhitespaceSplit

    vocab = {"w": 0, "[UNK]": 1} | {str(i): i + 2 for i in range(5000)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Sequence([WhitespaceSplit(), Split("w", behavior="isolated")])
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    shutil.copy(TOKENIZER.parent / "tokenizer_config.json", folder)
    return folder / "tokenizer.json"


def test_ids_that_do_not_number_the_servers_count_are_refused(tmp_path) -> None:
    with pytest.raises(TraceSchemaError) as err:
        read_trace(GATEWAY, tokenizer=_split_tokenizer(tmp_path / "split"))
    message = str(err.value)
    assert "\n" not in message
    assert "gateway.jsonl: line 1, field 'request.messages': " in message
    assert "gives 182 tokens and the server counted 91 (usage.prompt_tokens)" in message


def test_a_chat_log_without_the_chat_template_is_refused(tmp_path) -> None:
    alone = tmp_path / "tokenizer.json"
    shutil.copy(TOKENIZER, alone)
    with pytest.raises(TraceSchemaError, match="is a chat request, whose text the server "
                       "renders through the model's chat template, and no tokenizer_config"):
        read_trace(GATEWAY, tokenizer=alone)


def test_a_trace_of_token_ids_is_refused_with_a_tokenizer() -> None:
    with pytest.raises(ConfigError, match="carries token ids or lengths rather than text"):
        read_trace(CAPTURES / "sglang" / "metrics_agree", tokenizer=TOKENIZER)


def test_a_file_the_library_cannot_read_is_named(tmp_path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(TraceReadError, match=r"tokenizer.json: not a tokenizer the tokenizers "
                       r"library reads \(.*\); give the model's tokenizer.json"):
        read_trace(GATEWAY, tokenizer=bad)


def test_without_the_package_the_option_says_how_to_install_it(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers fails
    code, _, err = run_cli(["analyze", str(GATEWAY), "--tokenizer", str(TOKENIZER)], capsys)
    assert code == ExitCode.USAGE
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].endswith("needs the tokenizers package, an optional extra: pip install "
                              "'yaotu-trace[tokenizer]'")


def test_sweep_reads_the_log_through_the_tokenizer(capsys) -> None:
    # GIVEN the gateway log and its tokenizer WHEN swept THEN the curve's reachable reuse is
    # the mock server's own cached tokens (2,544 of 3,990 prompt tokens, 16-token blocks
    # salted per tenant), the capacity curve of the prompts the server saw
    code, out, _ = run_cli(["sweep", str(GATEWAY), "--tokenizer", str(TOKENIZER),
                            "--format", "json"], capsys)
    assert code == ExitCode.OK
    curve = json.loads(out)["capacity_curve"]
    served = read_trace(GATEWAY).requests
    assert curve["unlimited_hit_tokens"] == int(served["cached_tokens"].sum()) == 2_544
    assert curve["prompt_tokens"] == int(served["prompt_len"].sum())


def test_convert_writes_the_token_ids_the_other_commands_replay(tmp_path, capsys) -> None:
    # GIVEN the gateway log converted with its tokenizer WHEN the canonical table is replayed
    # (no tokenizer needed any more) THEN it hits what the mock server cached
    out = tmp_path / "gateway.parquet"
    code, _, err = run_cli(["convert", str(GATEWAY), "--tokenizer", str(TOKENIZER),
                            "--out", str(out)], capsys)
    assert code == ExitCode.OK, err
    assert read_trace(out).content_column == "prompt_tokens"
    code, doc, _ = run_cli(["replay", str(out), "--format", "json"], capsys)
    reuse = json.loads(doc)["prefix_reuse"]
    assert reuse["saved_prefill_tokens"] == int(read_trace(GATEWAY).requests["cached_tokens"]
                                                .sum()) == 2_544
    # AND an --out that names the tokenizer is refused: inputs are never overwritten
    code, _, err = run_cli(["convert", str(GATEWAY), "--tokenizer", str(TOKENIZER),
                            "--out", str(TOKENIZER)], capsys)
    assert code == ExitCode.INPUT and "never overwritten" in err
