"""An engine's Prometheus samples in one long table, and the lookups the axes read them by.

`EngineMetrics` holds rows of (time_s, metric, labels, value) as a reader found them
(`ingest.telemetry`: a range-query export, `/metrics` text, a server log); its lookups map the
names vLLM and SGLang export (`metric_names`) to one canonical key per quantity, and read
counters as Prometheus' `increase()` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo
from typing import TYPE_CHECKING

import numpy as np

from yaotu_trace.data.metric_names import COUNTERS, GAUGES, HISTOGRAMS, LABELLED, RUN_INFO

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMetrics:
    """Prometheus samples in long form: `frame` has time_s, metric, labels, value (float).

    Counters are read as Prometheus' `increase()` reads them, reset-aware, with two rules
    for what a range does not show: an export of one instant (a single saved `/metrics` body,
    an instant query) holds each counter's total since its series began, and a counter series
    that first appears after the export's first sample began then, from zero (SGLang creates
    its retraction counter at the first retraction).
    """

    frame: pd.DataFrame
    path: str
    # What the reader knows about the samples' dating that the diagnosis should say.
    notes: tuple[str, ...] = ()
    # The year given to a server log's year-less times (None: none assumed), so that the
    # trace's own year can replace it.
    log_year: int | None = None
    # The zone a server log's zone-less times were read in (`--log-tz`; None: UTC), kept so
    # that reading it again with the trace's year keeps it.
    log_zone: tzinfo | None = None
    # Whether a counter series that appears after the export's first sample began then, from
    # zero (a Prometheus series is created when first counted). A server log places its own
    # counters' starting values, so it says False.
    new_series_from_zero: bool = True
    # The requests the export names one by one (LMCache's lookup lines): (request id, tokens
    # looked up), so that a log of another run can be told from this trace's; () for none.
    request_tokens: tuple[tuple[str, int], ...] = ()

    @property
    def names(self) -> frozenset[str]:
        """Every metric name present."""
        return frozenset(self.frame["metric"].unique().tolist())

    @property
    def run_ids(self) -> frozenset[str]:
        """The simulated runs the export says it is of (`yaotu:run_info{run_id}`, which
        `trace simulate --metrics-out` writes; `data/run_id.py`, which checks them where it
        compares them); empty for an engine's own."""
        labels = self.frame.loc[self.frame["metric"] == RUN_INFO, "labels"]
        found = (_label_values(str(text)).get("run_id") for text in labels.unique())
        return frozenset(v for v in found if v is not None)

    @property
    def instant(self) -> bool:
        """Whether every sample is of one instant: counters are then totals since start."""
        times = self.frame["time_s"]
        return bool(len(times)) and float(times.min()) == float(times.max())

    def engines(self, key: str) -> int:
        """How many label sets (engines, instances) export `key`'s series."""
        name = self.name_of(key)
        return 0 if name is None else int(self._series(name)["labels"].nunique())

    def _first(self, candidates: tuple[str, ...], suffix: str = "") -> str | None:
        names = self.names
        return next((c for c in candidates if c + suffix in names), None)

    def name_of(self, key: str) -> str | None:
        """The engine's metric name serving canonical `key`, or None when not exported."""
        if key in GAUGES:
            return self._first(GAUGES[key])
        if key in COUNTERS:
            return self._first(COUNTERS[key])
        if key in HISTOGRAMS:
            return self._first(HISTOGRAMS[key], "_count")
        raise KeyError(key)

    def _series(self, name: str) -> pd.DataFrame:
        return self.frame[self.frame["metric"] == name]

    def label_values(self, key: str) -> tuple[str, ...]:
        """The values of `key`'s splitting label (`LABELLED`) that the export carries."""
        name = self.name_of(key)
        if name is None or key not in LABELLED:
            return ()
        label = LABELLED[key]
        found = {_label_values(text).get(label) for text in self._series(name)["labels"]}
        return tuple(sorted(v for v in found if v))

    def _labelled(self, key: str, value: str | None) -> pd.DataFrame | None:
        name = self.name_of(key)
        if name is None:
            return None
        rows = self._series(name)
        if value is None:
            return rows
        label = LABELLED[key]
        keep = rows["labels"].astype(str).map(lambda t: _label_values(t).get(label) == value)
        return rows[keep.to_numpy(dtype=bool)]

    def gauge(self, key: str, how: str = "sum", value: str | None = None) -> pd.DataFrame | None:
        """A gauge over time, combined across label sets (engines) per timestamp.

        `how` is "sum" for counts (requests waiting in all engines) or "max" for ratios (the
        fullest engine's KV usage); `value` keeps one value of `key`'s splitting label.
        Returns columns time_s, value sorted by time.
        """
        rows = self._labelled(key, value)
        if rows is None:
            return None
        grouped = rows.groupby("time_s", sort=True)["value"]
        out = grouped.max() if how == "max" else grouped.sum()
        return out.reset_index()

    def _origin_s(self) -> float:
        """Before this, a series that appears later did not exist (inf: never assume so)."""
        return float(self.frame["time_s"].min()) if self.new_series_from_zero else np.inf

    def counter_increase(self, key: str, value: str | None = None) -> float | None:
        """Total increase of a counter over the export (see the class docstring), summed over
        label sets; `value` keeps one value of `key`'s splitting label."""
        rows = self._labelled(key, value)
        if rows is None:
            return None
        return _increase(rows, self._origin_s(), self.instant)

    def counter_steps(self, key: str) -> pd.DataFrame | None:
        """Times at which a counter went up and by how much (columns time_s, delta)."""
        import pandas as pd

        name = self.name_of(key)
        if name is None:
            return None
        parts = [_deltas(rows, self._origin_s(), self.instant)
                 for _, rows in self._series(name).groupby("labels", sort=False)]
        if not parts:
            return None
        out = pd.concat(parts, ignore_index=True)
        return out[out["delta"] > 0].sort_values("time_s").reset_index(drop=True)

    def histogram_mean(self, key: str) -> float | None:
        """Mean observation of a histogram over the export: Δ`_sum` / Δ`_count`."""
        name = self.name_of(key)
        if name is None or name + "_sum" not in self.names:
            return None
        count = _increase(self._series(name + "_count"), self._origin_s(), self.instant)
        total = _increase(self._series(name + "_sum"), self._origin_s(), self.instant)
        if not count:
            return None
        return total / count

    def histogram_count(self, key: str) -> float | None:
        """Observations added to a histogram over the export (Δ`_count`)."""
        name = self.name_of(key)
        if name is None:
            return None
        return _increase(self._series(name + "_count"), self._origin_s(), self.instant)

    def histogram_sum(self, key: str) -> float | None:
        """The observations' total added over the export (Δ`_sum`)."""
        name = self.name_of(key)
        if name is None or name + "_sum" not in self.names:
            return None
        return _increase(self._series(name + "_sum"), self._origin_s(), self.instant)

    def bucket_increase(self, key: str, le: float) -> float | None:
        """Observations at or below `le` added over the export (the `_bucket{le}` series)."""
        name = self.name_of(key)
        if name is None or name + "_bucket" not in self.names:
            return None
        rows = self._series(name + "_bucket")
        bound = rows["labels"].astype(str).map(lambda t: _le(_label_values(t).get("le")))
        rows = rows[(bound == le).to_numpy(dtype=bool)]
        return None if rows.empty else _increase(rows, self._origin_s(), self.instant)


def _le(text: str | None) -> float:
    try:
        return float(text) if text is not None else np.nan
    except ValueError:
        return np.nan


def _label_values(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def _deltas(series: pd.DataFrame, origin_s: float, instant: bool) -> pd.DataFrame:
    """One label set's increases (time_s, delta): a drop is a restart from zero, and the
    first sample counts from zero when the export is one instant or the series began after
    the export's first sample."""
    import pandas as pd

    series = series.sort_values("time_s")
    times = series["time_s"].to_numpy(dtype=np.float64)
    values = series["value"].to_numpy(dtype=np.float64)
    delta = np.diff(values)
    delta = np.where(delta < 0, values[1:], delta)
    first = values[0] if (instant or times[0] > origin_s) else 0.0
    return pd.DataFrame({"time_s": times, "delta": np.concatenate(([first], delta))})


def _increase(rows: pd.DataFrame, origin_s: float, instant: bool) -> float:
    return float(sum(_deltas(series, origin_s, instant)["delta"].sum()
                     for _, series in rows.groupby("labels", sort=False)))
