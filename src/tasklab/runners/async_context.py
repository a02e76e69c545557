"""`AsyncTaskContext`: the context of an `async def` task — `TaskContext`'s methods as
coroutines. The logic is `TaskContext`'s (one implementation); this adapter only
decides what may not block the event loop: database calls go through `to_thread`, and
a pending `Task.cancel()` lands at every checkpoint's real await.

The same adapter serves an async task on the asyncio runner (its execution's
database calls in the runner's bounded thread pool) and in a process child (its calls
go over the pipe to the parent)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from tasklab.core.context import Effect, TaskContext
from tasklab.core.models import JSON

T = TypeVar("T")
ToThread = Callable[..., Awaitable[Any]]


class Flusher(Protocol):
    """An execution that buffers events: flushed off the loop when its buffer is full."""

    @property
    def flush_needed(self) -> bool: ...
    def flush(self) -> None: ...


async def inline(fn: Callable[..., T], *args: Any) -> T:
    """A `to_thread` for ports whose calls are short and need no thread (a child's
    pipe)."""
    return fn(*args)


class AsyncTaskContext:
    def __init__(
        self, ctx: TaskContext, to_thread: ToThread = inline, flusher: Flusher | None = None
    ) -> None:
        self._ctx = ctx
        self._to_thread = to_thread
        self._flusher = flusher

    @property
    def task_id(self) -> str:
        return self._ctx.task_id

    @property
    def attempt(self) -> int:
        return self._ctx.attempt

    @property
    def data_dir(self) -> Any:
        return self._ctx.data_dir

    @property
    def cancel_requested(self) -> bool:
        return self._ctx.cancel_requested

    async def checkpoint(self) -> None:
        await asyncio.sleep(0)  # a real await: a pending Task.cancel() lands here
        self._ctx.checkpoint()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        await self.checkpoint()

    async def emit(self, data: JSON) -> None:
        self._ctx.emit(data)
        await self._flush_if_full()

    async def stream(self, text: str) -> None:
        self._ctx.stream(text)
        await self._flush_if_full()

    async def heartbeat(self) -> None:
        await self._to_thread(self._ctx.heartbeat)

    @contextlib.asynccontextmanager
    async def effect(self, key: str) -> AsyncIterator[Effect]:
        handle = await self._to_thread(self._ctx.effect_open, key)
        yield handle
        await self._to_thread(self._ctx.effect_close, handle)

    # ---- durable functions (core/durable.py): the same logic, database calls off the loop
    async def step(
        self, name: str, fn: Callable[..., Any], /, *args: Any, retry_safe: bool = False
    ) -> Any:
        """`TaskContext.step`; `fn` may be a coroutine function."""
        ctx = self._ctx
        key = ctx._step_key(name)
        record = await self._to_thread(ctx._port.effect_get, key)
        if record.status == "done":
            return record.result
        if record.status == "started" and not retry_safe:
            await self._to_thread(ctx.step, name, fn, *args)  # raises StepUnknown
        await self._to_thread(ctx._port.effect_start, key)
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
        return await self._to_thread(ctx.step_done, key, value)

    async def sleep_until(self, at: datetime) -> None:
        await self._to_thread(self._ctx.sleep_until, at)

    async def sleep_for(self, delta: timedelta | float) -> None:
        await self._to_thread(self._ctx.sleep_for, delta)

    async def wait_signal(
        self,
        name: str,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 - the wait's, durable
    ) -> JSON:
        return await self._to_thread(self._ctx.wait_signal, name, timeout)

    async def join(
        self,
        child_ids: list[str],
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 - the wait's, durable
    ) -> list[dict[str, JSON]]:
        snaps: list[dict[str, JSON]] = await self._to_thread(self._ctx.join, child_ids, timeout)
        return snaps

    async def spawn(self, task: str, payload: dict[str, JSON], key: str) -> str:
        child: str = await self._to_thread(self._ctx.spawn, task, payload, key)
        return child

    async def _flush_if_full(self) -> None:
        if self._flusher is not None and self._flusher.flush_needed:
            await self._to_thread(self._flusher.flush)
