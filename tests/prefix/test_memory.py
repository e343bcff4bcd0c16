"""Memory held by passes side by side (`memory.reserved`): one that would not fit beside the
running ones waits for them, one that does not fit alone is refused, none deadlocks itself."""

from __future__ import annotations

import threading

import pytest

from yaotu_trace.errors import ResourceLimitError
from yaotu_trace.prefix import memory

GIB = 2**30


def _second_pass_enters_while_first_runs(monkeypatch: pytest.MonkeyPatch, available: int,
                                         need: int) -> tuple[bool, bool]:
    """Two passes of `need` on two threads, the second asking while the first holds: whether
    the second got in while the first still ran, and whether it got in at all."""
    monkeypatch.setattr(memory, "available_bytes", lambda: available)
    inside = [threading.Event(), threading.Event()]
    release = threading.Event()

    def one(k: int) -> None:
        with memory.reserved(need, f"pass {k}"):
            inside[k].set()
            if k == 0:
                release.wait(10)

    first = threading.Thread(target=one, args=(0,))
    first.start()
    assert inside[0].wait(10)
    second = threading.Thread(target=one, args=(1,))
    second.start()
    beside = inside[1].wait(0.5)
    release.set()
    first.join()
    second.join()
    return beside, inside[1].is_set()


def test_passes_that_fit_together_run_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 10 GiB available and two passes of 4 GiB
    beside, ran = _second_pass_enters_while_first_runs(monkeypatch, 10 * GIB, 4 * GIB)
    # THEN the second starts while the first runs
    assert beside and ran


def test_a_pass_that_would_not_fit_beside_the_running_one_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 10 GiB available and two passes of 6 GiB (each fits alone, not both)
    beside, ran = _second_pass_enters_while_first_runs(monkeypatch, 10 * GIB, 6 * GIB)
    # THEN the second waits for the first to end, and is not refused
    assert not beside and ran
    assert memory._HELD.passes == 0 and memory._HELD.bytes == 0


def test_a_pass_that_does_not_fit_alone_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * GIB)
    with (pytest.raises(ResourceLimitError, match=r"the pass needs about 12\.0 GiB"),
          memory.reserved(12 * GIB, "the pass", "use fewer --jobs")):
        pass


def test_a_pass_inside_a_pass_does_not_wait_for_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a pass holding 6 of 10 GiB that starts another of 6 GiB on its own thread
    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * GIB)
    with memory.reserved(6 * GIB, "outer"):
        # WHEN the inner one asks: it is checked on its own, not made to wait for its caller
        with (pytest.raises(ResourceLimitError, match="inner needs"),
              memory.reserved(12 * GIB, "inner")):
            pass
        with memory.reserved(6 * GIB, "inner"):
            pass
    # THEN nothing is left held
    assert memory._HELD.passes == 0 and memory._HELD.bytes == 0
