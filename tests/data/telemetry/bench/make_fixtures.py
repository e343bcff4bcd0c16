#!/usr/bin/env python3
"""Regenerate the real AIPerf and guidellm output files in this folder.

Not a test: it runs two third-party benchmark tools against a mock server on 127.0.0.1 and
copies what they wrote into aiperf/ and guidellm/ beside this file (see README.md for the
numbers each file should give).

Tools, each in its own venv (never the project's .venv):

    python3.11 -m venv /tmp/venv-aiperf   && /tmp/venv-aiperf/bin/pip install aiperf==0.13.0
    python3.11 -m venv /tmp/venv-guidellm && /tmp/venv-guidellm/bin/pip install torch==2.13.0 \
        && /tmp/venv-guidellm/bin/pip install guidellm==0.8.1
    # (torch first: guidellm would otherwise pull a CUDA build of torch)

Then, from anywhere:

    python3 tests/data/telemetry/bench/make_fixtures.py            # both tools
    python3 tests/data/telemetry/bench/make_fixtures.py aiperf     # one of them
    python3 tests/data/telemetry/bench/make_fixtures.py --summary  # only print the numbers

What it does, with the standard library only:

1. Writes a byte-level tokenizer (256 byte tokens, no merges: one token per UTF-8 byte) as a
   local Hugging Face tokenizer folder, so that neither tool downloads one from a hub. The
   mock server counts tokens the same way (bytes), so client- and server-side counts agree.
2. Starts an OpenAI-compatible mock (`/v1/chat/completions`, `/v1/completions`,
   `/v1/models`, `/health`) on 127.0.0.1 at a free port. It streams one one-byte token per
   SSE chunk: first token after TTFT_MS (+ up to TTFT_JITTER_MS, seeded), then one per
   ITL_MS, `max_completion_tokens`/`max_tokens` tokens in all. Every FAIL_EVERY-th
   generation request it receives gets an HTTP 500 instead, so each run holds failures too.
3. Runs each tool for N_REQUESTS requests at CONCURRENCY (the exact commands are printed and
   listed in README.md) and copies the files named in COPY.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
AIPERF = Path("/tmp/venv-aiperf/bin/aiperf")
GUIDELLM = Path("/tmp/venv-guidellm/bin/guidellm")

MODEL = "mock-model"
N_REQUESTS = 20
CONCURRENCY = 4
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 32
SEED = 42

TTFT_MS = 30.0
TTFT_JITTER_MS = 20.0
ITL_MS = 4.0
FAIL_EVERY = 10  # the 10th, 20th, ... generation request the mock receives gets HTTP 500

# What each tool wrote (relative to its output folder) -> the name kept here.
COPY = {
    "aiperf": ["profile_export.jsonl", "profile_export_aiperf.csv", "profile_export_aiperf.json"],
    "guidellm": ["benchmarks.json", "benchmarks.csv"],
}

OUTPUT_TEXT = "the quick brown fox jumps over the lazy dog "


# --- 1. a tokenizer that needs no download -------------------------------------------------

def write_byte_tokenizer(folder: Path) -> Path:
    """A Hugging Face fast tokenizer with one token per byte, written as tokenizer.json."""
    folder.mkdir(parents=True, exist_ok=True)
    # GPT-2's byte-to-unicode table: the alphabet of a byte-level BPE.
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    alphabet = sorted(zip(printable, chars, strict=True))
    vocab = {chr(c): i for i, (_, c) in enumerate(alphabet)}
    eos = "<|endoftext|>"
    vocab[eos] = len(vocab)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[eos], "content": eos, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": False},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
        "eos_token": eos, "bos_token": eos, "unk_token": eos, "add_bos_token": False,
        "add_eos_token": False, "clean_up_tokenization_spaces": False,
    }))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": eos, "bos_token": eos, "unk_token": eos}))
    return folder


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


def count_tokens(text: str) -> int:
    return len(text.encode("utf-8"))


# --- 2. the mock server ---------------------------------------------------------------------

class MockState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generations = 0
        self.failed = 0
        self.rng = random.Random(SEED)

    def next_request(self) -> tuple[int, float]:
        with self.lock:
            self.generations += 1
            return self.generations, self.rng.uniform(0.0, TTFT_JITTER_MS)


class MockHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else small SSE chunks wait on delayed ACKs (~40 ms)
    state: MockState  # set on the subclass made by start_mock

    def log_message(self, format: str, *args: object) -> None:
        pass

    def handle(self) -> None:
        # a client closing its kept-alive connection at the end of a run
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            super().handle()

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/health", "/v1/health", "/ping"):
            self._json(200, {"status": "ok"})
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "mock"}]})
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if path == "/v1/chat/completions":
            prompt = "".join(_content_text(m.get("content")) for m in body.get("messages", []))
            chat = True
        elif path == "/v1/completions":
            prompt = body.get("prompt") or ""
            prompt = prompt if isinstance(prompt, str) else "".join(map(str, prompt))
            chat = False
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        number, jitter = self.state.next_request()
        if number % FAIL_EVERY == 0:
            with self.state.lock:
                self.state.failed += 1
            time.sleep(TTFT_MS / 1000)
            self._json(500, {"error": {"message": "mock: injected failure",
                                       "type": "server_error", "code": 500}})
            return
        n_out = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        text = (OUTPUT_TEXT * (n_out // len(OUTPUT_TEXT) + 1))[:n_out]
        usage = {"prompt_tokens": count_tokens(prompt), "completion_tokens": n_out,
                 "total_tokens": count_tokens(prompt) + n_out}
        rid = f"mock-{number}"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        time.sleep((TTFT_MS + jitter) / 1000)
        if not body.get("stream"):
            time.sleep(ITL_MS * max(n_out - 1, 0) / 1000)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "length"} if chat else
                      {"index": 0, "text": text, "finish_reason": "length"})
            self._json(200, {"id": rid, "object": obj, "created": created, "model": MODEL,
                             "choices": [choice], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for i, char in enumerate(text):
            if i:
                time.sleep(ITL_MS / 1000)
            last = i == n_out - 1
            finish = "length" if last else None
            choice = ({"index": 0, "delta": ({"role": "assistant", "content": char} if i == 0
                                             else {"content": char}),
                       "finish_reason": finish} if chat else
                      {"index": 0, "text": char, "finish_reason": finish})
            self._event({"id": rid, "object": obj + ".chunk" if chat else obj,
                         "created": created, "model": MODEL, "choices": [choice]})
        if include_usage:
            self._event({"id": rid, "object": obj + ".chunk" if chat else obj,
                         "created": created, "model": MODEL, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _event(self, payload: object) -> None:
        self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def start_mock() -> tuple[ThreadingHTTPServer, MockState]:
    state = MockState()
    handler = type("Handler", (MockHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", _free_port()), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- 3. the tools ---------------------------------------------------------------------------

def aiperf_command(url: str, tokenizer: Path, out: Path) -> list[str]:
    return [
        str(AIPERF), "profile",
        "--model-names", MODEL, "--tokenizer", str(tokenizer),
        "--url", url, "--endpoint-type", "chat", "--streaming",
        "--request-count", str(N_REQUESTS), "--concurrency", str(CONCURRENCY),
        "--prompt-input-tokens-mean", str(PROMPT_TOKENS), "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", str(OUTPUT_TOKENS),
        "--prompt-output-tokens-stddev", "0",
        "--random-seed", str(SEED),
        "--no-server-metrics", "--no-gpu-telemetry", "--ui-type", "none",
        "--artifact-dir", str(out),
    ]


def guidellm_command(url: str, tokenizer: Path, out: Path) -> list[str]:
    return [
        str(GUIDELLM), "run",
        "--backend", f"kind=openai_http,target={url},model={MODEL}",
        "--profile", f"kind=concurrent,streams={CONCURRENCY}",
        "--constraint", f"kind=max_requests,count={N_REQUESTS}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},"
                  f"output_tokens={OUTPUT_TOKENS}",
        "--seed", f"kind=static,value={SEED}",
        "--output", f"kind=json,path={out / 'benchmarks.json'}",
        "--output", f"kind=csv,path={out / 'benchmarks.csv'}",
        "--output", "kind=console",
        "--disable-console-interactive",
    ]


COMMANDS = {"aiperf": aiperf_command, "guidellm": guidellm_command}

# The tokenizer is a local folder either way. AIPerf 0.13 under HF_HUB_OFFLINE=1 looks a local
# folder up in the hub cache (snapshot_download) and fails, so it runs without it; it treats
# an absolute path as local and makes no hub call for it.
OFFLINE_ENV = {
    "aiperf": {},
    "guidellm": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
}


def run(tool: str, work: Path, tokenizer: Path) -> None:
    server, state = start_mock()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    out = work / f"{tool}-out"
    command = COMMANDS[tool](url, tokenizer, out)
    say("$", " ".join(command))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TERM": "dumb", "TMPDIR": str(work)}
    env.update(OFFLINE_ENV[tool])
    log = work / f"{tool}.log"
    with log.open("w") as fh:
        result = subprocess.run(command, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                timeout=600, check=False)
    server.shutdown()
    say(f"{tool}: exit {result.returncode}; mock saw {state.generations} generation "
          f"requests, failed {state.failed}; log {log}")
    if result.returncode != 0:
        say(log.read_text()[-4000:])
        raise SystemExit(f"{tool} failed")
    dest = HERE / tool
    dest.mkdir(exist_ok=True)
    for name in COPY[tool]:
        found = sorted(out.rglob(name))
        if not found:
            say(f"{tool}: {name} was not written; files: "
                  f"{sorted(str(p.relative_to(out)) for p in out.rglob('*') if p.is_file())}")
            continue
        shutil.copyfile(found[0], dest / name)
        say(f"  {dest / name} ({(dest / name).stat().st_size} bytes)")


# --- 4. what each tool's own summary says (the numbers README.md lists) ---------------------

def summary_aiperf() -> str:
    d = json.loads((HERE / "aiperf" / "profile_export_aiperf.json").read_text())
    ok, err = d["request_count"]["avg"], d["error_request_count"]["avg"]
    return (f"aiperf: {d['completed_request_count']['avg']:g} requests, {ok:g} ok, {err:g} "
            f"errors; ISL mean {d['input_sequence_length']['avg']:g} (total "
            f"{d['total_isl']['avg']:g}), OSL mean {d['output_sequence_length']['avg']:g} "
            f"(total {d['total_osl']['avg']:g}); TTFT mean "
            f"{d['time_to_first_token']['avg']:.4f} ms, p50 {d['time_to_first_token']['p50']:.4f}"
            f" ms; ITL mean {d['inter_token_latency']['avg']:.4f} ms; request latency mean "
            f"{d['request_latency']['avg']:.4f} ms")


def summary_guidellm() -> str:
    (bench,) = json.loads((HERE / "guidellm" / "benchmarks.json").read_text())["benchmarks"]
    m = bench["metrics"]
    totals = m["request_totals"]
    ttft = m["time_to_first_token_ms"]["successful"]
    return (f"guidellm: {totals['total']} requests, {totals['successful']} ok, "
            f"{totals['errored']} errored, {totals['incomplete']} incomplete; prompt tokens mean "
            f"{m['prompt_token_count']['successful']['mean']:g} (total "
            f"{m['prompt_token_count']['successful']['total_sum']:g}), output tokens mean "
            f"{m['output_token_count']['successful']['mean']:g} (total "
            f"{m['output_token_count']['successful']['total_sum']:g}); TTFT mean "
            f"{ttft['mean']:.4f} ms, median {ttft['median']:.4f} ms; ITL mean "
            f"{m['inter_token_latency_ms']['successful']['mean']:.4f} ms; request latency mean "
            f"{m['request_latency']['successful']['mean'] * 1000:.4f} ms")


SUMMARIES = {"aiperf": summary_aiperf, "guidellm": summary_guidellm}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--summary"]:  # only print what the kept files' summaries say
        for tool in argv[1:] or list(COMMANDS):
            say(SUMMARIES[tool]())
        return
    tools = argv or list(COMMANDS)
    work = Path(tempfile.mkdtemp(prefix="bench-fixtures-"))
    tokenizer = write_byte_tokenizer(work / "byte-tokenizer")
    for tool in tools:
        run(tool, work, tokenizer)
        say(SUMMARIES[tool]())
    say(f"work folder (logs, every file the tools wrote): {work}")


if __name__ == "__main__":
    main(sys.argv[1:])
