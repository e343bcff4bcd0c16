"""Which instance of the trace a metric sample belongs to: the join of a Prometheus export's
`instance`, `pod` and `engine` labels to the trace's instance names (docs/inputs.md).

The rule, for one label set, given the names the trace uses (its `instance`,
`prefill_instance` and `decode_instance` columns and the step log's `instance`):

1. the labels' values joined by "/" in the order instance, pod, engine (`i0/0` for
   `instance="i0",engine="0"`), when the trace names that;
2. else the first of the instance label, the instance label without a `:port` suffix
   (Prometheus' own `instance` is the scrape target, `host:8000`), the pod label, that the
   trace names (`i0`);
3. else the joined value: an instance the trace does not name, kept apart from the others.

Without names to join to (telemetry alone, a table with no instance column) the joined value
is the instance. Several label sets that join to one name (two engines of one instance, as
vLLM's data-parallel ranks label them `engine="0"`, `engine="1"`) are one instance: their
gauges and counters are summed at each sample time.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# The metric labels that name an instance, in the order their values are joined.
INSTANCE_LABELS = ("instance", "pod", "engine")


def _pairs(labels: str) -> dict[str, str]:
    text = labels.strip().strip("{}")
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def joined_labels(labels: str) -> str | None:
    """The instance/pod/engine label values of one label set joined by "/", or None."""
    pairs = _pairs(labels)
    values = [pairs[k] for k in INSTANCE_LABELS if k in pairs]
    return "/".join(values) if values else None


def join_instance(labels: str, names: Collection[str]) -> str | None:
    """The trace's instance a label set belongs to, by the module's rule (None: no label
    names an instance)."""
    joined = joined_labels(labels)
    if joined is None or not names or joined in names:
        return joined
    pairs = _pairs(labels)
    host = pairs.get("instance")
    for candidate in (host, None if host is None else host.rsplit(":", 1)[0],
                      pairs.get("pod")):
        if candidate is not None and candidate in names:
            return candidate
    return joined


def trace_instance_names(requests: pd.DataFrame, step_instances: Collection[str] = ()
                         ) -> frozenset[str]:
    """The instance names a trace uses: its instance columns and its step log's."""
    names: set[str] = {str(s) for s in step_instances if s}
    for column in ("instance", "prefill_instance", "decode_instance"):
        if column in requests.columns:
            names |= {str(v) for v in requests[column].dropna().unique() if str(v)}
    return frozenset(names)


def samples_by_instance(rows: pd.DataFrame, names: Collection[str]) -> pd.DataFrame:
    """Samples (`labels`, `time_s`, `value`) with their trace instance in `inst`, summed over
    the label sets that join to one instance at each time; rows no label names are dropped."""
    inst = rows["labels"].map({lb: join_instance(str(lb), names)
                               for lb in rows["labels"].unique()})
    rows = rows.assign(inst=inst)
    rows = rows[rows["inst"].notna()]
    if not len(rows):
        return rows
    summed = rows.groupby(["inst", "time_s"], sort=True, as_index=False)["value"].sum()
    summed["value"] = summed["value"].astype(np.float64)
    return summed
