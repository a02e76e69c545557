"""`TaskHandle[R]`: one submitted task — its id, its snapshot, its events, and its
result once it has ended, waiting on the store's wake-ups (LISTEN/NOTIFY on
PostgreSQL, the doorbell on SQLite), never on a sleep loop.

Sync and async are one implementation: the waiting logic is a generator that yields
"wait for a change after this token, at most this long" and receives the next token;
`result()` / `follow()` drive it with `wait_change` in the calling thread, and
`result_async()` / `follow_async()` with the same call in a worker thread.

The result is the JSON round-trip of what the function returned (a tuple comes back a
list, a dict's keys strings): the stored value, read from the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Generator, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tasklab.core.models import Event, TaskSnapshot
from tasklab.core.states import CancelReason, State
from tasklab.errors import TaskCancelled, TaskFailed

if TYPE_CHECKING:
    from tasklab.app import TaskApp

R = TypeVar("R")
Wait = tuple[int, float]  # (token, seconds): wait for a commit after token, at most this
POLL = 1.0  # the longest wait between two reads (a lost wake-up costs no more)


class TaskHandle(Generic[R]):
    def __init__(self, app: TaskApp, task_id: str) -> None:
        self.app = app
        self.id = task_id

    def __repr__(self) -> str:
        return f"TaskHandle({self.id!r})"

    def snapshot(self) -> TaskSnapshot:
        return self.app.query(self.id)

    def cancel(self, reason: CancelReason = CancelReason.USER) -> bool:
        """Ask it to stop (see `TaskApp.cancel`); True if the request was accepted."""
        return self.app.cancel(self.id, reason).request_accepted

    def events(self, after: int = 0, limit: int = 1000) -> list[Event]:
        return self.app.events(self.id, after, limit)

    # ---- waiting: one generator, two drivers ---------------------------------------
    def _result_steps(self, timeout: float | None) -> Generator[Wait, int, R]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            token = self.app.change_token()  # before the read: a commit after it wakes us
            snap = self.app.query(self.id)
            if snap.terminal:
                return _outcome(snap)  # type: ignore[no-any-return]
            left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"task {self.id} is {snap.state.value} after {timeout}s")
            yield token, left

    def _follow_steps(self, after: int) -> Generator[Wait | list[Event], int, None]:
        seq = after
        while True:
            token = self.app.change_token()
            batch = self.app.events(self.id, seq, 1000)
            if batch:
                seq = batch[-1].seq
                yield batch
                continue
            if self.app.query(self.id).terminal:
                # the last events were committed with the terminal state: read once more
                rest = self.app.events(self.id, seq, 1000)
                if rest:
                    seq = rest[-1].seq
                    yield rest
                    continue
                return
            yield token, POLL

    def result(self, timeout: float | None = None) -> R:
        """The stored result once it succeeded; `TaskFailed` (with the stored error),
        `TaskCancelled`, or `TimeoutError` (it goes on; ask again)."""
        steps, fresh = self._result_steps(timeout), None
        while True:
            done, step = _advance(steps, fresh)
            if done:
                return step  # type: ignore[no-any-return]
            fresh = self.app.wait_change(*step)

    async def result_async(self, timeout: float | None = None) -> R:  # noqa: ASYNC109
        """`result()` for async code (the same timeout: the wait ends with
        TimeoutError, the task goes on; an `asyncio.timeout` around it works too)."""
        steps, fresh = self._result_steps(timeout), None
        while True:
            done, step = await asyncio.to_thread(_advance, steps, fresh)
            if done:
                return step  # type: ignore[no-any-return]
            fresh = await asyncio.to_thread(self.app.wait_change, *step)

    def follow(self, after: int = 0) -> Iterator[Event]:
        """Its events from `after` on, live, until it has ended (resume with the last
        seq seen); gapless and in order, also across retries and worker crashes."""
        steps, fresh = self._follow_steps(after), None
        while True:
            done, step = _advance(steps, fresh)
            if done:
                return
            fresh = None
            if isinstance(step, list):
                yield from step
            else:
                fresh = self.app.wait_change(*step)

    async def follow_async(self, after: int = 0) -> AsyncIterator[Event]:
        steps, fresh = self._follow_steps(after), None
        while True:
            done, step = await asyncio.to_thread(_advance, steps, fresh)
            if done:
                return
            fresh = None
            if isinstance(step, list):
                for event in step:
                    yield event
            else:
                fresh = await asyncio.to_thread(self.app.wait_change, *step)


def _advance(steps: Generator[Any, int, Any], fresh: int | None) -> tuple[bool, Any]:
    """One step of a waiting generator: (True, its return value) once it is done (a
    StopIteration never crosses a thread or a future), else (False, what it yielded)."""
    try:
        return False, next(steps) if fresh is None else steps.send(fresh)
    except StopIteration as done:
        return True, done.value


def _outcome(snap: TaskSnapshot) -> Any:
    if snap.state is State.SUCCEEDED:
        return snap.result
    if snap.state is State.CANCELLED:
        reason = snap.cancel_reason.value if snap.cancel_reason else "unknown"
        raise TaskCancelled(f"task {snap.id} was cancelled ({reason})", snap)
    error = snap.error
    raise TaskFailed(
        f"task {snap.id} failed: {error.code}: {error.message}"
        if error
        else f"task {snap.id} failed",
        snap,
    )
