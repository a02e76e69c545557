"""What every runner shares: the workers + backlog bound, the two facts of a cancel,
and what happens to futures that never started (seed 001).

A runner runs two kinds of work: a task id (`submit`, direct use — the runner claims
it) and a claim made by a worker (`submit_claim`). A future that is cancelled before it
starts is recorded accordingly: a task id becomes `cancelled` (reason `shutdown` while
the runner closes, else `user`); a claim is released back to `queued`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim, RunnerCancelOutcome
from tasklab.core.states import CancelReason
from tasklab.engine import as_engine
from tasklab.errors import QueueFull, ShuttingDown, TasklabError, TaskNotFound

if TYPE_CHECKING:
    from tasklab.engine import EngineLike


class BaseRunner(ABC):
    kind = "runner"
    # Whether claims may be handed over for slots about to be freed (claim-on-finish):
    # only where work beyond the slots waits in a queue instead of starting at once.
    adopts = False

    def __init__(self, app: EngineLike, workers: int = 1, backlog: int = 0) -> None:
        if workers < 1 or backlog < 0:
            raise ValueError("workers must be >= 1 and backlog >= 0")
        self.engine = as_engine(app)
        self.workers = workers
        self.backlog = backlog
        self._capacity = workers + backlog
        self._taken = 0  # slots taken, of `_capacity` (under `_lock`)
        self._closing = False
        self.stopping = False  # a worker stops: nothing more starts
        self._work: dict[Future[Any], str | Claim] = {}
        self._cancel_answers: dict[Future[Any], bool] = {}
        self._lock = threading.Lock()
        self._presence: Any = None
        self._running_ids: set[str] = set()
        self._inherited = 0  # adopted claims waiting to take over a finishing task's slot
        # set when a slot frees: what a full worker's claim loop waits on (a commit
        # elsewhere cannot help it, and waking it for each one costs the tasks time)
        self.slot_freed = threading.Event()

    # ---- to be provided ------------------------------------------------------------
    @abstractmethod
    def _start_task(self, task_id: str) -> Future[Any]:
        """Provided by each implementation."""

    @abstractmethod
    def _start_claim(self, claim: Claim) -> Future[Any]:
        """Provided by each implementation."""

    @abstractmethod
    def _shutdown_executor(self) -> None:
        """Provided by each implementation."""

    @abstractmethod
    def _abandon_executor(self) -> None:
        """Provided by each implementation."""

    # ---- the interface -------------------------------------------------------------
    def submit(self, task_id: str) -> Future[Any]:
        """Run a queued task. Raises `QueueFull` (the task stays queued) when workers +
        backlog are taken, `ShuttingDown` once the runner closes."""
        return self._admit(task_id)

    def submit_claim(self, claim: Claim) -> Future[Any]:
        return self._admit(claim)

    def line_up(self, claims: list[Claim]) -> None:
        """A batch of claims is about to be submitted or adopted, in this order
        (a runner that orders their start by more than arrival takes note)."""
        return None

    def leave_line(self, task_id: str) -> None:
        """A claim lined up is not handed over after all (given back instead)."""
        return None

    def adopt(self, claim: Claim) -> Future[Any]:
        """Start a claim made for the slot of a task of ours that is finishing: it takes
        that slot over when the task's future completes (see `_done`)."""
        if not self.adopts:
            raise TypeError(f"the {self.kind} runner does not adopt claims")
        if self._closing:
            raise ShuttingDown(f"the {self.kind} runner is shutting down")
        with self._lock:
            self._inherited += 1
        return self._start(claim)

    def count_running(self, task_ids: list[str]) -> int:
        """How many of these tasks are this runner's."""
        with self._lock:
            return sum(1 for t in task_ids if t in self._running_ids)

    def refill_slots(self, finishing: list[str]) -> int:
        """How many claims to make for these finishing tasks' slots: one each of ours,
        within the room the runner has once they are gone."""
        mine = self.count_running(finishing)
        return max(0, min(mine, self.free_slots + mine))

    @property
    def free_slots(self) -> int:
        with self._lock:
            return self.workers + self.backlog - len(self._work)

    def _admit(self, work: str | Claim) -> Future[Any]:
        if self._closing:
            raise ShuttingDown(f"the {self.kind} runner is shutting down")
        with self._lock:
            full = self._taken >= self._capacity
            if not full:
                self._taken += 1
        if full:
            raise QueueFull(
                f"{self.kind} queue is full: {self.workers} workers and {self.backlog} "
                "backlog slots are taken"
            )
        return self._start(work)

    def _start(self, work: str | Claim) -> Future[Any]:
        try:
            fut = self._start_task(work) if isinstance(work, str) else self._start_claim(work)
        except BaseException:
            self._free_slot()
            raise
        with self._lock:
            self._work[fut] = work
            self._running_ids.add(work.task_id if isinstance(work, Claim) else work)
        fut.add_done_callback(self._done)
        return fut

    def _free_slot(self) -> None:
        with self._lock:
            inherited = self._inherited > 0
            if inherited:
                self._inherited -= 1
            else:
                self._taken -= 1
        # a free slot: a waiting claim loop may claim now (set already, it will count
        # this slot: the loop clears the event before it counts)
        if not inherited and not self.slot_freed.is_set():
            self.slot_freed.set()

    def _done(self, fut: Future[Any]) -> None:
        with self._lock:
            work = self._work.pop(fut, None)
            if work is not None:
                self._running_ids.discard(work.task_id if isinstance(work, Claim) else work)
        self._free_slot()
        if work is None or not fut.cancelled():
            return
        if isinstance(work, Claim):
            try:
                self.engine.store.release(work)
            except TasklabError:
                pass  # the lease will expire and the reaper will requeue or fail it
            return
        reason = CancelReason.SHUTDOWN if self._closing else CancelReason.USER
        try:
            accepted = self.engine.cancel(work, reason).request_accepted
        except TaskNotFound:
            accepted = False
        with self._lock:
            self._cancel_answers[fut] = accepted

    def cancel(self, fut: Future[Any]) -> RunnerCancelOutcome:
        """Two facts, never one boolean: did the future leave the queue, and did the
        application record the request. Neither means the work has stopped."""
        with self._lock:
            work = self._work.get(fut)
        future_cancelled = fut.cancel()
        if future_cancelled:
            with self._lock:
                accepted = self._cancel_answers.pop(fut, False)
            return RunnerCancelOutcome(True, accepted)
        task_id = work.task_id if isinstance(work, Claim) else work
        if task_id is None:  # already finished and forgotten
            return RunnerCancelOutcome(False, False)
        return RunnerCancelOutcome(False, self.engine.cancel(task_id).request_accepted)

    def stop_starting(self) -> None:
        """A worker stops: work not yet started is not started from now on."""
        self.stopping = True

    def cancel_unstarted(self) -> int:
        """Cancel every future that has not started; returns how many. From now on
        claims waiting for a turn (a worker's thread runner) are given back too."""
        self.stop_starting()
        with self._lock:
            pending = list(self._work)
        return sum(1 for f in pending if f.cancel())

    def in_flight(self) -> list[tuple[Future[Any], str | Claim]]:
        with self._lock:
            return list(self._work.items())

    # ---- lifetime ------------------------------------------------------------------
    def __enter__(self) -> BaseRunner:
        self._presence = self.engine.store.executor_presence()
        self._presence.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def abandon(self) -> None:
        """Close without waiting for tasks that will not stop; they keep running until
        they return and their leases decide what the store says."""
        self._closing = True
        try:
            self._abandon_executor()
        finally:
            self._leave()

    def shutdown(self) -> None:
        """`shutdown(wait=True, cancel_futures=True)`: unstarted futures are cancelled
        (and recorded), running ones finish their current unit of work."""
        self._closing = True
        try:
            self._shutdown_executor()
        finally:
            self._leave()

    def _leave(self) -> None:
        if self._presence is not None:
            self._presence.__exit__(None, None, None)
            self._presence = None
