"""The prefix replay section (`trace replay`): headline, rules, loss waterfall, breakdowns.

Takes the section as `ReplaySummary.to_dict()` (or the summary itself); every number is already
in the section, this module only formats it.
"""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Column, Grid, Heading, KeyValues, Line, Notes, View

RATE_HEADER = ["definition", "hit rate", "capacity", "used by"]

RULE_LABELS: dict[str, str] = {
    "block_size_tokens": "block size",
    "last_token_rule": "last-token rule",
    "tenant_isolation": "tenant isolation",
    "touch_order": "touch order",
    "cache_partial_blocks": "partial blocks cached",
    "cache_outputs": "outputs cached",
    "capacity_blocks": "capacity",
    "eviction": "eviction",
    "scope": "scope",
    "route": "route",
    "instances": "instances",
    "capacity_per_tenant": "capacity per tenant",
    "accounting": "accounting",
}
ACCOUNTING_TEXT: dict[str, str] = {
    "clean": "clean model (cached full blocks, evicted by --eviction)",
    "vllm": "vLLM's block pool (engine-exact)",
    "sglang": "SGLang's radix tree (engine-exact)",
}


def as_dict(section: Any) -> dict[str, Any]:
    """The section as the JSON-ready dict (accepts the summary dataclass too)."""
    return section if isinstance(section, dict) else section.to_dict()


