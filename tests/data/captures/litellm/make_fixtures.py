"""Write `spend_logs.jsonl`: LiteLLM proxy spend-log rows of the workload's first 24 requests
(`../workload.py`).

Run with LiteLLM installed (1.110.2 here, with the proxy's imports: fastapi, apscheduler, …):

    python tests/data/captures/litellm/make_fixtures.py

Each row is what the proxy inserts into `LiteLLM_SpendLogs`: LiteLLM's own
`get_logging_payload(kwargs, response_obj, start_time, end_time)`
(`litellm/proxy/spend_tracking/spend_tracking_utils.py`) on the kwargs of a finished
`acompletion` call (the key's team and user in the metadata, the completion start time) and
its `ModelResponse` (usage with `prompt_tokens_details.cached_tokens` from the workload's
engine), serialized as the `/spend/logs` API returns rows. LiteLLM 1.110.2 predates the
`prefix_block_hashes` callback (1.111), so its ids are added to each row's `metadata` as that
callback is documented: chained HMAC-SHA256 digests of 16-token blocks, 16 hex characters per
id, the final partial block included, with `prefix_block_size` beside them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import workload  # noqa: E402

BLOCK = 16
ROWS = 24  # the first requests only: a spend-log row is verbose
SECRET = b"fixture-secret"


def prefix_block_hashes(tokens: tuple[int, ...]) -> list[str]:
    out, parent = [], b""
    for i in range(0, len(tokens), BLOCK):
        block = tokens[i:i + BLOCK]
        digest = hmac.new(SECRET, parent + struct.pack(f"<{len(block)}I", *block),
                          hashlib.sha256).hexdigest()[:16]
        out.append(digest)
        parent = digest.encode()
    return out


def main() -> None:
    import litellm
    from litellm.proxy.spend_tracking.spend_tracking_utils import get_logging_payload

    engine = workload.Engine(block_tokens=BLOCK)
    reqs = workload.requests()[:ROWS]
    with (HERE / "spend_logs.jsonl").open("w", encoding="utf-8") as fh:
        for r in reqs:
            start = datetime.fromtimestamp(workload.START_UNIX_S + r.arrival_s, UTC)
            cached = engine.serve(r)
            response = litellm.ModelResponse(
                id=f"chatcmpl-{r.request_id}", model="hosted_vllm/Qwen/Qwen3-8B",
                choices=[{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "<text>"}}],
                usage=litellm.Usage(prompt_tokens=len(r.prompt),
                                    completion_tokens=len(r.output),
                                    total_tokens=len(r.prompt) + len(r.output),
                                    prompt_tokens_details={"cached_tokens": cached}))
            kwargs = {
                "model": "Qwen/Qwen3-8B", "custom_llm_provider": "hosted_vllm",
                "call_type": "acompletion", "litellm_call_id": f"call-{r.request_id}",
                "completion_start_time": start + timedelta(seconds=r.ttft_s),
                "response_cost": 0.0,
                "litellm_params": {"metadata": {
                    "user_api_key": "sk-" + hashlib.sha256(r.tenant.encode()).hexdigest()[:20],
                    "user_api_key_team_id": r.tenant,
                    "user_api_key_user_id": f"user-{r.session}",
                    "model_group": "qwen3-8b"}},
            }
            row = dict(get_logging_payload(kwargs, response, start,
                                           start + timedelta(seconds=r.e2e_s)))
            meta = json.loads(row["metadata"])
            meta["prefix_block_hashes"] = prefix_block_hashes(r.prompt)
            meta["prefix_block_size"] = BLOCK
            row["metadata"] = meta
            fh.write(json.dumps(row, default=str) + "\n")
    sys.stdout.write(f"{workload.totals(reqs)}\n")


if __name__ == "__main__":
    main()
