"""The join of a metrics export's instance, pod and engine labels to the trace's instance names
(`data/instance_join.py`, the rule in docs/inputs.md)."""

from __future__ import annotations

import pandas as pd
import pytest

from yaotu_trace.data.instance_join import (
    join_instance,
    joined_labels,
    samples_by_instance,
    trace_instance_names,
)


def test_joined_labels_read_both_label_spellings() -> None:
    assert joined_labels("engine=0,instance=i0") == "i0/0"
    assert joined_labels('{instance="i0",engine="0",le="+Inf"}') == "i0/0"
    assert joined_labels("pod=p1") == "p1"
    assert joined_labels("le=+Inf") is None


@pytest.mark.parametrize(("labels", "names", "joined"), [
    # 1. the joined value when the trace names it
    ("engine=0,instance=i0", {"i0/0", "i1/0"}, "i0/0"),
    # 2. the instance label alone: vLLM v1's engine label beside the trace's `i0`
    ("engine=0,instance=i0", {"i0", "i1"}, "i0"),
    # … without Prometheus' scrape port
    ("engine=0,instance=host-a:8000", {"host-a", "host-b"}, "host-a"),
    # … then the pod
    ("instance=10.0.0.7:8000,pod=vllm-1", {"vllm-0", "vllm-1"}, "vllm-1"),
    # 3. an instance the trace does not name stays apart
    ("engine=0,instance=i9", {"i0", "i1"}, "i9/0"),
    # no names to join to: the joined value
    ("engine=0,instance=i0", set(), "i0/0"),
    ("le=+Inf", {"i0"}, None),
])
def test_join_instance_follows_the_documented_order(labels: str, names: set[str],
                                                    joined: str | None) -> None:
    assert join_instance(labels, frozenset(names)) == joined


def test_names_come_from_every_instance_column_and_the_step_log() -> None:
    req = pd.DataFrame({"instance": ["d0", None], "prefill_instance": ["p0", "p0"],
                        "decode_instance": ["d0", "d1"]})
    assert trace_instance_names(req, {"p1"}) == {"d0", "d1", "p0", "p1"}


def test_engines_of_one_instance_are_summed_at_each_time() -> None:
    rows = pd.DataFrame({
        "labels": ["engine=0,instance=i0", "engine=1,instance=i0", "engine=0,instance=i1",
                   "engine=0,instance=i0", "engine=1,instance=i0", "le=+Inf"],
        "time_s": [0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
        "value": [2.0, 3.0, 7.0, 1.0, 1.0, 9.0],
    })
    out = samples_by_instance(rows, {"i0", "i1"})
    assert out[["inst", "time_s", "value"]].values.tolist() == [
        ["i0", 0.0, 5.0], ["i0", 1.0, 2.0], ["i1", 0.0, 7.0]]
