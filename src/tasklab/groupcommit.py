"""Group commit across threads: callers that arrive while a transaction is being
written share the next one.

Each commit costs a disk flush (SQLite `synchronous=FULL`: a few thousand a second) or
a round trip (PostgreSQL). The first caller leads and writes everything pending in one
transaction; the others wait on their own item, and the leader hands the lead to the
oldest waiter still pending right after its commit, so the next transaction overlaps
with publishing this one. A lone caller pays nothing extra. Commit first, publish
after: no caller hears of a write before its commit. A batch's waiting callers are
woken in turn, each by the one before it: all at once, they would fight for the GIL
and most would sleep again straight away.

Used by the finisher (terminal writes, which may claim successors in the same
transaction) and by `submit` (32 request threads submitting at once write one
transaction, not 32).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")  # what a caller asks to write
R = TypeVar("R")  # its answer (an exception is raised in that caller's thread)


_thread = threading.local()


def when_kept(hook: Callable[[], None] | None) -> None:
    """`hook` runs in this thread whenever a group commit is about to keep it: to wait
    for a commit, or to lead one — writing others' batches for as long as that takes
    (a thread runner's pool then stops counting on it to be back for the next turn)."""
    _thread.kept_hook = hook


def _kept() -> None:
    hook = getattr(_thread, "kept_hook", None)
    if hook is not None:
        hook()


def _held_lock() -> Any:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Item(Generic[T]):
    request: T
    result: Any = None
    done: bool = False
    # A sender's callback: it does not wait, and hears its answer from the thread that
    # wrote it, after the commit (None: a caller waiting in `__call__`).
    answered: Callable[[Any], None] | None = None
    # Held until the item is done or handed the lead: a bare lock is the cheapest
    # wait-and-wake there is (an Event builds a Condition, and a lock for every wait).
    # Two wakes at most, never at once: the leader handing it the lead (while it is
    # pending, under the group's lock), then the leader of the batch that wrote it.
    gate: Any = field(default_factory=_held_lock)
    woken: bool = False
    # The next caller of its batch to wake: a batch's callers are woken one after
    # another, each by the one before, instead of all at once to fight for the GIL
    # (most of them would sleep again at once, waiting for it).
    next: _Item[T] | None = None
    gone: bool = False  # its caller was interrupted: whoever wakes it wakes its next

    def wait(self) -> None:
        self.gate.acquire()

    def wake(self) -> None:
        if not self.woken:
            self.woken = True
            self.gate.release()


class GroupCommit(Generic[T, R]):
    """`write(batch)` commits one batch and answers one result per request (an
    exception for a request that failed alone); `published(batch_context)` runs after
    the lead has been handed on and before the callers are answered.

    Two ways in: `group(request)` waits for its answer; `group.send(request, answered)`
    returns at once (or after leading, when nobody else was writing) and its callback
    hears the answer after the commit. Only waiting callers are handed the lead (a
    sender has gone); senders' requests are written by the next sender to arrive, or
    by the leader once it has published, so nothing sent is left unwritten."""

    def __init__(
        self,
        write: Callable[[list[T]], tuple[list[R | BaseException], Any]],
        published: Callable[[Any], None] | None = None,
        max_batch: int = 256,
    ) -> None:
        self._write = write
        self._published = published
        self.max_batch = max_batch
        self._pending: list[_Item[T]] = []
        self._lock = threading.Lock()
        self._leading = False
        self._chain = threading.Lock()  # a wake in turn against its caller leaving

    def __call__(self, request: T) -> R:
        item: _Item[T] = _Item(request)
        if not self._enqueue(item):
            _kept()
            try:
                item.wait()  # a result, or the lead handed to us
                # passing the turn on is inside: an interrupt landing just before it
                # must not leave the next caller waiting (its wake is idempotent)
                if item.done and item.next is not None:
                    self._wake_in_turn(item.next)
            except BaseException:  # interrupted (Ctrl-C in the main thread)
                self._leave_chain(item)
                self._withdraw(item)
                raise
        if not item.done:
            self._lead(item)
        if isinstance(item.result, BaseException):
            raise item.result
        answer_of_ours: R = item.result
        return answer_of_ours

    def send(self, request: T, answered: Callable[[R | BaseException], None]) -> None:
        """Write `request` with the next batch without waiting for it: `answered` gets
        its result (or its exception) in the writing thread once it has committed. The
        caller leads when nobody else is writing (then it returns after the writes)."""
        # a sender is never woken (nor handed the lead): no lock to hold for it
        if self._enqueue(_Item(request, answered=answered, gate=None)):
            self._lead(None)

    def _enqueue(self, item: _Item[T]) -> bool:
        """Pending from now on; True if the caller is to lead."""
        with self._lock:
            self._pending.append(item)
            lead = not self._leading
            self._leading = True
        return lead

    def _lead(self, own: _Item[T] | None) -> None:
        """Write batches until `own` is written (a sender's lead: its batch), then hand
        the lead to the oldest waiting caller. With only senders' requests pending, the
        lead is let go before publishing, so that the next sender to arrive writes the
        next batch while this thread publishes (as a waiting caller would); if none
        has come by then, this thread writes it."""
        _kept()
        while True:
            with self._lock:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
            try:
                answers, context = self._write([i.request for i in batch])
            except BaseException as exc:  # nothing was answered: every caller hears it
                answers, context = [exc] * len(batch), None
            handed: bool | None = None  # None: own is still pending, lead on
            if own is None or own.done or any(i is own for i in batch):
                with self._lock:
                    handed = self._hand_on()
            if context is not None and self._published is not None:
                self._published(context)
            waiting = [
                i for i, answer in zip(batch, answers, strict=True) if self._answer(i, answer)
            ]
            self._wake_all(waiting, own)
            if handed is None:
                continue
            if handed:
                return
            with self._lock:
                if not self._pending or self._leading:
                    return  # a sender took the lead meanwhile and writes them
                self._leading = True

    def _hand_on(self) -> bool:
        """Under the lock: the lead to the oldest waiting caller (True), or let go —
        True when nothing is pending, False while senders' requests are."""
        heir = next((i for i in self._pending if i.answered is None), None)
        if heir is not None:
            heir.wake()  # not done: it leads next
            return True
        self._leading = False
        return not self._pending

    @staticmethod
    def _answer(item: _Item[T], answer: Any) -> bool:
        """True for a waiting caller (to wake); a sender hears its answer now."""
        item.result = answer
        item.done = True
        if item.answered is None:
            return True
        try:
            item.answered(answer)
        except Exception:  # noqa: S110 - one sender's callback must not cost the others theirs
            pass
        return False

    def _wake_all(self, waiting: list[_Item[T]], own: _Item[T] | None) -> None:
        """Wake a batch's waiting callers in turn (the leader's own item is read by
        the leader itself, after it leads)."""
        waiting = [i for i in waiting if i is not own]
        for item, after in itertools.pairwise(waiting):
            item.next = after
        if waiting:
            self._wake_in_turn(waiting[0])

    def _wake_in_turn(self, item: _Item[T] | None) -> None:
        """Wake `item`; if its caller has gone, the one after it instead, and so on."""
        while item is not None:
            with self._chain:
                item.wake()
                if not item.gone:
                    return
            item = item.next

    def _leave_chain(self, item: _Item[T]) -> None:
        """An interrupted caller: if its turn to be woken came already, it wakes the
        next one itself; else whoever wakes it will (one or the other, never both)."""
        with self._chain:
            item.gone = True
            passed = item.woken and item.done
        if passed:
            self._wake_in_turn(item.next)

    def _withdraw(self, item: _Item[T]) -> None:
        """A waiting caller that was interrupted: if its request is still pending it is
        not written; if the lead had just been handed to it, the lead goes on to the
        next waiting caller, or to a thread of its own while only senders' requests
        are pending, so that nobody waits for a leader that is gone."""
        with self._lock:
            if item not in self._pending:
                return  # a leader has it: it is written, its answer unheard
            self._pending.remove(item)
            if not item.woken or self._hand_on():
                return
            self._leading = True  # the senders' requests get a leader of their own
        threading.Thread(target=self._lead, args=(None,), name="tasklab-commit").start()
