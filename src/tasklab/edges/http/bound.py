"""Request-bound tasks (`POST /tasks/stream`): the task runs for this connection.

It is created and claimed by the request in one transaction (no worker can take it),
runs in this server process, and its events stream back. A disconnect is a cancel
request (`client_disconnected`): the task stops at its next checkpoint (an async task
at its current await), partial events are kept, and its terminal state is still
committed; a disconnect after the success commit changes nothing (a cancel of a
terminal task is not accepted). The execution is its own asyncio task, not part of
the response, so tearing the response down never skips the terminal write.

Admission comes first: a stream slot (`--max-streams`) and an execution slot
(`--concurrency` request-bound tasks at once) are taken before anything is created,
so a refused request (503) leaves no task behind. Sync task functions run on the
server's own bounded executor for request-bound work, never in the thread limiter
that every API call's database access shares: a full house of streams cannot starve
`GET /tasks/counts`, nor the cancel that a disconnect sends.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim
from tasklab.core.registry import TaskDef
from tasklab.core.states import CancelReason
from tasklab.edges.http.errors import HTTPError
from tasklab.edges.http.sse import relay, task_events
from tasklab.edges.http.streaming import EventStreamResponse

if TYPE_CHECKING:
    from tasklab.edges.http.state import ServerState, SubmitBody

BOUND_PREFIX = "tasklab-bound"


class BoundExecutor:
    """At most `slots` request-bound tasks at once; their sync functions run in
    threads of their own."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._taken = 0
        self._lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix=BOUND_PREFIX)

    def try_take(self) -> bool:
        with self._lock:
            if self._taken >= self.slots:
                return False
            self._taken += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._taken -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


async def start_bound(state: ServerState, body: SubmitBody) -> EventStreamResponse:
    app, bound = state.app, state.bound
    item = app.prepare(
        body.task,
        body.payload,
        body.idempotency_key,
        body.max_attempts,
        request_bound=True,
        options=body.options,
    )
    if not state.streams.try_acquire():
        raise HTTPError(
            503, "too_many_streams", f"{state.streams.limit} streams are open; try again later"
        )
    if not bound.try_take():
        state.streams.release()
        raise HTTPError(
            503,
            "queue_full",
            f"{bound.slots} request-bound tasks are running (--concurrency); try again later",
        )
    try:
        snap, _created, claim = await state.db(app.submit_and_claim, item)
    except BaseException:
        bound.give_back()
        state.streams.release()
        raise
    if claim is not None:
        spec = app.registry.get(claim.task)
        task = asyncio.create_task(run_bound(state, claim, spec))
        state.bound_tasks[task] = claim.task_id

        def finished(t: asyncio.Task[Any]) -> None:
            state.bound_tasks.pop(t, None)
            bound.give_back()

        task.add_done_callback(finished)
    else:  # an existing task of that key: nothing of ours runs
        bound.give_back()

    async def disconnected() -> None:
        await state.db(app.cancel, snap.id, CancelReason.CLIENT_DISCONNECTED)

    hub = state.change_hub()
    frames = relay(
        task_events(app, hub, state.db, snap.id, 0, asyncio.Event(), state.sse_heartbeat)
    )
    return EventStreamResponse(
        frames,
        state.streams,
        headers={"Tasklab-Task-Id": snap.id},
        on_disconnect=disconnected,
        slot_taken=True,
    )


async def run_bound(state: ServerState, claim: Claim, spec: TaskDef) -> Any:
    """The server holds the executor-presence lock for its whole life (see Service), so
    nothing here touches the lock — or blocks the loop on it."""
    app = state.app
    if spec.is_async or spec.async_fn is not None:
        from tasklab.runners.aio import run_async_execution

        return await run_async_execution(app.engine, claim, spec)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(state.bound.pool, app.execute, claim)
