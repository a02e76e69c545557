"""`AsyncTaskRunner`: `async def` tasks on an event loop of the runner's own thread.

Cancellation is `Task.cancel()`: the task sees `CancelledError` at its current await,
and the outcome is `cancelled` — never `failed`. The terminal write runs in a thread
(sync database calls never run on the loop), under `asyncio.shield` with a deadline, so
a second cancellation cannot interrupt it; if it fails or times out, the task is left
live for its lease to expire and recovery to settle — never a fake state. The database
timeouts (SQLite busy timeout, PostgreSQL statement timeout) are shorter than that
deadline because a sync call in a thread cannot be interrupted.

Sync task functions on this runner run in a worker thread and stop at checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from tasklab.core.context import TaskContext
from tasklab.core.ending import Ending, outcome_of
from tasklab.core.models import Claim, Outcome
from tasklab.core.registry import TaskDef
from tasklab.core.states import State
from tasklab.errors import Cancelled
from tasklab.execution import Execution
from tasklab.runners.async_context import AsyncTaskContext
from tasklab.runners.base import BaseRunner

if TYPE_CHECKING:
    from tasklab.engine import Engine, EngineLike

T = TypeVar("T")
LOOP_THREAD = "tasklab-async-loop"


async def run_async_execution(
    engine: Engine, claim: Claim, spec: TaskDef, db: ThreadPoolExecutor | None = None
) -> State | None:
    """Execute one claim of an async task on the running loop."""
    loop = asyncio.get_running_loop()

    def to_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return loop.run_in_executor(db, fn, *args)

    ex = Execution(engine, claim, spec)
    ex.inline_flush = False
    task = asyncio.current_task()
    assert task is not None

    def cancel_task() -> None:
        loop.call_soon_threadsafe(task.cancel)

    ex.stop_hooks.append(cancel_task)
    with engine.monitor.watching(ex):
        try:
            fn = spec.async_fn or spec.fn
            value = await fn(AsyncTaskContext(TaskContext(ex), to_thread, ex), **claim.payload)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError | Cancelled):
                if not ex.cancel_flag.is_set():
                    raise  # not ours (the runner's loop is closing): leave it to the lease
                while task.cancelling():  # ours, handled: let later awaits (and timeouts) be
                    task.uncancel()
                exc = Cancelled()
            ending = Ending.raised(exc)
        else:
            ending = Ending.returned(value)
        outcome = outcome_of(ending, ex.facts())
        if outcome is None:
            return None
        return await finalize(ex, outcome, to_thread, engine.settings.finalization)


async def finalize(
    ex: Execution, outcome: Outcome, to_thread: Callable[..., Any], deadline: float
) -> State | None:
    """The terminal write: in a thread, shielded from a second cancellation, bounded.

    `asyncio.shield` keeps the inner write running if we are cancelled again; the
    uncancel() dance lets this coroutine wait for it anyway, up to the deadline.
    """
    write = asyncio.ensure_future(to_thread(ex.settle, outcome))
    end = time.monotonic() + deadline
    while True:
        try:
            state: State | None = await asyncio.wait_for(
                asyncio.shield(write), max(0.0, end - time.monotonic())
            )
            return state
        except TimeoutError:
            ex.lost = True  # stop heartbeats: the lease will expire, recovery decides
            # counted from a thread, not awaited: the database may be what is stuck
            to_thread(ex.engine.count, "terminal_write_failures")
            return None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if time.monotonic() >= end:
                return None


class AsyncTaskRunner(BaseRunner):
    """Bounded: `workers` tasks run at once, `backlog` more may wait for a slot."""

    kind = "async"

    def __init__(self, app: EngineLike, workers: int = 1, backlog: int = 0) -> None:
        super().__init__(app, workers, backlog)
        self._db = ThreadPoolExecutor(
            max_workers=workers + 2, thread_name_prefix="tasklab-async-db"
        )
        self._loop = asyncio.new_event_loop()
        self._slots_async: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.max_loop_lag = 0.0
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(ready,), name=LOOP_THREAD, daemon=True
        )
        self._thread.start()
        ready.wait()

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._slots_async = asyncio.Semaphore(self.workers)
        self._loop.call_soon(ready.set)
        self._lag_task = self._loop.create_task(self._watch_lag())
        self._loop.run_forever()
        self._loop.close()

    async def _watch_lag(self) -> None:
        """Measures how long the loop was blocked (tests assert it stays small)."""
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(0.01)
            self.max_loop_lag = max(self.max_loop_lag, time.monotonic() - t0 - 0.01)

    def _start_task(self, task_id: str) -> Future[Any]:
        return self._schedule(self._run_task_id, task_id)

    def _start_claim(self, claim: Claim) -> Future[Any]:
        return self._schedule(self._run_claim, claim)

    def _schedule(self, body: Callable[[Any], Any], work: Any) -> Future[Any]:
        fut: Future[Any] = Future()

        async def guarded() -> None:
            assert self._slots_async is not None
            async with self._slots_async:
                # Only now is the work started; until here fut.cancel() removes it.
                if not fut.set_running_or_notify_cancel():
                    return
                try:
                    fut.set_result(await body(work))
                except BaseException as exc:
                    fut.set_exception(exc)
                    if not isinstance(exc, Exception | asyncio.CancelledError):
                        raise

        def create() -> None:
            task = self._loop.create_task(guarded())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self._loop.call_soon_threadsafe(create)
        return fut

    async def _db_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._loop.run_in_executor(self._db, fn, *args)

    async def _run_task_id(self, task_id: str) -> Any:
        claim = await self._db_call(self.engine.take, task_id)
        if claim is not None:
            await self._run_claim(claim)
        return await self._db_call(self.engine.store.get, task_id)

    async def _run_claim(self, claim: Claim) -> Any:
        spec = self.engine.registry.get(claim.task)
        if not (spec.is_async or spec.async_fn):
            return await self._db_call(self.engine.execute, claim)
        return await run_async_execution(self.engine, claim, spec, self._db)

    def _stop_loop(self, cancel_running: bool, timeout: float | None) -> None:
        async def close() -> None:
            self._lag_task.cancel()
            if cancel_running:
                for t in list(self._tasks):
                    t.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._loop.is_running():
            closing = asyncio.run_coroutine_threadsafe(close(), self._loop)
            with contextlib.suppress(TimeoutError):
                # a task that never awaits holds the loop: past the deadline it is
                # left to its lease (the loop thread is a daemon)
                closing.result(timeout)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10 if timeout is None else timeout)
        # sync tasks of this runner run in these threads: wait only when not abandoning
        self._db.shutdown(wait=timeout is None)

    def _shutdown_executor(self) -> None:
        self.cancel_unstarted()
        self._stop_loop(cancel_running=False, timeout=None)

    def _abandon_executor(self) -> None:
        """Cancel the running tasks (their cancelled outcome is written, shielded and
        bounded by the finalization deadline); what does not end by then is left."""
        self.cancel_unstarted()
        self._stop_loop(cancel_running=True, timeout=self.engine.settings.finalization + 1)

    def __enter__(self) -> AsyncTaskRunner:
        super().__enter__()
        return self


__all__ = ["AsyncTaskContext", "AsyncTaskRunner", "TaskContext", "run_async_execution"]
