"""Group commit across threads: callers that arrive while a transaction is being
written share the next one.

Each commit costs a disk flush (SQLite `synchronous=FULL`: a few thousand a second) or
a round trip (PostgreSQL). The first caller leads and writes everything pending in one
transaction; the others wait on their own item, and the leader hands the lead to the
oldest waiter still pending right after its commit, so the next transaction overlaps
with publishing this one. A lone caller pays nothing extra. Commit first, publish
after: no caller hears of a write before its commit.

Used by the finisher (terminal writes, which may claim successors in the same
transaction) and by `submit` (32 request threads submitting at once write one
transaction, not 32).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")  # what a caller asks to write
R = TypeVar("R")  # its answer (an exception is raised in that caller's thread)


def _held_lock() -> Any:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Item(Generic[T]):
    request: T
    result: Any = None
    done: bool = False
    # Held until the item is done or handed the lead: a bare lock is the cheapest
    # wait-and-wake there is (an Event builds a Condition, and a lock for every wait).
    # Two wakes at most, never at once: the leader handing it the lead (while it is
    # pending, under the group's lock), then the leader of the batch that wrote it.
    gate: Any = field(default_factory=_held_lock)
    woken: bool = False

    def wait(self) -> None:
        self.gate.acquire()

    def wake(self) -> None:
        if not self.woken:
            self.woken = True
            self.gate.release()


class GroupCommit(Generic[T, R]):
    """`write(batch)` commits one batch and answers one result per request (an
    exception for a request that failed alone); `published(batch_context)` runs after
    the lead has been handed on and before the callers are answered."""

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

    def __call__(self, request: T) -> R:
        item: _Item[T] = _Item(request)
        with self._lock:
            self._pending.append(item)
            lead = not self._leading
            self._leading = True
        if not lead:
            try:
                item.wait()  # a result, or the lead handed to us
            except BaseException:  # interrupted (Ctrl-C in the main thread)
                self._withdraw(item)
                raise
        while not item.done:
            with self._lock:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
            try:
                answers, context = self._write([i.request for i in batch])
            except BaseException as exc:  # nothing was answered: every caller hears it
                answers, context = [exc] * len(batch), None
            if any(i is item for i in batch):
                with self._lock:
                    if self._pending:
                        self._pending[0].wake()  # not done: it leads next
                    else:
                        self._leading = False
            if context is not None and self._published is not None:
                self._published(context)
            for done, answer in zip(batch, answers, strict=True):
                done.result = answer
                done.done = True
                done.wake()
        if isinstance(item.result, BaseException):
            raise item.result
        answer_of_ours: R = item.result
        return answer_of_ours

    def _withdraw(self, item: _Item[T]) -> None:
        """A waiting caller that was interrupted: if its request is still pending it is
        not written; if the lead had just been handed to it, the lead goes on to the
        next pending caller, so that nobody waits for a leader that is gone."""
        with self._lock:
            if item not in self._pending:
                return  # a leader has it: it is written, its answer unheard
            self._pending.remove(item)
            if item.woken:
                if self._pending:
                    self._pending[0].wake()
                else:
                    self._leading = False
