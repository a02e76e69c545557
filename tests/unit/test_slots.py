"""The thread runner's pool (runners/slots.py): N turns at once, in claim order, work
past its wait given back, nothing started once interrupted, no wake-up lost."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from tasklab.groupcommit import GroupCommit
from tasklab.runners.slots import Entry, SlotPool
from tests.conftest import wait_for


class Pool:
    """A pool whose work is a function of the entry; records what ran, in order,
    the peak of turns held at once and what was given back."""

    def __init__(self, turns: int, threads: int) -> None:
        self.ran: list[Any] = []
        self.given_back: list[Any] = []
        self.now = self.peak = 0
        self._guard = threading.Lock()
        self.pool = SlotPool(turns, threads, self._run, self._give_back, "test-slots")

    def _run(self, entry: Entry) -> None:
        with self._guard:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.ran.append(entry.work if not callable(entry.work) else entry.work.__name__)
        try:
            if callable(entry.work):
                entry.work(entry)
        finally:
            with self._guard:
                self.now -= 1

    def _give_back(self, entry: Entry) -> None:
        self.given_back.append(entry.work)

    def put(self, work: Any, place: Entry | None = None, until: float | None = None) -> None:
        self.pool.put(place, work, Future(), until)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def holding(event: threading.Event) -> Any:
    def hold(entry: Entry) -> None:
        event.wait(10)

    return hold


def test_turns_go_in_claim_order_whatever_the_order_places_were_reserved() -> None:
    p = Pool(turns=1, threads=3)
    release = threading.Event()
    try:
        (first,) = p.pool.reserve([5.0])
        p.put(holding(release), first)
        wait_for(lambda: p.ran == ["hold"])
        late = p.pool.reserve([9.0, 9.0])  # a later batch lines up first
        early = p.pool.reserve([7.0, 7.0])  # an earlier batch, handed over after it
        for name, place in zip(["l1", "l2", "e1", "e2"], [*late, *early], strict=True):
            p.put(name, place)
        time.sleep(0.05)
        assert p.ran == ["hold"]  # one turn, held
        release.set()
        wait_for(lambda: len(p.ran) == 5)
        assert p.ran == ["hold", "e1", "e2", "l1", "l2"]  # by sent time, then batch order
        assert p.peak == 1
    finally:
        release.set()
        p.close()


def test_a_granted_place_waits_for_its_work_and_a_place_left_is_passed_over() -> None:
    p = Pool(turns=1, threads=2)
    try:
        a, b, c = p.pool.reserve([1.0, 2.0, 3.0])  # a has the turn, without work yet
        p.put("c", c)
        time.sleep(0.05)
        assert p.ran == []  # c may not overtake a
        p.pool.leave(b)  # given back before its turn
        p.put("a", a)
        wait_for(lambda: p.ran == ["a", "c"])
        p.pool.leave(b)  # twice is once
        (d,) = p.pool.reserve([4.0])
        p.pool.leave(d)  # a granted place left: its turn goes on
        p.put("e")
        wait_for(lambda: p.ran == ["a", "c", "e"])
    finally:
        p.close()


def test_at_most_n_turns_at_once_with_more_threads_and_all_of_them_used() -> None:
    p = Pool(turns=4, threads=8)

    def nap(entry: Entry) -> None:
        time.sleep(0.01)

    try:
        for _ in range(40):
            p.put(nap)
        wait_for(lambda: len(p.ran) == 40, timeout=20)
        assert p.peak == 4  # never more, and the pool ramped up to all four
    finally:
        p.close()


def test_work_ready_at_once_gets_a_thread_each_though_one_is_woken_at_a_time() -> None:
    """Threads are woken one at a time, each waking the next once it has its work: no
    wake-up is lost, work that needs to run side by side does."""
    p = Pool(turns=4, threads=4)
    together = threading.Barrier(4, timeout=5)

    def meet(entry: Entry) -> None:
        together.wait()

    try:
        for _ in range(3):
            for _ in range(4):
                p.put(meet)
            wait_for(lambda: p.pool.waiting == 0 and p.now == 0, timeout=10)
        assert not together.broken and len(p.ran) == 12
    finally:
        together.abort()
        p.close()


def test_work_waiting_past_its_until_is_given_back_and_never_runs() -> None:
    p = Pool(turns=1, threads=2)
    release = threading.Event()
    try:
        p.put(holding(release))
        wait_for(lambda: p.ran == ["hold"])
        p.put("patient")  # no until: waits as long as it takes
        p.put("hasty", until=time.monotonic() + 0.1)
        time.sleep(0.05)
        assert p.given_back == []  # not before its time
        wait_for(lambda: p.given_back == ["hasty"], timeout=5)
        assert p.pool.waiting == 1  # the patient one
        release.set()
        wait_for(lambda: p.ran == ["hold", "patient"])
        time.sleep(0.05)
        assert "hasty" not in p.ran and p.pool.waiting == 0
    finally:
        release.set()
        p.close()


def test_interrupt_gives_back_everything_not_started_and_starts_nothing_more() -> None:
    p = Pool(turns=1, threads=3)
    release = threading.Event()
    try:
        p.put(holding(release))
        wait_for(lambda: p.ran == ["hold"])
        p.put("w1")
        (reserved,) = p.pool.reserve([time.monotonic()])
        p.pool.interrupt()
        p.put("w2", reserved)  # handed over after the interrupt: given back too
        p.put("w3")
        wait_for(lambda: sorted(p.given_back) == ["w1", "w2", "w3"])
        release.set()
        time.sleep(0.05)
        assert p.ran == ["hold"] and p.pool.waiting == 0
    finally:
        release.set()
        p.close()


def test_shutdown_waits_for_running_work_and_leaves_no_thread() -> None:
    p = Pool(turns=2, threads=4)
    release = threading.Event()
    p.put(holding(release))
    wait_for(lambda: p.ran == ["hold"])
    closer = threading.Thread(target=p.close)
    closer.start()
    time.sleep(0.05)
    assert closer.is_alive()  # the running work finishes first
    release.set()
    closer.join(5)
    assert not closer.is_alive()
    assert not [t for t in threading.enumerate() if t.name.startswith("test-slots")]


def test_a_thread_kept_by_a_group_commit_after_its_turn_does_not_hold_the_next_up() -> None:
    """A thread that ended its own turn is counted on to take the next one itself —
    until a group commit keeps it: then another thread takes the next turn at once."""
    committed = threading.Event()
    group: GroupCommit[int, int] = GroupCommit(
        lambda batch: (committed.wait(10) and list(batch), None)
    )
    p = Pool(turns=1, threads=2)

    def ends_then_commits(entry: Entry) -> None:
        p.pool.end_own(entry)  # the function has ended ...
        p.put("next")  # ... the next turn is ready ...
        group(1)  # ... and this thread leads a commit that takes a while

    try:
        p.put(ends_then_commits)
        wait_for(lambda: p.ran == ["ends_then_commits", "next"], timeout=5)
        assert not committed.is_set()  # started while the commit still kept the first
    finally:
        committed.set()
        p.close()
