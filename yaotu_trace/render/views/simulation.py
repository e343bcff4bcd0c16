"""`trace simulate`: the simulated deployment, its outcome, latency, work ledger and fit."""

from __future__ import annotations

from typing import Any

from yaotu_trace.data.report import to_builtins
from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Grid, Heading, KeyValues, Notes, View


def as_dict(section: Any) -> dict[str, Any]:
    """The section as builtins (dataclass or already a dict)."""
    data: dict[str, Any] = to_builtins(section)
    return data


def config_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The simulated deployment."""
    pool_tokens = (s["kv_blocks_per_instance"] - 1) * s["block_size_tokens"]
    return [
        ("scenario", s["scenario"]),
        ("model on GPU", f"{s['model']} on {s['gpu']}"),
        ("scheduler", s["scheduler"]),
        ("instances", s["instances"] + (f", route {s['route']}" if s["instances"] != "1" else "")),
        ("KV pool per instance", f"{fmt.count(s['kv_blocks_per_instance'])} blocks of "
         f"{s['block_size_tokens']} ({fmt.tokens(pool_tokens)}, "
         f"{fmt.bytes_(pool_tokens * s['kv_bytes_per_token'])})"),
        ("step budget / sequences", f"{fmt.count(s['max_batched_tokens'])} tokens / "
         f"{fmt.count(s['max_num_seqs'])}"),
        ("chunked prefill", "on" if s["chunked_prefill"] else "off"),
        ("prefix caching", "on" if s["prefix_caching"] else "off"),
        ("step time", s["step_model"]),
    ]


def outcome_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Throughput, preemptions, hits, KV usage."""
    failed = s.get("failed") or 0
    return [
        ("finished / rejected", f"{fmt.count(s['finished'])} / {fmt.count(s['rejected'])}"),
        *([("failed mid-stream (injected)", f"{fmt.count(failed)} (in finished)")]
          if failed else []),
        ("makespan", fmt.seconds(s["makespan_s"])),
        ("throughput", f"{fmt.num(s['throughput_rps'])} req/s, "
         f"{fmt.num(s['output_tokens_per_s'])} output tok/s"),
        ("preemptions", f"{fmt.count(s['preemptions'])} "
         f"({fmt.count(s['preempted_requests'])} requests)"),
        ("prefix hit ratio", fmt.pct(s["hit_ratio"])),
        ("KV usage (mean / max)", f"{fmt.pct(s['kv_usage_mean'])} / {fmt.pct(s['kv_usage_max'])}"),
        ("largest inter-token gap", fmt.seconds(s["max_itl_s"])),
    ]


def _dist(label: str, d: dict[str, Any]) -> list[str]:
    if not d or not d.get("count"):
        return [label, "–", "–", "–", "–", "–", "0"]
    return [label, *(fmt.seconds(d[k]) for k in ("mean", "p50", "p90", "p99", "max")),
            fmt.count(d["count"])]


LATENCY_HEADER = ["metric", "mean", "p50", "p90", "p99", "max", "n"]


def latency_rows(s: dict[str, Any]) -> list[list[str]]:
    """TTFT, inter-token, TPOT, queue and end-to-end percentiles."""
    return [_dist("time to first token", s["ttft_s"]), _dist("inter-token gap", s["itl_s"]),
            _dist("time per output token", s["tpot_s"]), _dist("queue time", s["queue_s"]),
            _dist("end-to-end latency", s["e2e_s"])]


def work_value(unit: str, value: float | None) -> str:
    if unit == "tokens":
        return fmt.tokens(value)
    if unit == "bytes":
        return fmt.bytes_(value)
    if unit == "s":
        return fmt.seconds(value)
    return fmt.count(value)


WORK_LABELS = (
    ("prefill_tokens", "prefill tokens computed", "tokens"),
    ("hit_tokens", "prefix-cache hit tokens", "tokens"),
    ("recomputed_tokens", "recomputed after preemption", "tokens"),
    ("decode_tokens", "decode tokens", "tokens"),
    ("steps", "engine steps", "count"),
    ("host_overhead_s", "host overhead", "s"),
    ("decode_stall_s", "decode-seconds lost to prefill stalls", "s"),
    ("prefix_reread_bytes", "prefix KV re-read by chunks", "bytes"),
    ("kv_transfer_bytes", "KV bytes over the P/D link", "bytes"),
    ("hbm_bytes", "HBM bytes moved", "bytes"),
    ("gpu_busy_s", "GPU-seconds busy", "s"),
    ("gpu_provisioned_s", "GPU-seconds provisioned", "s"),
)


def work_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The work ledger of one run."""
    w = s["work"]
    return [(label, work_value(unit, w[key])) for key, label, unit in WORK_LABELS]


INSTANCE_HEADER = ["instance", "requests", "prefill tokens", "decode tokens", "busy",
                   "preemptions"]


def instance_rows(s: dict[str, Any]) -> list[list[str]]:
    """One row per instance (clusters only)."""
    return [[x["instance"], fmt.count(x["requests"]), fmt.tokens(x["prefill_tokens"]),
             fmt.tokens(x["decode_tokens"]), fmt.pct(x["busy_share"]), fmt.count(x["preemptions"])]
            for x in s.get("per_instance") or []]


def calibration_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The `--calibrate` fit, when one was made."""
    c = s.get("calibration")
    if not c:
        return []
    return [
        ("a (per step)", fmt.seconds(c["a_s"])),
        ("b (per prefill token)", f"{c['b_s_per_prefill_token'] * 1e6:.4g} µs"),
        ("c (per context token)", f"{c['c_s_per_context_token'] * 1e9:.4g} ns"),
        ("context from", c["context_source"]),
        ("R²", f"{c['r_squared']:.4f}"),
        ("residual (RMS)", fmt.seconds(c["rmse_s"])),
        ("steps fitted", fmt.count(c["steps"])),
    ]




def view(section: Any) -> View:
    """Deployment, outcome, latency percentiles, work ledger, calibration, notes."""
    s = as_dict(section)
    out: list[Block] = [
        Heading(text="Simulated deployment"),
        KeyValues(rows=config_rows(s), header=("setting", "value")),
        Heading(text="Outcome", level=4), KeyValues(rows=outcome_rows(s)),
        Heading(text="Latency", level=4), Grid(header=LATENCY_HEADER, rows=latency_rows(s)),
        Heading(text="Work", level=4), KeyValues(rows=work_rows(s), header=("work", "amount")),
    ]
    inst = instance_rows(s)
    if inst:
        out += [Heading(text="Per instance", level=4), Grid(header=INSTANCE_HEADER, rows=inst)]
    cal = calibration_rows(s)
    if cal:
        out += [Heading(text="Step-time fit (--calibrate)", level=4),
                KeyValues(rows=cal, header=("term", "value"))]
    out.append(Notes(notes=s.get("notes", [])))
    return out