def onoff(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return fmt.MISSING if value is None else str(value)


def headline_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The primary numbers: token-weighted hit ratio first."""
    blocks = s["blocks"]
    rows = [
        ("hit ratio (token-weighted)", fmt.pct(s["hit_ratio"])),
        ("saved prefill", f"{fmt.count(s['saved_prefill_tokens'])} tokens"),
        ("remaining prefill", f"{fmt.count(s['remaining_prefill_tokens'])} tokens"),
        ("prompt tokens", fmt.count(s["prompt_tokens"])),
        ("cacheable / distinct / evicted blocks",
         f"{fmt.count(blocks['cacheable'])} / {fmt.count(blocks['distinct'])} / "
         f"{fmt.count(blocks['evicted'])}"),
    ]
    if not s.get("hit_rates"):  # a section without the table still labels its other ratios
        other = s["other_ratios"]
        rows[4:4] = [("hit ratio, request-averaged", fmt.pct(other["request_averaged_hit_ratio"])),
                     ("hit ratio, cacheable blocks", fmt.pct(other["cacheable_block_hit_ratio"]))]
    return rows


def rate_rows(rates: dict[str, Any]) -> list[list[str]]:
    """One row per hit-rate definition: its label, value, the cache it had, who uses it."""
    return [[r["label"], fmt.pct(r["value"]), r["capacity"], r["used_by"]]
            for r in rates.values()]


def window_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """`--warmup`: which requests the totals count, and whether the cache had filled."""
    w = s.get("measurement_window")
    if not w:
        return []
    rows = [
        ("warm-up (not counted)", f"{fmt.count(w['warmup_requests'])} requests, "
                                  f"{fmt.num(w['warmup_seconds'])} s (--warmup {w['warmup']})"),
        ("measured", f"last {fmt.count(w['measured_requests'])} of {fmt.count(w['requests'])} "
                     "requests"),
    ]
    filled = w.get("filled_before_window")
    if filled is not None:
        rows.append(("cache filled before it", f"{'yes' if filled else 'no'} "
                     f"({fmt.count(w['distinct_blocks_before_window'])} distinct blocks in)"))
    return rows


def rule_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The effective rules (preset plus overrides)."""
    rules = s["rules"]
    rows = [("preset", str(s.get("preset") or fmt.MISSING))]
    for key, label in RULE_LABELS.items():
        value = rules.get(key)
        if key == "block_size_tokens":
            text = f"{value} tokens"
        elif key == "capacity_blocks":
            text = "unlimited" if value is None else f"{fmt.count(value)} blocks"
        elif key in ("route", "instances") and rules.get("scope") != "instance":
            continue
        elif key == "instances" and s.get("per_instance"):
            text = fmt.count(len(s["per_instance"]))  # the caches replayed, whoever set them
        elif key == "accounting":
            if rules.get("capacity_blocks") is None:  # every accounting agrees when unlimited
                continue
            text = ACCOUNTING_TEXT.get(str(value), str(value))
        else:
            text = onoff(value)
        rows.append((label, text))
    return rows


def waterfall_rows(s: dict[str, Any]) -> list[list[str]]:
    """ideal → each rule's loss → achieved; tokens and share of the ideal."""
    wf = s.get("waterfall")
    if not wf:
        return []
    ideal = wf["ideal_hit_tokens"]
    rows = [["ideal (longest common prefix)", fmt.count(ideal), "", "100.0 %"]]
    for step in wf["steps"]:
        loss = step["loss_tokens"]
        lost = "0" if loss == 0 else ("−" if loss > 0 else "+") + fmt.count(abs(loss))
        rows.append([step["label"], fmt.count(step["hit_tokens"]), lost,
                     fmt.pct(step["hit_tokens"] / ideal) if ideal else fmt.MISSING])
    rows.append(["achieved", fmt.count(wf["achieved_hit_tokens"]), "",
                 fmt.pct(wf["achieved_hit_tokens"] / ideal) if ideal else fmt.MISSING])
    return rows


TIER_HEADER = ["source", "capacity", "hit tokens", "of prompt", "requests", "stored",
               "evicted", "failed", "loaded"]


def tier_rows(s: dict[str, Any]) -> list[list[str]]:
    """`--tier`: the GPU pool, then each tier: what it served, the chunks it stored, evicted,
    the stores it could not take whole (vLLM's refused offers, LMCache's saves cut short) and
    loaded (bytes with the model's KV size, else chunks)."""
    t = s["tiers"]
    rules = s.get("rules", {})
    blocks = t.get("gpu_capacity_blocks", rules.get("capacity_blocks"))
    pool = "unlimited" if blocks is None else f"{fmt.count(blocks)} blocks"
    if blocks is not None and rules.get("block_size_tokens"):  # the tiers' unit (the rules
        pool = fmt.tokens(blocks * rules["block_size_tokens"])  # table has its blocks)
    rows = [["gpu", pool, fmt.count(t["gpu_hit_tokens"]), fmt.pct(t["gpu_hit_ratio"]),
             "", "", "", "", ""]]
    for tier in t["tiers"]:
        loaded = "" if tier["loaded_bytes"] is None else fmt.bytes_(tier["loaded_bytes"])
        size = "unlimited" if tier.get("unlimited") else fmt.tokens(tier["capacity_tokens"])
        rows.append([tier["name"], size,
                     fmt.count(tier["hit_tokens"]), fmt.pct(tier["hit_ratio"]),
                     fmt.count(tier["requests_served"]), fmt.count(tier["stored_chunks"]),
                     fmt.count(tier["evicted_chunks"]), fmt.count(tier["failed_stores"]),
                     loaded or fmt.count(tier["loaded_chunks"])])
    rows.append(["total", "", fmt.count(t["hit_tokens"]), fmt.pct(t["hit_ratio"]), "", "", "",
                 "", ""])
    return rows


def tier_legend(tiers: dict[str, Any]) -> str:
    """What the tier table's counts are counted in."""
    chunk = tiers["tiers"][0]["chunk_tokens"] if tiers.get("tiers") else None
    unit = (f"chunks of {fmt.count(chunk)} token{'' if chunk == 1 else 's'}" if chunk
            else "chunks")
    return (f"requests: those the tier served; stored, evicted: {unit}; failed: stores a tier "
            "could not take whole (vLLM refuses the offer, LMCache keeps the save's head, "
            "SGLang's host drops the backup); loaded: bytes read up (chunks without --model)")


def group_rows(groups: list[dict[str, Any]]) -> list[list[str]]:
    """Per tenant or per instance."""
    return [[g["label"], fmt.count(g["requests"]), fmt.count(g["prompt_tokens"]),
             fmt.count(g["hit_tokens"]), fmt.pct(g["hit_ratio"])] for g in groups]


def hit_length_rows(s: dict[str, Any]) -> list[list[str]]:
    """Requests per share of the prompt that hit."""
    rows = []
    for b in s["hit_length"]["share_buckets"]:
        label = "no hit" if b["upper"] == 0 else f"{b['lower']:.0%}–{b['upper']:.0%}"
        rows.append([label, fmt.count(b["requests"])])
    return rows


def hot_rows(s: dict[str, Any]) -> list[list[str]]:
    """The prefixes whose reuse is lost most."""
    rows = []
    for h in s["hot_prefixes"]:
        why = ", ".join(f"{k} {fmt.count(v)}" for k, v in h["by_reason_tokens"].items())
        tenants = ", ".join(h["tenants"][:4]) + (" …" if len(h["tenants"]) > 4 else "")
        rows.append([fmt.count(h["prefix_tokens"]), fmt.count(h["recomputed_tokens"]),
                     fmt.count(h["times"]), why, tenants or fmt.MISSING,
                     h["example_request_id"]])
    return rows


def observed_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Observed (engine-reported) vs replayed hits."""
    o = s.get("observed_vs_replayed")
    if not o:
        return []
    rows = [
        ("requests with cached_tokens", fmt.count(o["requests"])),
        ("observed hit ratio (token-weighted)", fmt.pct(o["observed_hit_ratio"])),
        ("replayed hit ratio (token-weighted)", fmt.pct(o["replayed_hit_ratio"])),
        ("exact per-request matches", fmt.pct(o["exact_match_share"])),
        ("mean |observed − replayed|", f"{fmt.num(o['mean_abs_diff_tokens'])} tokens"),
    ]
    if o["warm_start"]:
        rows.append(("warm start", f"yes: early requests hit {fmt.count(o['early_excess_tokens'])}"
                     " more tokens than a cold replay"))
    if o["block_size_mismatch"]:
        rows.append(("block-size mismatch",
                     f"{fmt.pct(o['off_grid_share'])} of observed hits are off the block grid; "
                     f"their common divisor is {o['observed_block_gcd_tokens']} tokens"))
    return rows


def reconciliation_blocks(s: dict[str, Any]) -> list[Block]:
    """Observed and replayed hits over time, the requests that differ most, the shortfall
    stretch and the likely reasons (captures whose cached_tokens are the engine's)."""
    r = s.get("observed_over_time")
    if not r:
        return []
    short = r["shortfall"]
    verdict = ("none: every window within " if short is None else
               f"{fmt.num(short['start_s'])}–{fmt.num(short['end_s'])} s: observed "
               f"{fmt.pct(short['observed_hit_tokens'] / max(short['prompt_tokens'], 1))}, "
               f"replayed {fmt.pct(short['replayed_hit_tokens'] / max(short['prompt_tokens'], 1))}"
               f" over {fmt.count(short['requests'])} requests; margins ")
    rows = [("requests that differ", fmt.count(r["differing_requests"])),
            ("observed below replayed", f"{fmt.count(r['below_tokens'])} tokens"),
            ("observed above replayed", f"{fmt.count(r['above_tokens'])} tokens"),
            ("shortfall", f"{verdict}{r['points'] * 100:.1f} points and "
                          f"{fmt.pct(r['relative'])} relative")]
    out: list[Block] = [Heading(text="Observed vs replayed over time", level=4),
                        KeyValues(rows=rows),
                        Grid(header=["arrivals from (s)", "requests", "observed hit tokens",
                                     "replayed hit tokens", "gap (points)"],
                             rows=[[fmt.num(w["start_s"]), fmt.count(w["requests"]),
                                    fmt.count(w["observed_hit_tokens"]),
                                    fmt.count(w["replayed_hit_tokens"]),
                                    fmt.pct(gap_points(w))] for w in r["windows"]])]
    if r["largest_differences"]:
        out += [Heading(text="Requests that differ most", level=4),
                Grid(header=["request", "arrival (s)", "prompt tokens", "observed", "replayed"],
                     rows=[[g["request_id"], fmt.num(g["arrival_s"]),
                            fmt.count(g["prompt_tokens"]), fmt.count(g["observed_hit_tokens"]),
                            fmt.count(g["replayed_hit_tokens"])]
                           for g in r["largest_differences"]])]
    if r["reasons"]:
        out += [Heading(text="Likely reasons", level=4),
                KeyValues(rows=[(_cause(x), f"{x['text']} ({x['basis']})")
                                for x in r["reasons"]])]
    return out


def gap_points(window: dict[str, Any]) -> float:
    """(replayed − observed) hit tokens of a window over its prompt tokens."""
    prompt = window["prompt_tokens"]
    return ((window["replayed_hit_tokens"] - window["observed_hit_tokens"]) / prompt
            if prompt else 0.0)


def _cause(reason: dict[str, Any]) -> str:
    """A reason's cause, with whether another replay tested it."""
    tested = reason.get("tested", "untested")
    return reason["cause"] if tested == "untested" else f"{reason['cause']} ({tested})"


def view(section: Any) -> View:
    """Headline, rules, waterfall, breakdowns, hot prefixes, observed vs replayed, notes."""
    s = as_dict(section)
    out: list[Block] = [
        Heading(text="Prefix reuse (replay)"),
        KeyValues(rows=headline_rows(s)),
    ]
    if s.get("hit_rates"):
        out += [Heading(text="Hit rate by definition (docs/hit-rates.md)", level=4),
                Grid(header=RATE_HEADER, rows=rate_rows(s["hit_rates"]), markdown_align="lrll",
                     columns=[Column(name=n, align="right" if n == "hit rate" else "left")
                              for n in RATE_HEADER])]
    window = window_rows(s)
    if window:
        out += [Heading(text="Measurement window", level=4), KeyValues(rows=window)]
    out += [
        Heading(text="Effective rules", level=4),
        KeyValues(rows=rule_rows(s), header=("rule", "value")),
    ]
    wf = waterfall_rows(s)
    if wf:
        out += [Heading(text="Loss waterfall (hit tokens)", level=4),
                Grid(header=["step", "hit tokens", "lost", "of ideal"], rows=wf)]
    if s.get("tiers"):
        out += [Heading(text=f"Tiers below the GPU ({s['tiers']['policy']} rules)", level=4),
                Grid(header=TIER_HEADER, rows=tier_rows(s)),
                Line(text=tier_legend(s["tiers"]), style="dim"),
                Notes(notes=s["tiers"].get("notes", []))]
    for key, title in (("per_tenant", "Per tenant"), ("per_instance", "Per instance")):
        if s.get(key):
            out += [Heading(text=title, level=4),
                    Grid(header=[title.split()[1], "requests", "prompt tokens", "hit tokens",
                                 "hit ratio (token-weighted)"], rows=group_rows(s[key]))]
    out += [Heading(text="Hit share of the prompt", level=4),
            Grid(header=["share", "requests"], rows=hit_length_rows(s))]
    if s.get("hot_prefixes"):
        out += [Heading(text="Hot prefixes (reuse lost, tokens)", level=4),
                Grid(header=["prefix", "recomputed", "times", "why", "tenants", "example"],
                     rows=hot_rows(s))]
    observed = observed_rows(s)
    if observed:
        out += [Heading(text="Observed vs replayed", level=4), KeyValues(rows=observed)]
    out += reconciliation_blocks(s)
    out.append(Notes(notes=s.get("notes", [])))
    return out
