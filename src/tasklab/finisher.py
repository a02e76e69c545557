"""Group commit of terminal writes, and claim-on-finish.

Each commit costs a disk flush (SQLite `synchronous=FULL`: a few thousand a second).
When many tasks end at once, their terminal writes share one transaction: the first
caller leads and commits everything pending; the others wait on their own item, and
the leader hands the lead to the oldest waiter still pending. A lone task pays nothing
extra. Commit first, publish after: nobody learns a state before its commit.

A worker may register as a refiller: the same transaction then claims the next tasks
for the slots these executions are about to free, and the worker adopts them before
the finishing threads are released (one commit per cycle instead of a terminal commit
and a claim commit, and no claim-loop wake-up in between).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from tasklab._types import PendingEvent
from tasklab.core.models import Claim, ClaimRequest, Outcome
from tasklab.core.states import State
from tasklab.errors import SessionLost
from tasklab.retrying import retried
from tasklab.store.roles import Leases


class Refiller(Protocol):
    def refill_request(self, finishing: list[str]) -> ClaimRequest | None:
        """What to claim for the slots of these finishing tasks (None: nothing)."""

    def adopt(self, claims: list[Claim]) -> None:
        """Start claims made for slots that are about to be freed."""

    def claims_lost(self, request: ClaimRequest) -> None:
        """The transaction carrying this request lost its session: it may have
        committed claims nobody will start; give them back."""


def _held_lock() -> Any:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Item:
    claim: Claim
    outcome: Outcome
    events: list[PendingEvent]
    result: State | BaseException | None = None
    done: bool = False
    # Held until the item is done or handed the lead: a bare lock is the cheapest
    # wait-and-wake there is (an Event builds a Condition, and a lock for every wait).
    # Two wakes at most, never at once: the leader handing it the lead (while it is
    # pending, under the finisher's lock), then the leader of the batch that wrote it.
    gate: Any = field(default_factory=_held_lock)
    woken: bool = False

    def wait(self) -> None:
        self.gate.acquire()

    def wake(self) -> None:
        if not self.woken:
            self.woken = True
            self.gate.release()


class Finisher:
    def __init__(self, store: Leases, max_batch: int = 256, lost_retry_for: float = 5.0) -> None:
        self.store = store
        self.max_batch = max_batch
        # how long a write whose session broke is tried again on new ones (a server
        # restart takes seconds; past the lease the fence refuses it anyway)
        self.lost_retry_for = lost_retry_for
        self.refillers: list[Refiller] = []
        self._pending: list[_Item] = []
        self._lock = threading.Lock()
        self._leading = False

    def finish(self, claim: Claim, outcome: Outcome, events: list[PendingEvent]) -> State:
        """Like `store.finish`: the committed state, or LeaseLost / StoreError."""
        item = _Item(claim, outcome, events)
        with self._lock:
            self._pending.append(item)
            lead = not self._leading
            self._leading = True
        if not lead:
            item.wait()  # a result, or the lead handed to us
        while not item.done:
            with self._lock:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
            refiller, results, claims = self._write(batch)
            if any(i is item for i in batch):
                # Hand the lead on right after the commit: the next transaction overlaps
                # with publishing this one.
                with self._lock:
                    if self._pending:
                        self._pending[0].wake()  # not done: it leads next
                    else:
                        self._leading = False
            if claims and refiller is not None:
                try:
                    refiller.adopt(claims)  # before the finishing threads free their slots
                except Exception:  # noqa: S110 - unstarted claims are left to their leases
                    pass
            for done, result in zip(batch, results, strict=True):
                done.result = result
                done.done = True
                done.wake()
        if isinstance(item.result, BaseException):
            raise item.result
        assert item.result is not None
        return item.result

    def _write(
        self, batch: list[_Item]
    ) -> tuple[Refiller | None, list[State | BaseException], list[Claim]]:
        try:
            refiller, request = self._refill([i.claim.task_id for i in batch])
        except Exception:  # a refill is an optimisation: the terminal writes go on
            refiller, request = None, None
        try:
            states, claims = self.store.finish_and_claim(
                [(i.claim, i.outcome, i.events) for i in batch], request
            )
            return refiller, list(states), claims
        except Exception as exc:
            lost = isinstance(exc, SessionLost)
            if lost and refiller is not None and request is not None:
                refiller.claims_lost(request)
            if len(batch) == 1 and not lost:
                return refiller, [exc], []
        # One bad write must not fail the tasks that happened to share its commit: each
        # on its own. A lost session may have committed or not: each again on a new one
        # (a write that did commit is then refused by its fence, and the store holds it).
        return refiller, [self._write_alone(i) for i in batch], []

    def _write_alone(self, item: _Item) -> State | BaseException:
        try:
            write = [(item.claim, item.outcome, item.events)]
            states, _ = retried(
                lambda: self.store.finish_and_claim(write, None), SessionLost, self.lost_retry_for
            )
            return states[0]
        except Exception as exc:
            return exc

    def _refill(self, finishing: list[str]) -> tuple[Refiller | None, ClaimRequest | None]:
        for refiller in list(self.refillers):
            request = refiller.refill_request(finishing)
            if request is not None:
                return refiller, request
        return None, None
