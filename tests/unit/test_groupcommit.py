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


def _interrupt_when_handed_the_lead(monkeypatch, request: int) -> None:
    real_wait = _Item.wait

    def wait(self: _Item[int]) -> None:
        real_wait(self)
        if self.request == request and not self.done:  # woken to lead, not written
            raise KeyboardInterrupt  # a Ctrl-C at that moment

    monkeypatch.setattr(_Item, "wait", wait)


def test_a_caller_interrupted_while_handed_the_lead_passes_it_on(monkeypatch):
    """The second caller is woken to lead and interrupted at that moment (a Ctrl-C):
    its request is withdrawn unwritten and the third caller leads instead."""
    batches: list[list[int]] = []
    group = _group(batches)
    _interrupt_when_handed_the_lead(monkeypatch, 2)
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


class _Writes:
    """A write that can be held at its start, recording each batch and whether any
    sender's callback ran before its batch's write had returned."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.writing = threading.Event()
        self.committed: set[int] = set()
        self.early: list[int] = []
        self.group: GroupCommit[int, int] = GroupCommit(self.write)

    def write(self, batch: list[int]) -> tuple[list[int | BaseException], None]:
        self.writing.set()
        self.hold.wait(10)
        self.batches.append(list(batch))
        self.committed.update(batch)
        return [ValueError(n) if n < 0 else n * 10 for n in batch], None

    def held_leader(self) -> threading.Thread:
        """A caller inside the first write, held there until `hold` is set."""
        self.hold.clear()
        leader = threading.Thread(target=lambda: self.group(1), daemon=True)
        leader.start()
        assert self.writing.wait(5)
        return leader

    def heard(self, out: dict[int, object], n: int):  # type: ignore[no-untyped-def]
        def answered(answer: object) -> None:
            if n not in self.committed:
                self.early.append(n)
            out[n] = answer

        return answered


def test_a_sender_returns_before_its_write_and_hears_it_after_the_commit():
    w = _Writes()
    leader = w.held_leader()
    out: dict[int, object] = {}
    t0 = time.monotonic()
    for n in (2, -3, 4):
        w.group.send(n, w.heard(out, n))
    assert time.monotonic() - t0 < 1.0 and out == {}  # nobody waited, nothing heard yet
    w.hold.set()
    leader.join(5)
    deadline = time.monotonic() + 5
    while len(out) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out[2] == 20 and isinstance(out[-3], ValueError) and out[4] == 40
    assert w.early == []  # every answer came after its own commit
    # the leader wrote the senders' batch too (no waiting caller was left to lead)
    assert w.batches == [[1], [2, -3, 4]]
    assert w.group._pending == [] and w.group._leading is False


def test_a_lone_sender_leads_and_nothing_sent_is_left_unwritten():
    w = _Writes()
    out: dict[int, object] = {}
    for n in range(5):
        w.group.send(n, w.heard(out, n))  # each leads its own write, nobody else being there
    assert out == {n: n * 10 for n in range(5)} and w.early == []
    assert w.group._pending == [] and w.group._leading is False


def test_the_lead_goes_to_a_waiting_caller_not_to_a_sender():
    """A caller that waits is the only kind that can be handed the lead (a sender has
    gone); the leader's own write done, the lead goes to the waiting caller."""
    w = _Writes()
    first = w.held_leader()
    out: dict[int, object] = {}
    w.group.send(2, w.heard(out, 2))
    answers: list[int] = []
    second = threading.Thread(target=lambda: answers.append(w.group(3)), daemon=True)
    second.start()
    time.sleep(0.05)
    w.writing.clear()
    w.hold.set()
    first.join(5)
    second.join(5)
    assert answers == [30] and out == {2: 20}
    assert w.batches == [[1], [2, 3]]
    assert w.group._pending == [] and w.group._leading is False


def test_a_failing_callback_costs_no_other_sender_its_answer():
    w = _Writes()
    leader = w.held_leader()
    out: dict[int, object] = {}

    def boom(answer: object) -> None:
        raise RuntimeError("a callback's bug")

    w.group.send(2, boom)
    w.group.send(3, w.heard(out, 3))
    w.hold.set()
    leader.join(5)
    assert out == {3: 30}


def test_an_interrupted_heir_with_only_senders_behind_it_leaves_them_a_leader(monkeypatch):
    """The lead is handed to a waiting caller that is interrupted at that moment, and
    only senders' requests are pending: a thread of its own writes them."""
    w = _Writes()
    _interrupt_when_handed_the_lead(monkeypatch, 2)
    first = w.held_leader()
    interrupted: list[BaseException] = []

    def heir() -> None:
        try:
            w.group(2)
        except KeyboardInterrupt as exc:
            interrupted.append(exc)

    second = threading.Thread(target=heir, daemon=True)
    second.start()
    time.sleep(0.05)
    out: dict[int, object] = {}
    w.group.send(3, w.heard(out, 3))
    w.hold.set()
    first.join(5)
    second.join(5)
    deadline = time.monotonic() + 5
    while not out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert interrupted and out == {3: 30}
    assert 2 not in [n for b in w.batches for n in b]


