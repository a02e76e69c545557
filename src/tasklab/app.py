"""`TaskApp`: the registry, the store, the monitor and the runners, wired together.

This is the Python API (docs/design.md §5). Every method that changes state is one short
conditional transaction in the store; nothing here holds a transaction across user
code except `transactional=True` tasks, whose whole run is one transaction.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import itertools
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tasklab.config import Settings
from tasklab.core.context import TaskContext
from tasklab.core.jsontext import check_text
from tasklab.core.models import (
    CancelOutcome,
    Claim,
    EffectRecord,
    Event,
    NewTask,
    Outcome,
    Page,
    TaskSnapshot,
)
from tasklab.core.registry import Registry, TaskDef
from tasklab.core.states import CancelReason, State
from tasklab.errors import Cancelled, InvalidPayload, SessionLost, TasklabError
from tasklab.execution import Execution, result_outcome
from tasklab.finisher import Finisher
from tasklab.monitor import Monitor
from tasklab.retrying import retried
from tasklab.store import Store, open_store
from tasklab.store.base import PRUNED
from tasklab.tasks import stream_text as _stream_text
from tasklab.tasks import wordfreq as _wordfreq

log = logging.getLogger("tasklab.app")

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DB = "sqlite:///tasklab.db"


class TaskApp:
    """Register tasks, submit them, run them, ask what happened."""

    def __init__(
        self,
        db: str | None = None,
        *,
        settings: Settings | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        store: Store | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.db = db or os.environ.get("TASKLAB_DB") or DEFAULT_DB
        self.data_dir = data_dir if data_dir is not None else os.environ.get("TASKLAB_DATA_DIR")
        self._store: Store | None = store
        self._finisher: Finisher | None = None
        self.registry = Registry()
        self.monitor = Monitor(self)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._claim_calls = itertools.count(1)
        self.registry.add(
            TaskDef(
                "wordfreq",
                _wordfreq.wordfreq,
                check=_wordfreq.check,
                async_fn=_wordfreq.wordfreq_async,
            )
        )
        self.registry.add(
            TaskDef(
                "stream_text",
                _stream_text.stream_text,
                check=_stream_text.check,
                async_fn=_stream_text.stream_text_async,
            )
        )

    @property
    def store(self) -> Store:
        """Opened on first use, so that importing a module that defines an app (for
        `--app module:attr`) touches no database."""
        if self._store is None:
            self._store = open_store(self.db, **self._store_options())
        return self._store

    @property
    def finisher(self) -> Finisher:
        if self._finisher is None:
            self._finisher = Finisher(self.store, lost_retry_for=self.settings.lease / 2)
        return self._finisher

    def _store_options(self) -> dict[str, Any]:
        if self.db.startswith("sqlite:"):
            return {"durability": self.settings.durability}
        return {}

    # ---- registration --------------------------------------------------------------
    def task(
        self,
        name: str | None = None,
        *,
        max_attempts: int = 1,
        retry_safe: bool = False,
        retry_on: tuple[type[BaseException], ...] = (),
        transactional: bool = False,
        timeout: float | None = None,
    ) -> Callable[[F], F]:
        """Register a function as a task. Its first argument is the `TaskContext`."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

        def register(fn: F) -> F:
            is_async = inspect.iscoroutinefunction(fn)
            if transactional and is_async:
                raise ValueError("a transactional task cannot be async")
            self.registry.add(
                TaskDef(
                    name or f"{fn.__module__}.{fn.__qualname__}",
                    fn,
                    max_attempts=max_attempts,
                    retry_safe=retry_safe,
                    retry_on=tuple(retry_on),
                    transactional=transactional,
                    timeout=timeout,
                    is_async=is_async,
                )
            )
            return fn

        return register

    # ---- submitting and reading ----------------------------------------------------
    def prepare(
        self,
        task: str,
        payload: object,
        key: str | None,
        max_attempts: int | None,
        request_bound: bool = False,
    ) -> NewTask:
        spec = self.registry.get(task)
        valid, encoded = spec.validate_encoded(payload, self.data_dir)
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 200):
            raise InvalidPayload("idempotency_key must be a string of 1 to 200 characters")
        if key is not None:
            try:
                check_text(key)
            except ValueError as exc:
                raise InvalidPayload(f"idempotency_key is not text: {exc}") from None
        if max_attempts is not None and (
            not isinstance(max_attempts, int)
            or isinstance(max_attempts, bool)
            or not 1 <= max_attempts <= 1000
        ):
            raise InvalidPayload("max_attempts must be an integer from 1 to 1000")
        return NewTask(
            task=spec.name,
            payload=valid,
            max_attempts=max_attempts or spec.max_attempts,
            retry_safe=spec.retry_safe,
            idempotency_key=key,
            request_bound=request_bound,
            timeout=spec.timeout,
            payload_json=encoded,
        )

    def submit(
        self,
        task: str,
        payload: object,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
    ) -> str:
        """Queue a task; returns its id (the existing one for a known idempotency key)."""
        return self.submit_ex(task, payload, idempotency_key, max_attempts)[0].id

    def submit_ex(
        self,
        task: str,
        payload: object,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        *,
        request_bound: bool = False,
    ) -> tuple[TaskSnapshot, bool]:
        """Like `submit`, but answers the snapshot and whether it was created."""
        item = self.prepare(task, payload, idempotency_key, max_attempts, request_bound)
        return self.store.submit([item])[0]

    def submit_many(self, task: str, payloads: Iterable[object]) -> list[str]:
        """Queue many tasks of one name in one transaction (all or none)."""
        items = [self.prepare(task, p, None, None) for p in payloads]
        return [snap.id for snap, _ in self.store.submit(items)]

    def query(self, task_id: str) -> TaskSnapshot:
        return self.store.get(task_id)

    def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        return self.store.events(task_id, after, limit)

    def list(
        self, state: State | str | None = None, limit: int = 100, cursor: str | None = None
    ) -> Page:
        if state is not None and not isinstance(state, State):
            try:
                state = State(state)
            except ValueError:
                raise InvalidPayload(
                    f"unknown state {state!r}; one of {[s.value for s in State]}"
                ) from None
        return self.store.page(state, limit, cursor)

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    def cancel(self, task_id: str, reason: CancelReason = CancelReason.USER) -> CancelOutcome:
        """queued → cancelled; running → cancel_requested (the task stops at its next
        checkpoint); terminal → `request_accepted=False`."""
        out = self.store.cancel(task_id, reason)
        if out.state is State.CANCEL_REQUESTED:
            local = self.monitor.get(task_id)
            if local is not None:
                local.request_stop(reason)
        return out

    # ---- executing -----------------------------------------------------------------
    def run(self, task_id: str) -> TaskSnapshot:
        """Claim the given queued task, execute it here, settle it; returns the
        snapshot afterwards (unchanged if the task was not queued)."""
        spec = self.registry.get(self.store.get(task_id).task)
        with self.store.executor_presence():
            if spec.transactional:
                self.store.run_transactional(task_id, self.owner, self._transactional_body(spec))
            else:
                claim = self.claim_task(task_id)
                if claim is not None:
                    self.execute(claim)
        return self.store.get(task_id)

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

    def execute(self, claim: Claim) -> State | None:
        """Execute a claim in this thread with heartbeats; None if nothing committed."""
        spec = self.registry.get(claim.task)
        if spec.is_async:
            return self._execute_async(claim, spec)
        execution = Execution(self, claim, spec)
        self.monitor.add(execution)
        try:
            return execution.run()
        finally:
            self.monitor.remove(execution)

    def _execute_async(self, claim: Claim, spec: TaskDef) -> State | None:
        from tasklab.runners.aio import run_async_execution

        return asyncio.run(run_async_execution(self, claim, spec))

    def _transactional_body(self, spec: TaskDef) -> Callable[[Any, Claim], Outcome]:
        def body(port: Any, claim: Claim) -> Outcome:
            ctx = TaskContext(_TxContextPort(port, claim, self.data_dir))
            ctx._port.add_event("attempt", {"attempt": claim.attempt})
            try:
                value = spec.fn(ctx, **claim.payload)
            except Cancelled:
                return Outcome.cancelled(CancelReason.USER)
            except Exception as exc:
                from tasklab.core.policy import exception_outcome

                return exception_outcome(
                    exc,
                    retry_on=spec.retry_on,
                    attempt=claim.attempt,
                    max_attempts=claim.max_attempts,
                    cancel_requested=False,
                    backoff=self.settings.backoff,
                )
            return result_outcome(value)

        return body

    def recover_running(self) -> builtins.list[str]:
        """Exclusive recovery: raises `WorkerAlive` while another executor lives; else
        settles every running/cancel_requested task as a lease expiry would."""
        return self.store.recover_running(self.settings.backoff)

    def prune(
        self,
        older_than: timedelta | None = None,
        *,
        before: datetime | None = None,
        batch: int = 500,
        progress: Callable[[dict[str, int]], None] | None = None,
    ) -> dict[str, int]:
        """Delete terminal tasks that finished more than `older_than` ago by the
        database's clock (or before `before`), with their events, effect records,
        notifications and delivery records; rows deleted per table. Tasks whose
        notification a subscribed webhook still waits for are kept. In short
        transactions of `batch` tasks; `progress` gets the running totals after each.
        A pruned task's idempotency key is free again."""
        totals = dict.fromkeys(PRUNED, 0)
        for totals in self.prune_batches(older_than, before=before, batch=batch):
            if progress is not None:
                progress(totals)
        return totals

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

    def worker(self, runner: str = "thread", concurrency: int = 4, **options: Any) -> Any:
        """A worker that claims from the store; use as a context manager."""
        from tasklab.service.worker import Worker

        return Worker(self, runner=runner, concurrency=concurrency, **options)

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

    def __enter__(self) -> TaskApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def _no_effects() -> InvalidPayload:
    return InvalidPayload(
        "ctx.effect() is for leased tasks; a transactional task's effects are its own "
        "database writes"
    )
