"""The SSE rows of docs/design.md §6 (seed 003 §9), against a real store."""

from __future__ import annotations

import asyncio

from tasklab import State
from tasklab.core.states import CancelReason
from tasklab.edges.http.sse import relay, task_events
from tasklab.edges.http.streaming import EventStreamResponse, StreamLimiter
from tasklab.edges.hub import ChangeHub


async def db(fn, *args):  # type: ignore[no-untyped-def]
    return await asyncio.to_thread(fn, *args)


def test_aclose_right_after_the_first_chunk_closes_upstream_before_returning():
    closed: list[str] = []

    async def upstream():  # type: ignore[no-untyped-def]
        try:
            yield b"first chunk"
            await asyncio.Event().wait()
        finally:
            closed.append("upstream closed")

    async def check() -> None:
        response = relay(upstream())
        assert await anext(response) == b"first chunk"
        await response.aclose()
        assert closed == ["upstream closed"]  # not at some later GC

    asyncio.run(check())


def test_aclose_of_a_real_task_stream_closes_its_store_reader(app):
    tid = app.submit("t.echo", {"value": 1})
    app.run(tid)

    async def check():  # type: ignore[no-untyped-def]
        hub = ChangeHub(app.store, asyncio.get_running_loop())
        inner = task_events(app, hub, db, tid, 0, asyncio.Event())
        outer = relay(inner)
        first = await anext(outer)
        await outer.aclose()
        hub.close()
        return first, inner.ag_frame

    first, frame = asyncio.run(check())
    assert first.startswith(b"id: 1\nevent: attempt")
    assert frame is None  # the upstream generator is finished, not suspended


def test_cancel_while_awaiting_upstream_propagates_after_cleanup():
    closed: list[str] = []

    async def upstream():  # type: ignore[no-untyped-def]
        try:
            yield b"first"
            await asyncio.Event().wait()
            yield b"never"
        finally:
            closed.append("upstream closed")

    async def consume(out: list[bytes]) -> None:
        async for frame in relay(upstream()):
            out.append(frame)

    async def check() -> bool:
        out: list[bytes] = []
        task = asyncio.create_task(consume(out))
        while not out:
            await asyncio.sleep(0.001)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return task.cancelled()
        return False

    assert asyncio.run(check()) is True
    assert closed == ["upstream closed"]


def _scope() -> dict:
    return {"type": "http", "method": "GET", "path": "/", "headers": []}


def test_end_send_failing_after_the_commit_leaves_the_committed_result(app, store_url):
    tid = app.submit("t.echo", {"value": {"answer": 42}})
    app.run(tid)  # committed before anything is sent

    async def check() -> bool:
        hub = ChangeHub(app.store, asyncio.get_running_loop())
        disconnected = asyncio.Event()

        async def receive() -> dict:
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if b"event: end" in message.get("body", b""):
                raise OSError("connection reset while sending end")

        resp = EventStreamResponse(
            relay(task_events(app, hub, db, tid, 0, asyncio.Event())), StreamLimiter(10)
        )
        await resp(_scope(), receive, send)
        hub.close()
        return resp.disconnected

    assert asyncio.run(check()) is True
    from tests.conftest import make_app

    fresh = make_app(store_url)  # a new GET, from a new connection
    snap = fresh.query(tid)
    assert snap.state is State.SUCCEEDED and snap.result == {"answer": 42}
    fresh.close()


def test_cleanup_after_success_never_turns_succeeded_into_cancelled(app):
    tid = app.submit("t.echo", {"value": 1})
    app.run(tid)
    answers: list[bool] = []

    async def check() -> None:
        hub = ChangeHub(app.store, asyncio.get_running_loop())

        async def receive() -> dict:
            await asyncio.sleep(0.05)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            await asyncio.sleep(0.02)

        async def on_disconnect() -> None:
            out = await db(app.cancel, tid, CancelReason.CLIENT_DISCONNECTED)
            answers.append(out.request_accepted)

        resp = EventStreamResponse(
            relay(task_events(app, hub, db, tid, 0, asyncio.Event())),
            StreamLimiter(10),
            on_disconnect=on_disconnect,
        )
        await resp(_scope(), receive, send)
        await on_disconnect()  # even an explicit late cancel changes nothing
        hub.close()

    asyncio.run(check())
    assert answers and not any(answers)
    assert app.query(tid).state is State.SUCCEEDED
