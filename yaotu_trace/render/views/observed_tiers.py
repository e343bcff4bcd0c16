"""The `observed_tiers` section: the engine's hits by tier (its telemetry) beside the tiered
replay's, and whether each tier agrees within the reconciliation's tolerance."""

from __future__ import annotations

from typing import Any

from yaotu_trace.render import fmt
from yaotu_trace.render.blocks import Block, Grid, Heading, Notes, View


def _points(gap: float | None) -> str:
    return fmt.MISSING if gap is None else f"{100 * gap:+.1f} pt"


def view(section: Any) -> View:
    """One row per tier, then what was not compared."""
    s = section if isinstance(section, dict) else section.to_dict()
    rows = [[t["name"], ", ".join(t["engine_labels"]) or fmt.MISSING,
             fmt.count(t["observed_hit_tokens"]), fmt.pct(t["observed_share"]),
             fmt.count(t["replayed_hit_tokens"]), fmt.pct(t["replayed_share"]),
             _points(t["gap_points"]), t["verdict"] or fmt.MISSING] for t in s["tiers"]]
    notes = [f"from {s['source']}; a tier disagrees when the shares differ by at least "
             f"{100 * s['points']:g} points of the prompt tokens and {100 * s['relative']:g} % "
             "of the replayed share", *s["notes"]]
    out: list[Block] = [
        Heading(text="Observed vs replayed hits by tier"),
        Grid(header=["tier", "engine label", "observed", "of prompt", "replayed", "of prompt",
                     "gap", "verdict"], rows=rows),
        Notes(notes=notes)]
    return out
