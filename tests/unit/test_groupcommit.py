"""The group commit across threads (tasklab/groupcommit.py), without a database:
callers share writes, each hears its own answer, one failure fails only its caller,
and a caller interrupted while waiting leaves nobody waiting behind it."""

from __future__ import annotations

import threading
import time

import pytest

from tasklab.groupcommit import GroupCommit, _Item


def _group(batches: list[list[int]], slow_first: float = 0.1) -> GroupCommit[int, int]:
    def write(batch: list[int]) -> tuple[list[int | BaseException], None]:
        batches.append(list(batch))
        if len(batches) == 1:
            time.sleep(slow_first)  # the others arrive meanwhile
        return [ValueError(n) if n < 0 else n * 10 for n in batch], None

    return GroupCommit(write)


def _callers(group: GroupCommit[int, int], requests: list[int]) -> list[object]:
    out: list[object] = [None] * len(requests)

    def call(i: int) -> None:
        try:
            out[i] = group(requests[i])
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(len(requests))]
    for t in threads:
        t.start()
        time.sleep(0.002)  # the first one leads
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a caller was left waiting"
    return out


def test_callers_share_writes_and_each_hears_its_own_answer():
    batches: list[list[int]] = []
    out = _callers(_group(batches), [1, 2, -3, 4, 5])
    assert out[:2] == [10, 20] and isinstance(out[2], ValueError) and out[3:] == [40, 50]
    assert len(batches) == 2 and batches[0] == [1]  # the rest shared the second write


def test_a_caller_interrupted_while_handed_the_lead_passes_it_on(monkeypatch):
    """The second caller is woken to lead and interrupted at that moment (a Ctrl-C):
    its request is withdrawn unwritten and the third caller leads instead."""
    batches: list[list[int]] = []
    group = _group(batches)
    real_wait = _Item.wait

    def wait(self: _Item[int]) -> None:
        real_wait(self)
        if self.request == 2 and not self.done:  # woken to lead, not written
            raise KeyboardInterrupt

    monkeypatch.setattr(_Item, "wait", wait)
    out = _callers(group, [1, 2, 3])
    assert out[0] == 10 and isinstance(out[1], KeyboardInterrupt) and out[2] == 30
    assert 2 not in [n for b in batches for n in b]


def test_nothing_is_left_pending_after_everyone_is_answered():
    group = _group([], slow_first=0.0)
    assert _callers(group, list(range(20))) == [n * 10 for n in range(20)]
    assert group._pending == [] and group._leading is False


@pytest.mark.parametrize("n", [1, 3])
def test_a_write_that_raises_answers_every_caller_of_its_batch(n):
    def write(batch: list[int]) -> tuple[list[int | BaseException], None]:
        raise RuntimeError("the database went away")

    out = _callers(GroupCommit(write), list(range(n)))
    assert all(isinstance(o, RuntimeError) for o in out)