def test_while_a_leader_publishes_the_next_sender_writes_the_next_batch():
    """With only senders' requests pending, a leader lets the lead go before it
    publishes: the next sender to arrive writes them, overlapping that publishing."""
    batches: list[list[int]] = []
    inside, hold = threading.Event(), threading.Event()
    publishing, release = threading.Event(), threading.Event()

    def write(batch: list[int]) -> tuple[list[int | BaseException], int]:
        batches.append(list(batch))
        if batch == [1]:
            inside.set()
            hold.wait(10)
        return [n * 10 for n in batch], batch[0]

    def published(first: int) -> None:
        if first == 1:
            publishing.set()
            release.wait(10)

    group: GroupCommit[int, int] = GroupCommit(write, published)
    out: dict[int, object] = {}
    leader = threading.Thread(target=lambda: out.update({1: group(1)}), daemon=True)
    leader.start()
    assert inside.wait(5)
    group.send(2, lambda answer: out.update({2: answer}))
    hold.set()
    assert publishing.wait(5)  # the leader publishes its batch, held there
    group.send(3, lambda answer: out.update({3: answer}))  # leads: nobody else writes
    assert batches == [[1], [2, 3]] and out == {2: 20, 3: 30}
    release.set()
    leader.join(5)
    assert out[1] == 10 and group._pending == [] and group._leading is False


def _slow_group(batches: list[list[int]]) -> GroupCommit[int, int]:
    def write(batch: list[int]) -> tuple[list[int | BaseException], None]:
        batches.append(list(batch))
        time.sleep(0.1)  # every write: the next callers arrive meanwhile
        return [n * 10 for n in batch], None

    return GroupCommit(write)


def test_a_batch_s_callers_are_woken_one_after_another(monkeypatch):
    """Each waiting caller of a batch is woken by the one before it (the first by the
    leader), not all at once by the leader."""
    wakes: list[tuple[int, str]] = []
    real_wake = _Item.wake

    def wake(self: _Item[int]) -> None:
        if self.done:
            wakes.append((self.request, threading.current_thread().name))
        real_wake(self)

    monkeypatch.setattr(_Item, "wake", wake)
    batches: list[list[int]] = []
    group = _group(batches)
    names: dict[int, str] = {}

    def call(n: int) -> None:
        names[n] = threading.current_thread().name
        group(n)

    threads = [threading.Thread(target=call, args=(n,), name=f"caller-{n}") for n in range(1, 6)]
    for t in threads:
        t.start()
        time.sleep(0.002)
    for t in threads:
        t.join(10)
    assert batches == [[1], [2, 3, 4, 5]]
    # caller 2 led the second batch (its own answer it read itself)
    assert wakes == [(3, names[2]), (4, names[3]), (5, names[4])]


def test_a_caller_interrupted_after_its_turn_came_wakes_the_next(monkeypatch):
    """Woken with its answer and interrupted at that moment: the callers after it in
    its batch are still woken."""
    real_wait = _Item.wait

    def wait(self: _Item[int]) -> None:
        real_wait(self)
        if self.request == 3 and self.done:
            raise KeyboardInterrupt

    monkeypatch.setattr(_Item, "wait", wait)
    batches: list[list[int]] = []
    out = _callers(_group(batches), [1, 2, 3, 4, 5])
    assert batches == [[1], [2, 3, 4, 5]]
    assert out[:2] == [10, 20] and isinstance(out[2], KeyboardInterrupt) and out[3:] == [40, 50]


def test_a_caller_interrupted_before_its_turn_is_passed_over(monkeypatch):
    """Interrupted while its batch is being written (taken, not yet answered): whoever
    wakes it wakes the next instead, and nobody is left waiting."""
    real_wait = _Item.wait
    batches: list[list[int]] = []
    group = _slow_group(batches)

    def wait(self: _Item[int]) -> None:
        if self.request == 3:
            while self in group._pending:  # until a leader has taken it
                time.sleep(0.001)
            assert not self.done
            raise KeyboardInterrupt
        real_wait(self)

    monkeypatch.setattr(_Item, "wait", wait)
    out = _callers(group, [1, 2, 3, 4, 5])
    assert isinstance(out[2], KeyboardInterrupt)
    assert [o for i, o in enumerate(out) if i != 2] == [10, 20, 40, 50]
    assert 3 in [n for b in batches for n in b]  # written: it was taken before the interrupt


def test_a_caller_interrupted_as_it_passes_its_turn_on_still_passes_it(monkeypatch):
    """Woken with its answer and interrupted just before it wakes the next caller (a
    Ctrl-C lands between the two): the callers after it are still woken."""
    real_wake_in_turn = GroupCommit._wake_in_turn
    interrupted: list[int] = []

    def wake_in_turn(self: GroupCommit[int, int], item: _Item[int] | None) -> None:
        if item is not None and item.request == 4 and not interrupted:
            interrupted.append(4)  # in caller 3's thread: it passes the turn to 4
            raise KeyboardInterrupt
        real_wake_in_turn(self, item)

    monkeypatch.setattr(GroupCommit, "_wake_in_turn", wake_in_turn)
    batches: list[list[int]] = []
    out = _callers(_group(batches), [1, 2, 3, 4, 5])
    assert batches == [[1], [2, 3, 4, 5]] and interrupted == [4]
    assert out[:2] == [10, 20] and isinstance(out[2], KeyboardInterrupt) and out[3:] == [40, 50]
