"""Server-Sent Events: replay after `Last-Event-ID`, then live, then `end`.

The `end` event carries the committed terminal snapshot and is sent only after that
commit: the stream reads the task's state *before* its events, so when it sees a
terminal state, every event up to it is already stored and is sent first. Every
generator in the chain closes its upstream with `aclosing`; a disconnect or a server
shutdown ends the stream at once (the client reconnects and resumes).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing

from tasklab._types import ToThread
from tasklab.app import TaskApp
from tasklab.core.models import Event, TaskSnapshot
from tasklab.edges.hub import ChangeHub


def format_event(event: Event) -> bytes:
    data = json.dumps(event.to_json(), separators=(",", ":"))
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()


def format_end(snapshot: TaskSnapshot) -> bytes:
    return f"event: end\ndata: {json.dumps(snapshot.to_json())}\n\n".encode()


HEARTBEAT = b": keep-alive\n\n"


async def task_events(
    app: TaskApp,
    hub: ChangeHub,
    to_thread: ToThread,
    task_id: str,
    after: int,
    closing: asyncio.Event,
    heartbeat: float = 15.0,
    page: int = 500,
) -> AsyncIterator[bytes]:
    """The wire frames of one task's stream, from `after` on."""
    last = after
    while True:
        changed = hub.current()
        snap: TaskSnapshot = await to_thread(app.query, task_id)
        events: list[Event] = await to_thread(app.events, task_id, last, page)
        if events:
            # one write per page: fewer sends, and the disconnect listener gets a turn
            yield b"".join(format_event(ev) for ev in events)
            last = events[-1].seq
        if len(events) == page:
            continue  # more to replay before waiting
        if snap.terminal:
            yield format_end(snap)
            return
        if closing.is_set():
            return  # server shutdown: end cleanly, the client resumes elsewhere/later
        waiter = asyncio.ensure_future(changed.wait())
        stopper = asyncio.ensure_future(closing.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, stopper}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waiter.cancel()
            stopper.cancel()
        if not done:
            yield HEARTBEAT


async def relay(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Pass frames on; closing this closes the source first (seed 003 §2)."""
    async with aclosing(source) as frames:  # type: ignore[type-var]
        async for frame in frames:
            yield frame
