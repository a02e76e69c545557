"""`TaskApp`: the registry, the store, the monitor and the runners, wired together.

This is the Python API (docs/design.md §5). Every method that changes state is one short
conditional transaction in the store; nothing here holds a transaction across user
code except `transactional=True` tasks, whose whole run is one transaction.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import logging
import os
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from tasklab import tracing
from tasklab.config import Settings
from tasklab.controls import QueueControls, WaitControls
from tasklab.core.models import (
    CancelOutcome,
    Claim,
    Event,
    NewTask,
    Page,
    Submission,
    TaskSnapshot,
)
from tasklab.core.queueing import (
    DEFAULT_QUEUE,
    NO_OPTIONS,
    SubmitOptions,
    check_concurrency,
    check_priority,
    check_queue,
)
from tasklab.core.registry import Registry, TaskDef
from tasklab.core.states import CancelReason, State
from tasklab.core.submitting import prepare
from tasklab.engine import Engine
from tasklab.errors import InvalidPayload
from tasklab.finisher import Finisher
from tasklab.handles import TaskHandle
from tasklab.monitor import Monitor
from tasklab.operations import TaskOperations
from tasklab.store import Store
from tasklab.store.ids import known_id
from tasklab.tasks import register_builtins
from tasklab.typed import Register, register_with

log = logging.getLogger("tasklab.app")

DEFAULT_DB = "sqlite:///tasklab.db"


class TaskApp(QueueControls, WaitControls, TaskOperations):
    """Register tasks, submit them, run them, ask what happened."""

    def __init__(
        self,
        db: str | None = None,
        *,
        settings: Settings | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        store: Store | None = None,
    ) -> None:
        self.engine = Engine(
            db or os.environ.get("TASKLAB_DB") or DEFAULT_DB,
            settings or Settings.from_env(),
            Registry(),
            data_dir if data_dir is not None else os.environ.get("TASKLAB_DATA_DIR"),
            store,
        )
        self.registry = self.engine.registry
        register_builtins(self.registry)

    # ---- the engine's parts, for callers of the facade --------------------------------
    @property
    def db(self) -> str:
        return self.engine.db

    @property
    def settings(self) -> Settings:
        return self.engine.settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        self.engine.settings = value

    @property
    def data_dir(self) -> Any:
        return self.engine.data_dir

    @data_dir.setter
    def data_dir(self, value: Any) -> None:
        self.engine.data_dir = value

    @property
    def store(self) -> Store:
        """Opened on first use, so that importing a module that defines an app (for
        `--app module:attr`) touches no database."""
        return self.engine.store

    @property
    def finisher(self) -> Finisher:
        return self.engine.finisher

    @property
    def monitor(self) -> Monitor:
        return self.engine.monitor

    @property
    def owner(self) -> str:
        return self.engine.owner

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
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        concurrency_limit: int | None = None,
    ) -> Register:
        """Register a function as a task. Its first argument is the `TaskContext`.
        `queue` and `priority` are its defaults (a submit may override them);
        `concurrency_limit`: at most that many running at once per `concurrency_key`
        given at submit. Returns a typed `Task` (typed.py): still callable as the
        function, and `.submit(*args)` → `TaskHandle`."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        check_queue(queue)
        check_priority(priority)
        if concurrency_limit is not None:
            check_concurrency(concurrency_limit, "concurrency_limit")
            if transactional:
                raise ValueError("a transactional task cannot have a concurrency_limit")

        def register(fn: Callable[..., Any]) -> str:
            is_async = inspect.iscoroutinefunction(fn)
            if transactional and is_async:
                raise ValueError("a transactional task cannot be async")
            spec = TaskDef(
                name or f"{fn.__module__}.{fn.__qualname__}",
                fn,
                max_attempts=max_attempts,
                retry_safe=retry_safe,
                retry_on=tuple(retry_on),
                transactional=transactional,
                timeout=timeout,
                is_async=is_async,
                queue=queue,
                priority=priority,
                concurrency_limit=concurrency_limit,
            )
            self.registry.add(spec)
            return spec.name

        return register_with(register, self)

    def handle(self, task_id: str) -> TaskHandle[Any]:
        """A handle on a task submitted before (by name, by another process)."""
        return TaskHandle(self, task_id)

    # ---- submitting and reading ----------------------------------------------------
    def prepare(
        self,
        task: str,
        payload: object,
        key: str | None,
        max_attempts: int | None,
        request_bound: bool = False,
        options: SubmitOptions = NO_OPTIONS,
    ) -> NewTask:
        """Check a submit and make its `NewTask` (InvalidPayload: nothing is stored),
        with the caller's trace context when tracing is on (tracing.py)."""
        item = prepare(
            self.registry,
            task,
            payload,
            key,
            max_attempts,
            options,
            request_bound=request_bound,
            data_dir=self.data_dir,
        )
        context = tracing.current_context()
        return item if context is None else dataclasses.replace(item, trace_context=context)

    def submit(
        self,
        task: str,
        payload: object,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        *,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        queue: str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
        connection: Any = None,
    ) -> str:
        """Queue a task; returns its id (the existing one for a known idempotency key,
        or for a live task holding the same `unique_key`). `run_at` (timezone-aware)
        or `delay`: not claimed before then, by the database clock. `queue`,
        `priority` (-100..100, higher first): the task's defaults unless given.
        `connection`: your own open transaction's connection on this store's database
        (psycopg, sqlite3, or SQLAlchemy over either): the task exists if and only if
        your transaction commits; workers wake at that commit."""
        options = SubmitOptions.of(
            run_at=run_at,
            delay=delay,
            queue=queue,
            priority=priority,
            concurrency_key=concurrency_key,
            unique_key=unique_key,
        )
        submission = self._submission(
            task, payload, idempotency_key, max_attempts, options, connection
        )
        return submission.id

    def submit_ex(
        self,
        task: str,
        payload: object,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        *,
        request_bound: bool = False,
        options: SubmitOptions = NO_OPTIONS,
        connection: Any = None,
    ) -> tuple[TaskSnapshot, bool]:
        """Like `submit`, but answers the snapshot and whether it was created."""
        return self._submission(
            task, payload, idempotency_key, max_attempts, options, connection, request_bound
        ).pair()

    def _submission(
        self,
        task: str,
        payload: object,
        key: str | None,
        max_attempts: int | None,
        options: SubmitOptions,
        connection: Any,
        request_bound: bool = False,
    ) -> Submission:
        with tracing.submit_span(task):
            item = self.prepare(task, payload, key, max_attempts, request_bound, options)
            if connection is not None:
                return Submission.of(*self.store.submit_on(connection, [item])[0])
            return self.engine.submitter.submit(item)

    def submit_many(
        self,
        task: str,
        payloads: Iterable[object],
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: timedelta | float | None = None,
        connection: Any = None,
    ) -> list[str]:
        """Queue many tasks of one name in one transaction (all or none); with
        `connection`, in yours (see `submit`)."""
        options = SubmitOptions.of(queue=queue, priority=priority, delay=delay)
        with tracing.submit_span(task):
            items = [self.prepare(task, p, None, None, options=options) for p in payloads]
            if connection is not None:
                return [snap.id for snap, _ in self.store.submit_on(connection, items)]
            # the ids alone: no snapshot is made (a third of a batch's time in Python)
            return [s.id for s in self.store.submissions(items)]

    def submit_prepared(
        self, items: builtins.list[NewTask]
    ) -> builtins.list[tuple[TaskSnapshot, bool] | BaseException]:
        """Insert tasks made by `prepare`, in one transaction; each answered (an
        exception for one that failed alone: the batch was written again one by one)."""
        return self.engine.submitter.write(items)

    def submit_and_claim(self, item: NewTask) -> tuple[TaskSnapshot, bool, Claim | None]:
        """A request-bound task: created and claimed for this process in one transaction."""
        return self.store.submit_and_claim(item, self.owner, self.settings.lease)

    def query(self, task_id: str) -> TaskSnapshot:
        return self.store.get(known_id(task_id))

    def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        return self.store.events(known_id(task_id), after, limit)

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

    # ---- health, subscriptions, wake-ups: what the edges read ---------------------------
    def counters(self) -> dict[str, int]:
        """The recovery-health counters, kept in the store (every process sees the same)."""
        return self.store.counters()

    def workers(self) -> builtins.list[dict[str, Any]]:
        return self.store.workers()

    def webhooks(self) -> dict[str, int]:
        """Subscribed webhook URLs and how many notifications each has still to get."""
        return self.store.webhooks()

    def unsubscribe(self, url: str) -> bool:
        return self.store.unsubscribe(url)

    def notification_lag(self, url: str) -> float:
        return self.store.notification_lag(url)

    def change_token(self) -> int:
        """A token to wait on: `wait_change` returns once any commit came after it."""
        return self.store.change_token()

    def wait_change(self, token: int, timeout: float) -> int:
        return self.store.wait_change(token, timeout)

    def wake(self) -> None:
        self.store.wake()

    def executor_presence(self) -> AbstractContextManager[None]:
        """Count as a live executor while inside (exclusive recovery refuses then)."""
        return self.store.executor_presence()

    def cancel(self, task_id: str, reason: CancelReason = CancelReason.USER) -> CancelOutcome:
        """queued → cancelled; running → cancel_requested (the task stops at its next
        checkpoint); terminal → `request_accepted=False`."""
        return self.engine.cancel(known_id(task_id), reason)

    # ---- executing (the engine's) ------------------------------------------------------
    def run(self, task_id: str) -> TaskSnapshot:
        """Claim the given queued task, execute it here, settle it; returns the
        snapshot afterwards (unchanged if the task was not queued)."""
        return self.engine.run(task_id)

    def run_pending(self, limit: int | None = None) -> int:
        """Run the queued tasks that are runnable now, here and one at a time, until
        none is left; returns how many ran. For your tests, with
        `TaskApp("sqlite:///:memory:")` (a private store, gone at `close()`)."""
        return self.engine.run_pending(limit)

    def claim_owner(self) -> str:
        return self.engine.claim_owner()

    def claim_task(self, task_id: str) -> Claim | None:
        return self.engine.claim_task(known_id(task_id))

    def release_lost_claims(self, owner: str) -> None:
        self.engine.release_lost_claims(owner)

    def execute(self, claim: Claim) -> State | None:
        return self.engine.execute(claim)

    def recover_running(self) -> builtins.list[str]:
        """Exclusive recovery: raises `WorkerAlive` while another executor lives; else
        settles every running/cancel_requested task as a lease expiry would."""
        return self.engine.recover_running()

    def worker(self, runner: str = "thread", concurrency: int | None = None, **options: Any) -> Any:
        """A worker that claims from the store; use as a context manager."""
        from tasklab.service.worker import Worker

        return Worker(self, runner=runner, concurrency=concurrency, **options)

    def count(self, name: str, n: int = 1) -> None:
        self.engine.count(name, n)

    def close(self) -> None:
        """Stop the monitor and close the store: calls in flight get the finalization
        deadline to end, later ones (a task thread a worker left running) are refused
        with `StoreError`, and the task is left to its lease."""
        self.engine.close()

    def __enter__(self) -> TaskApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
