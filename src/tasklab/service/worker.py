"""The worker: claims from the store into a runner, reaps expired leases, shuts down
by the worker rule of docs/design.md §4.

It never claims more than its runner's free slots — counting, with the thread runner,
the slots of tasks whose terminal write is committing: that transaction claims their
successors (claim-on-finish, see finisher.py), which take the slots over the moment the
finishing tasks return. On shutdown it stops claiming, releases claimed-but-unstarted
tasks to `queued`, lets running tasks finish within the drain deadline, then requests
cancellation of the rest (`shutdown`) and waits a short grace; a task that still runs
is left to its lease. It never turns a queued task into anything else.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from tasklab.core.models import Claim, ClaimRequest, WorkerInfo
from tasklab.core.queueing import check_queue
from tasklab.core.states import CancelReason
from tasklab.engine import as_engine
from tasklab.errors import QueueFull, SessionLost, ShuttingDown, TasklabError
from tasklab.runners import default_concurrency, make_runner
from tasklab.service.retention import Retention
from tasklab.service.scheduler import Scheduler
from tasklab.store.roles import Leases, Recovery, Signals, Workers

if TYPE_CHECKING:
    from collections.abc import Callable

    from tasklab.engine import EngineLike

log = logging.getLogger("tasklab.worker")

RATE_POLL = 0.05  # seconds between idle claims while a limited queue exists
# A thread worker's claims beyond its slots while its tasks are short (runners/thread.py):
# at concurrency 1 the drain of no-op tasks went 750 - 900/s with none to 1,100 - 1,400
# with 4 and 3,000 - 3,600/s with 32 (up to 33 terminal writes share a commit). At the
# default 32 slots, 128 against 32 took the drain from 8,552 - 9,285/s to 9,656 -
# 10,850/s (SQLite FULL, in process, alternating): the group commit that finishes the
# tasks and claims the next ones was the bound, and a larger batch spreads its fixed cost
# (the fsync, the stager's statements) over more tasks.
CLAIMS_AHEAD = 128
WORKER_ROWS_KEPT = 24 * 3600.0  # seconds a stopped or dead worker's row stays visible


class _WorkerStore(Leases, Recovery, Signals, Workers, Protocol):
    """The store roles used here: claims, the reaper and the workers table, wake-ups."""


class Worker:
    @property
    def store(self) -> _WorkerStore:
        return self.engine.store

    def __init__(
        self,
        app: EngineLike,
        *,
        runner: str = "thread",
        concurrency: int | None = None,
        backlog: int = 0,
        ahead: int | None = None,
        names: list[str] | None = None,
        webhooks: list[str] | None = None,
        pin_cpu: int | None = None,
        retain: timedelta | None = None,
        queues: list[str] | None = None,
        scheduler: bool = True,
    ) -> None:
        self.engine = engine = as_engine(app)
        if ahead and runner != "thread":
            raise ValueError(f"claims ahead are the thread runner's, not the {runner} runner's")
        if ahead and backlog:
            raise ValueError(
                "backlog and ahead are two ways to claim beyond the slots (a backlog waits "
                "behind tasks of any length, claims ahead only behind short ones): one"
            )
        self.concurrency = concurrency or default_concurrency(runner)
        self.runner = make_runner(
            runner,
            engine,
            workers=self.concurrency,
            backlog=backlog,
            pin_cpu=pin_cpu,
            ahead=(CLAIMS_AHEAD if ahead is None else ahead)
            if runner == "thread" and not backlog
            else 0,
        )
        self.pin_cpu = pin_cpu
        self.runner_name = runner
        self.id = f"{engine.owner}:{uuid.uuid4().hex[:6]}"
        wanted = names or engine.registry.names()
        specs = [engine.registry.get(n) for n in wanted]
        self.leased_names = [s.name for s in specs if not s.transactional]
        self.tx_names = [s.name for s in specs if s.transactional]
        # the names with a per-key limit: their claims take the limited path
        self.keyed = tuple(s.name for s in specs if s.concurrency_limit is not None)
        self.queues = [check_queue(q) for q in queues] if queues else None
        self.scheduler = Scheduler(engine) if scheduler else None
        self.webhooks = list(webhooks or [])
        self._stop = threading.Event()
        # held while a claim is handed to the runner and while the stop begins: a claim
        # is either started before the stop (drained, then cancelled) or given back
        self._handing_over = threading.Lock()
        self._thread: threading.Thread | None = None
        self._dispatcher: Any = None
        self.retention = Retention(engine, retain) if retain is not None else None
        self.claimed = 0
        self.drained = 0
        self.cancelled_on_shutdown = 0

    # ---- lifetime ------------------------------------------------------------------
    def start(self) -> Worker:
        self.runner.__enter__()  # takes the liveness lock for as long as we run
        info = WorkerInfo(self.engine.owner, self.runner_name, self.queues, self.concurrency)
        self.store.register_worker(self.id, info)
        if self.runner.adopts and self.leased_names:
            self.engine.finisher.refillers.append(self)
        self._thread = threading.Thread(target=self._loop, name="tasklab-claim-loop", daemon=True)
        self._thread.start()
        if self.webhooks:
            from tasklab.service.outbox import Dispatcher

            self._dispatcher = Dispatcher(self.engine, self.webhooks).start()
        if self.retention is not None:
            self.retention.start()
        if self.scheduler is not None:
            self.scheduler.start()
        return self

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, drain_timeout: float | None = None) -> dict[str, int]:
        """Graceful shutdown; returns what happened to the in-flight work."""
        drain = self.engine.settings.drain_timeout if drain_timeout is None else drain_timeout
        with self._handing_over:
            self._stop.set()
        if self in self.engine.finisher.refillers:
            self.engine.finisher.refillers.remove(self)
        self.store.wake()
        self.runner.slot_freed.set()  # a full claim loop waits on this, not the store
        if self._thread is not None:
            self._thread.join()
        # Only now do claims waiting for a turn stop waiting (given back): with the
        # claim loop still running, the slots they free would claim them again.
        self.runner.stop_starting()
        released = self.runner.cancel_unstarted()  # their callbacks release the claims
        deadline = time.monotonic() + drain
        while self.runner.in_flight() and time.monotonic() < deadline:
            time.sleep(0.01)
        still = self.runner.in_flight()
        for _fut, work in still:
            task_id = work.task_id if isinstance(work, Claim) else work
            try:
                self.engine.cancel(task_id, CancelReason.SHUTDOWN)
                self.cancelled_on_shutdown += 1
            except TasklabError:
                pass
        grace_end = time.monotonic() + self.engine.settings.shutdown_grace
        while self.runner.in_flight() and time.monotonic() < grace_end:
            time.sleep(0.01)
        left = len(self.runner.in_flight())
        if left == 0:
            self.runner.shutdown()
        else:
            # Threads cannot be killed: leave them to their leases, don't wait for them.
            self.runner.abandon()
        if self._dispatcher is not None:
            self._dispatcher.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.retention is not None:
            self.retention.stop()
        try:
            self.store.unregister_worker(self.id)
        except TasklabError:
            pass
        return {
            "released": released,
            "cancel_requested": self.cancelled_on_shutdown,
            "left_running": left,
        }

    # ---- claim-on-finish (see finisher.py) ------------------------------------------
    def refill_request(self, finishing: list[str]) -> ClaimRequest | None:
        if self._stop.is_set():
            return None
        slots = self.runner.refill_slots(finishing)
        if slots == 0:
            return None
        return ClaimRequest(
            self.leased_names,
            slots,
            self.engine.claim_owner(),
            self.engine.settings.lease,
            self.queues,
            self.keyed,
        )

    def claims_lost(self, request: ClaimRequest) -> None:
        self.engine.release_lost_claims(request.owner)

    def adopt(self, claims: list[Claim]) -> None:
        self.runner.line_up(claims)
        for claim in claims:
            try:
                self._hand_over(claim, self.runner.adopt)  # a refusal leaves the line
                self.claimed += 1
            except Exception:  # not started (stopping, or the pool is gone): give it back
                try:
                    self.store.release(claim)
                except TasklabError:
                    pass  # the lease will expire and the reaper will requeue or fail it

    def _hand_over(self, work: Claim | str, start: Callable[[Any], object]) -> None:
        """Start a claim (or a transactional task's id) unless the stop has begun. One
        made while it began (the claim loop between its check and the runner, or a
        refill committing beside a last finish) would otherwise start after the stop
        said no more would: it raises ShuttingDown, a claim out of line, and its caller
        gives it back (an id was never taken: it stays queued)."""
        with self._handing_over:
            if self._stop.is_set():
                if isinstance(work, Claim):
                    self.runner.leave_line(work.task_id)  # the runner never sees it
                raise ShuttingDown("the worker is stopping")
            start(work)

    # ---- the loop ------------------------------------------------------------------
    def _loop(self) -> None:
        if self.pin_cpu is not None:
            # the claim loop hands work to the runner's threads: on their CPU too
            from tasklab.runners.thread import pin_this_thread

            pin_this_thread(self.pin_cpu)
        store, settings = self.store, self.engine.settings
        next_reap = 0.0
        while not self._stop.is_set():
            token = store.change_token()
            self.runner.slot_freed.clear()  # before counting: a slot freed later wakes us
            free = self.runner.free_slots
            try:
                got = self._claim_some(free)
                now = time.monotonic()
                if now >= next_reap:
                    self._reap()
                    next_reap = now + settings.reap_every
                if got == 0 and not self._stop.is_set():
                    # Full: a slot freeing wakes us (nothing else can help). Empty: a
                    # commit wakes us, or the earliest delayed task becoming runnable,
                    # or the next reap.
                    wait = max(0.0, next_reap - now)
                    if free > 0:
                        delayed = store.seconds_until_runnable(self.leased_names + self.tx_names)
                        if delayed is not None:
                            wait = min(wait, delayed)
                        if store.limited_queues():  # a rate limit refills with no commit
                            wait = min(wait, RATE_POLL)
                        store.wait_change(token, min(wait, 1.0))
                    else:
                        self.runner.slot_freed.wait(min(wait, 1.0))
            except TasklabError as exc:
                log.warning("worker loop: %s", exc)
                self._stop.wait(0.2)

    def _reap(self) -> None:
        """The reaper's round, each step on its own: one that fails (a session lost,
        a statement timed out) keeps none of the others from running. Expiry — the
        step the store's truth rests on — comes right after this worker's own
        renewals; the heartbeat (alive, for people: a row whose beat is a lease old
        is marked dead) and maintenance follow."""
        store, settings = self.store, self.engine.settings
        steps: tuple[tuple[str, Callable[[], object]], ...] = (
            ("renewing waiting claims", self._renew_waiting),
            ("expiring leases", lambda: store.expire(settings.backoff)),
            (
                "heartbeat",
                lambda: store.worker_heartbeat(self.id, settings.lease, WORKER_ROWS_KEPT),
            ),
            ("maintenance", store.maintain),
        )
        for name, step in steps:
            try:
                step()
            except TasklabError as exc:
                log.warning("worker reaper, %s: %s", name, exc)

    def _renew_waiting(self) -> None:
        """Claims waiting in the backlog have not started, so the monitor does not know
        them: renew their leases here (every lease/4), or a long wait behind slow tasks
        would look like a dead executor and end a task that never ran as
        outcome_unknown. A claim whose renewal is refused is dropped unstarted."""
        for fut, work in self.runner.in_flight():
            if isinstance(work, Claim) and not fut.running() and not fut.done():
                sent = time.monotonic()
                if self.store.heartbeat(work, self.engine.settings.lease) is None:
                    fut.cancel()
                else:  # its execution's local lease deadline counts from here
                    self.engine.monitor.note_renewal(work, sent)

    def _claim_some(self, free: int) -> int:
        if free <= 0:
            return 0
        owner = self.engine.claim_owner()
        try:
            claims = self.store.claim(
                self.leased_names,
                free,
                owner,
                self.engine.settings.lease,
                queues=self.queues,
                keyed=self.keyed,
            )
        except SessionLost:
            self.engine.release_lost_claims(owner)
            raise
        self.runner.line_up(claims)
        for claim in claims:
            try:
                self._hand_over(claim, self.runner.submit_claim)
                self.claimed += 1
            except (QueueFull, ShuttingDown):  # its place is out of line already
                self.store.release(claim)
        got = len(claims)
        free -= got
        if free > 0 and self.tx_names:
            for task_id in self.store.queued_ids(self.tx_names, free, self.queues):
                try:
                    self._hand_over(task_id, self.runner.submit)
                    got += 1
                except (QueueFull, ShuttingDown):
                    break
        return got
