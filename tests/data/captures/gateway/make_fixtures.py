"""Write `gateway.jsonl`: an OpenAI-compatible gateway's log of the workload's first 24 requests
(`../workload.py`), request and response bodies as the gateway stores them.

Run with the `openai` client installed (3.60.0 here):

    python tests/data/captures/gateway/make_fixtures.py

Three parts on 127.0.0.1, all in this process: a mock OpenAI-compatible server that answers
`/v1/chat/completions` with the workload's lengths in `usage` (and the workload engine's hits
in `usage.prompt_tokens_details.cached_tokens`); a gateway that forwards each request to it and
appends `{"start_time", "end_time", "status_code", "request", "response"}` (ISO times, the
bodies as JSON) to the log; and the official `openai` client, which sends each conversation
turn to the gateway as chat messages (system prompt, earlier turns, new user message; each
token id written as a word, so texts share the prefixes the token ids share). The gateway's
clock is the workload's. One request is refused by the server (HTTP 429).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402

ROWS = 24
CLOCK = {"now": workload.START_UNIX_S}
BY_ID = {r.request_id: r for r in workload.requests()}
ENGINE = workload.Engine(block_tokens=16)
REFUSED = "conv6-turn1"


def words(ids: tuple[int, ...]) -> str:
    return " ".join(f"w{i}" for i in ids)


class Server(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        r = BY_ID[self.headers["x-request-id"]]
        if r.request_id == REFUSED:
            answer, code = {"error": {"message": "rate limited", "type": "rate_limit_error",
                                      "code": 429}}, 429
        else:
            cached = ENGINE.serve(r)
            answer, code = {
                "id": f"chatcmpl-{r.request_id}", "object": "chat.completion",
                "created": int(CLOCK["now"]), "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": words(r.output)}}],
                "usage": {"prompt_tokens": len(r.prompt), "completion_tokens": len(r.output),
                          "total_tokens": len(r.prompt) + len(r.output),
                          "prompt_tokens_details": {"cached_tokens": cached}},
            }, 200
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def gateway(upstream: str, log: list[str]) -> type[BaseHTTPRequestHandler]:
    class Gateway(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            start = CLOCK["now"]
            forward = urllib.request.Request(upstream + self.path, data=raw, method="POST",
                                             headers={"Content-Type": "application/json",
                                                      "x-request-id": self.headers["x-request-id"]})
            try:
                with urllib.request.urlopen(forward) as answer:
                    code, data = answer.status, answer.read()
            except urllib.error.HTTPError as err:
                code, data = err.code, err.read()
            r = BY_ID[self.headers["x-request-id"]]
            end = start + (r.e2e_s if code == 200 else 0.003)
            log.append(json.dumps({
                "start_time": datetime.fromtimestamp(start, UTC).isoformat(),
                "end_time": datetime.fromtimestamp(end, UTC).isoformat(),
                "status_code": code, "request": json.loads(raw), "response": json.loads(data)}))
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Gateway


def messages(r: workload.Request, history: dict[str, list[dict]]) -> list[dict]:
    turns = history.setdefault(r.session, [])
    if not turns:
        turns.append({"role": "system", "content": words(r.prompt)})
    else:
        said = sum(len(m["content"].split()) for m in turns)
        turns.append({"role": "user", "content": words(r.prompt[said:])})
    sent = list(turns)
    turns.append({"role": "assistant", "content": words(r.output)})
    return sent


def main() -> None:
    import openai

    log: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    proxy = ThreadingHTTPServer(("127.0.0.1", 0),
                                gateway(f"http://127.0.0.1:{server.server_port}", log))
    for s in (server, proxy):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{proxy.server_port}/v1", api_key="sk-x",
                           max_retries=0)
    history: dict[str, list[dict]] = {}
    reqs = workload.requests()[:ROWS]
    for r in reqs:
        CLOCK["now"] = workload.START_UNIX_S + r.arrival_s
        with contextlib.suppress(openai.RateLimitError):  # the one refused request
            client.chat.completions.create(model="Qwen/Qwen3-8B", messages=messages(r, history),
                                           user=r.tenant, max_tokens=len(r.output),
                                           extra_headers={"x-request-id": r.request_id})
    server.shutdown()
    proxy.shutdown()
    (HERE / "gateway.jsonl").write_text("".join(line + "\n" for line in log), encoding="utf-8")
    sys.stdout.write(f"{workload.totals(reqs)} openai {openai.__version__}\n")


if __name__ == "__main__":
    main()
