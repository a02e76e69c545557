"""Request-bound tasks (`POST /tasks/stream`): the task runs for this connection.

It is created and claimed by the request in one transaction (no worker can take it),
runs in this server process, and its events stream back. A disconnect is a cancel
request (`client_disconnected`): the task stops at its next checkpoint (an async task
at its current await), partial events are kept, and its terminal state is still
committed; a disconnect after the success commit changes nothing (a cancel of a
terminal task is not accepted). The execution is its own asyncio task, not part of
the response, so tearing the response down never skips the terminal write.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim
from tasklab.core.registry import TaskDef
from tasklab.core.states import CancelReason
from tasklab.edges.http.sse import relay, task_events
from tasklab.edges.http.streaming import EventStreamResponse

if TYPE_CHECKING:
    from tasklab.edges.http.app import ServerState, SubmitBody


async def start_bound(state: ServerState, body: SubmitBody) -> EventStreamResponse:
    app = state.app
    item = app.prepare(
        body.task, body.payload, body.idempotency_key, body.max_attempts, request_bound=True
    )
    snap, _created, claim = await state.db(
        app.store.submit_and_claim, item, app.owner, app.settings.lease
    )
    if claim is not None:
        spec = app.registry.get(claim.task)
        task = asyncio.create_task(run_bound(state, claim, spec))
        state.bound_tasks[task] = claim.task_id
        task.add_done_callback(lambda t: state.bound_tasks.pop(t, None))

    async def disconnected() -> None:
        await state.db(app.cancel, snap.id, CancelReason.CLIENT_DISCONNECTED)

    frames = relay(
        task_events(app, state.hub, state.db, snap.id, 0, asyncio.Event(), state.sse_heartbeat)
    )
    return EventStreamResponse(
        frames, state.streams, headers={"Tasklab-Task-Id": snap.id}, on_disconnect=disconnected
    )


async def run_bound(state: ServerState, claim: Claim, spec: TaskDef) -> Any:
    """The server holds the executor-presence lock for its whole life (see Service), so
    nothing here touches the lock — or blocks the loop on it."""
    app = state.app
    if spec.is_async or spec.async_fn is not None:
        from tasklab.runners.aio import run_async_execution

        return await run_async_execution(app, claim, spec)
    return await state.db(app.execute, claim)
