"""The engine: the execution machinery of one process — store, registry, settings,
this process's owner, the monitor and the finisher — and the flows that claim, run and
settle tasks with them.

Runners, the worker, the outbox dispatcher and retention take an `Engine`; `TaskApp`
is the public facade over it (registration, submitting, reading). Nothing below the
facade imports it (a test pins that).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import itertools
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, Protocol

from tasklab.config import Settings
from tasklab.core.context import TaskContext
from tasklab.core.ending import AttemptFacts, call_ending, outcome_of
from tasklab.core.models import CancelOutcome, Claim, EffectRecord, NewTask, Outcome, TaskSnapshot
from tasklab.core.registry import Registry, TaskDef
from tasklab.core.schedules import ScheduleDef
from tasklab.core.states import CancelReason, State
from tasklab.core.submitting import prepare
from tasklab.core.timeline import attempt_event
from tasklab.errors import InvalidPayload, LeaseLost, SessionLost, TasklabError
from tasklab.execution import Execution
from tasklab.finisher import Finisher
from tasklab.monitor import Monitor
from tasklab.retrying import retried
from tasklab.store import Store, open_store
from tasklab.store.base import PRUNED
from tasklab.store.ids import known_id
from tasklab.submitter import Submitter

log = logging.getLogger("tasklab.app")


class Engine:
    """What executing tasks needs, and nothing of the public API."""

    def __init__(
        self,
        db: str,
        settings: Settings,
        registry: Registry,
        data_dir: str | os.PathLike[str] | None = None,
        store: Store | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.registry = registry
        self.data_dir = data_dir
        self._store: Store | None = store
        self._opening = threading.RLock()
        self._finisher: Finisher | None = None
        self._submitter: Submitter | None = None
        self.monitor = Monitor(self)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._claim_calls = itertools.count(1)
        # schedules declared in code (@app.periodic): stored by each scheduler at start
        self.periodic: dict[str, ScheduleDef] = {}

    @property
    def store(self) -> Store:
        """Opened on first use, so that importing a module that defines an app (for
        `--app module:attr`) touches no database."""
        store = self._store
        if store is None:
            # under a lock: threads that race to the first use (the servers' change hub
            # and their database threads) must open one store, not one each
            with self._opening:
                if self._store is None:
                    self._store = open_store(self.db, **self._store_options())
                store = self._store
        return store

    @property
    def finisher(self) -> Finisher:
        if self._finisher is None:
            with self._opening:  # one group commit per process, whoever comes first
                if self._finisher is None:
                    store = self.store
                    self._finisher = Finisher(store, lost_retry_for=self.settings.lease / 2)
        return self._finisher

    @property
    def submitter(self) -> Submitter:
        if self._submitter is None:
            with self._opening:
                if self._submitter is None:
                    self._submitter = Submitter(self.store)
        return self._submitter

    def _store_options(self) -> dict[str, Any]:
        if self.db.startswith("sqlite:"):
            return {"durability": self.settings.durability}
        return {}

    def cancel(self, task_id: str, reason: CancelReason = CancelReason.USER) -> CancelOutcome:
        """queued → cancelled; running → cancel_requested (the task stops at its next
        checkpoint); terminal → `request_accepted=False`."""
        out = self.store.cancel(task_id, reason)
        self._after_cancel(task_id, out, reason)
        return out

    def cancel_many(
        self, task_ids: builtins.list[str], reason: CancelReason = CancelReason.USER
    ) -> builtins.list[CancelOutcome | None]:
        """`cancel` of each, the store's part in one transaction; None: no such task."""
        outs = self.store.cancel_many(task_ids, reason)
        for task_id, out in zip(task_ids, outs, strict=True):
            if out is not None:
                self._after_cancel(task_id, out, reason)
        return outs

    def _after_cancel(self, task_id: str, out: CancelOutcome, reason: CancelReason) -> None:
        if out.state is State.CANCEL_REQUESTED:
            local = self.monitor.get(task_id)
            if local is not None:
                local.request_stop(reason)
        if out.request_accepted:  # its live children stop too (and theirs)
            for child in self.store.live_children(task_id):
                self.cancel(child, CancelReason.PARENT_CANCELLED)

    def store_schedule(self, spec: ScheduleDef) -> bool:
        """Store a schedule, keeping the progress of one stored with the same timing;
        a new one first ticks after the database's now."""
        return self.store.put_schedule(spec, spec.next_after(self.store.now()), keep=True)

    def prepare_child(self, parent_id: str, task: str, payload: object, key: str) -> NewTask:
        """A child task of `parent_id` (ctx.spawn): checked like any submit, with the
        idempotency key `<parent>:<key>` so that a re-run answers the same child."""
        item = prepare(
            self.registry, task, payload, f"{parent_id}:{key}", None, data_dir=self.data_dir
        )
        return dataclasses.replace(item, parent_id=parent_id)

    def claim_filter(self) -> tuple[builtins.list[str], tuple[str, ...]]:
        """The leased task names this process runs, and those with a per-key limit."""
        leased = [t for t in self.registry.all() if not t.transactional]
        keyed = tuple(t.name for t in leased if t.concurrency_limit is not None)
        return [t.name for t in leased], keyed

    # ---- executing -----------------------------------------------------------------
    def run(self, task_id: str, execute: Callable[[Claim], object] | None = None) -> TaskSnapshot:
        """Claim the given queued task, execute it (here, or with a runner's `execute`),
        settle it; returns the snapshot afterwards (unchanged if it was not queued)."""
        with self.store.executor_presence():
            claim = self.take(task_id)
            if claim is not None:
                (execute or self.execute)(claim)
        return self.store.get(task_id)

    def take(self, task_id: str) -> Claim | None:
        """Claim one queued task by id to run it in this process — the one "claim by id"
        of every runner. A transactional task is run here and now instead, in its one
        transaction (claim, body and settlement), and answers None like a task that
        was not claimable."""
        spec = self.registry.get(self.store.get(known_id(task_id)).task)
        if spec.transactional:
            self.store.run_transactional(task_id, self.owner, self._transactional_body(spec))
            return None
        return self.claim_task(task_id)

    def run_pending(self, limit: int | None = None) -> int:
        """Run queued tasks that are runnable now, one at a time in this thread, until
        none is left (or `limit` ran); returns how many ran. For tests: what a worker
        would do, without threads — a task's retry waits for its backoff as usual."""
        leased, keyed = self.claim_filter()
        transactional = [t.name for t in self.registry.all() if t.transactional]
        ran = 0
        with self.store.executor_presence():
            while limit is None or ran < limit:
                claims = self.store.claim(
                    leased, 1, self.claim_owner(), self.settings.lease, keyed=keyed
                )
                if claims:
                    self.execute(claims[0])
                elif ids := self.store.queued_ids(transactional, 1):
                    self.run(ids[0])
                else:
                    return ran
                ran += 1
        return ran

    # ---- claims whose answer is lost -----------------------------------------------
    def claim_owner(self) -> str:
        """The lease owner one claim call writes: this process, plus a number that finds
        exactly that call's claims again if its answer is lost with its session."""
        return f"{self.owner}#{next(self._claim_calls)}"

    def claim_task(self, task_id: str) -> Claim | None:
        """Claim one queued task by id for this process (None: not claimable). A claim
        whose answer was lost is given back before `SessionLost` reaches the caller."""
        owner = self.claim_owner()
        try:
            return self.store.claim_id(task_id, owner, self.settings.lease)
        except SessionLost:
            self.release_lost_claims(owner)
            raise

    def release_lost_claims(self, owner: str) -> None:
        """A claim call lost its session after it may have committed: its claims, if
        any, were never started. Give them back (attempt back, epoch kept) instead of
        leaving them to their leases, where a task that never started would end as one
        that died. In a thread of its own, retried while the database comes back (up
        to half a lease): the caller may be a group commit's leader."""
        threading.Thread(
            target=self._release_lost_now, args=(owner,), name="tasklab-release", daemon=True
        ).start()

    def _release_lost_now(self, owner: str) -> None:
        try:
            released = retried(
                lambda: self.store.release_owned(owner), TasklabError, self.settings.lease / 2
            )
        except TasklabError as exc:
            log.warning("claims of a lost session left to their leases: %s", exc)
            return
        if released:  # counted in the store (lost_claims_released)
            log.warning("released %d claim(s) whose commit answer was lost", len(released))

    def execute(
        self,
        claim: Claim,
        ended: Callable[[], None] | None = None,
        answered: Callable[[State | None], None] | None = None,
    ) -> State | None:
        """Execute a claim in this thread with heartbeats; None if nothing committed.
        `ended` is called once the task function has returned or raised, before its
        terminal write (a runner's turn at its gate; an async task keeps it to the end).
        With `answered` the terminal write is not waited for: this returns None once it
        is handed over, and `answered` hears the committed state (None: nothing
        committed) — from the thread that wrote it, or from this one."""
        spec = self.registry.get(claim.task)
        if spec.is_async:
            state = self._execute_async(claim, spec)
            if answered is not None:
                answered(state)
            return state
        with self.monitor.watching(Execution(self, claim, spec)) as execution:
            return execution.run(ended, answered)

    def _execute_async(self, claim: Claim, spec: TaskDef) -> State | None:
        from tasklab.runners.aio import run_async_execution

        return asyncio.run(run_async_execution(self, claim, spec))

    def _transactional_body(self, spec: TaskDef) -> Callable[[Any, Claim], Outcome]:
        def body(port: Any, claim: Claim) -> Outcome:
            ctx = TaskContext(_TxContextPort(port, claim, self.data_dir))
            ctx._port.add_event("attempt", attempt_event(claim, self.settings.lease))
            ending = call_ending(spec.fn, ctx, **claim.payload)
            facts = AttemptFacts(
                spec.retry_on, claim.attempt, claim.max_attempts, self.settings.backoff
            )
            outcome = outcome_of(ending, facts)
            if outcome is None:  # nothing to write: the transaction rolls back
                raise LeaseLost(f"task {claim.task_id}: its transactional run lost authority")
            return outcome

        return body

    def recover_running(self) -> builtins.list[str]:
        """Exclusive recovery: raises `WorkerAlive` while another executor lives; else
        settles every running/cancel_requested task as a lease expiry would."""
        return self.store.recover_running(self.settings.backoff)

    def prune_batches(
        self,
        older_than: timedelta | None = None,
        *,
        before: datetime | None = None,
        batch: int = 500,
    ) -> Iterator[dict[str, int]]:
        """`prune` one transaction at a time: the running totals after each (the
        caller may stop between them)."""
        if (older_than is None) == (before is None):
            raise InvalidPayload("prune takes one of older_than or before")
        if older_than is not None and older_than < timedelta(0):
            raise InvalidPayload("older_than must not be negative")
        if before is not None and before.tzinfo is None:
            raise InvalidPayload("before must be a timezone-aware time")
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise InvalidPayload("batch must be an integer from 1 to 10000")
        return self._prune_batches(older_than, before, batch)

    def _prune_batches(
        self, older_than: timedelta | None, before: datetime | None, batch: int
    ) -> Iterator[dict[str, int]]:
        try:
            cutoff = before if before is not None else self.store.now() - older_than  # type: ignore[operator]
        except OverflowError:  # older than the calendar: nothing is
            return
        totals = dict.fromkeys(PRUNED, 0)
        while True:
            gone = self.store.prune(cutoff, batch)
            for table, n in gone.items():
                totals[table] += n
            yield dict(totals)
            if gone["tasks"] < batch:
                return

    # ---- health --------------------------------------------------------------------
    def count(self, name: str, n: int = 1) -> None:
        try:
            self.store.bump(name, n)
        except Exception:  # noqa: S110 - a counter must never break the path it counts
            pass

    def count_stale_write(self) -> None:
        self.count("rejected_stale_writes")

    def close(self) -> None:
        """Stop the monitor and close the store: calls in flight get the finalization
        deadline to end, later ones (a task thread a worker left running) are refused
        with `StoreError`, and the task is left to its lease."""
        self.monitor.stop()
        if self._store is not None:
            self._store.close(self.settings.finalization)


