"""Group commit of terminal writes, and claim-on-finish.

When many tasks end at once, their terminal writes share one transaction
(groupcommit.py): a lone task pays nothing extra, and nobody learns a state before its
commit. `finish` waits for its commit; `finish_later` hands the write over and hears
of it after the commit.

A worker may register as a refiller: the same transaction then claims the next tasks
for the slots these executions are about to free, and the worker adopts them before
the finishing threads are released (one commit per cycle instead of a terminal commit
and a claim commit, and no claim-loop wake-up in between).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tasklab._types import PendingEvent
from tasklab.core.models import Claim, ClaimRequest, Outcome
from tasklab.core.states import State
from tasklab.errors import SessionLost
from tasklab.groupcommit import GroupCommit
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


_Write = tuple[Claim, Outcome, list[PendingEvent]]


class Finisher:
    def __init__(self, store: Leases, max_batch: int = 256, lost_retry_for: float = 5.0) -> None:
        self.store = store
        # how long a write whose session broke is tried again on new ones (a server
        # restart takes seconds; past the lease the fence refuses it anyway)
        self.lost_retry_for = lost_retry_for
        self.refillers: list[Refiller] = []
        self._group: GroupCommit[_Write, State] = GroupCommit(self._write, self._adopt, max_batch)

    def finish(self, claim: Claim, outcome: Outcome, events: list[PendingEvent]) -> State:
        """Like `store.finish`: the committed state, or LeaseLost / StoreError."""
        return self._group((claim, outcome, events))

    def finish_later(
        self,
        claim: Claim,
        outcome: Outcome,
        events: list[PendingEvent],
        answered: Callable[[State | BaseException], None],
    ) -> None:
        """`finish` without waiting: the write commits with the next batch and
        `answered` hears the committed state (or LeaseLost / StoreError) in the thread
        that wrote it, after the commit. A thread runner's slot goes on to its next
        task meanwhile, instead of sleeping until the commit and being woken."""
        self._group.send((claim, outcome, events), answered)

    @staticmethod
    def _adopt(made: tuple[Refiller, list[Claim]]) -> None:
        refiller, claims = made
        try:
            refiller.adopt(claims)  # before the finishing threads free their slots
        except Exception:  # noqa: S110 - unstarted claims are left to their leases
            pass

    def _write(
        self, batch: list[_Write]
    ) -> tuple[list[State | BaseException], tuple[Refiller, list[Claim]] | None]:
        try:
            refiller, request = self._refill([claim.task_id for claim, _, _ in batch])
        except Exception:  # a refill is an optimisation: the terminal writes go on
            refiller, request = None, None
        try:
            states, claims = self.store.finish_and_claim(batch, request)
            made = (refiller, claims) if claims and refiller is not None else None
            return list(states), made
        except Exception as exc:
            lost = isinstance(exc, SessionLost)
            if lost and refiller is not None and request is not None:
                refiller.claims_lost(request)
            if len(batch) == 1 and not lost:
                return [exc], None
        # One bad write must not fail the tasks that happened to share its commit: each
        # on its own. A lost session may have committed or not: each again on a new one
        # (a write that did commit is then refused by its fence, and the store holds it).
        return [self._write_alone(w) for w in batch], None

    def _write_alone(self, write: _Write) -> State | BaseException:
        try:
            states, _ = retried(
                lambda: self.store.finish_and_claim([write], None),
                SessionLost,
                self.lost_retry_for,
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