class HasEngine(Protocol):
    """A `TaskApp`, as runners and services see it: something with an engine."""

    @property
    def engine(self) -> Engine: ...


EngineLike = Engine | HasEngine


def as_engine(owner: EngineLike) -> Engine:
    """The engine of a `TaskApp`, or the engine itself: runners and services are built
    from either (the public API hands them an app)."""
    engine = getattr(owner, "engine", owner)
    if not isinstance(engine, Engine):
        raise TypeError(f"expected a TaskApp or an Engine, got {type(owner).__name__}")
    return engine


class _TxContextPort:
    """The context port of a transactional run: writes go into the open transaction;
    nobody outside can see the task running, so there is no lease to renew."""

    def __init__(self, port: Any, claim: Claim, data_dir: Any) -> None:
        self._port = port
        self.task_id = claim.task_id
        self.attempt = claim.attempt
        self.connection = port.connection
        self.data_dir = data_dir

    def cancel_requested(self) -> bool:
        return False

    def wait_cancel(self, timeout: float) -> bool:
        import time

        time.sleep(timeout)
        return False

    def add_event(self, etype: str, data: Any) -> None:
        self._port.append_events([(etype, data)])

    def add_text(self, text: str) -> None:
        self._port.append_events([("chunk", {"text": text})])

    def heartbeat(self) -> None:
        return None

    def effect_get(self, key: str) -> EffectRecord:
        raise _no_effects()

    def effect_start(self, key: str) -> None:
        raise _no_effects()

    def effect_done(self, key: str, result: Any) -> None:
        raise _no_effects()

    def durable(self, op: str, **args: Any) -> Any:
        raise InvalidPayload(
            "steps, waits and spawns are for leased tasks: a transactional task runs in "
            "one transaction, which cannot wait"
        )


def _no_effects() -> InvalidPayload:
    return InvalidPayload(
        "ctx.effect() is for leased tasks; a transactional task's effects are its own "
        "database writes"
    )
