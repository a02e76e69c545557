"""An event-stream response that owns its stream's lifetime.

Like Starlette's StreamingResponse, the frames and a disconnect listener run in one
task group; unlike it, a disconnect cancels the frame generator at once (closing its
upstream through `aclosing`) and then runs `on_disconnect` — for a request-bound task,
the cancel request — shielded, so the request's own cancellation cannot skip it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tasklab.edges.http.errors import error_response


class StreamLimiter:
    """At most `limit` concurrent streams per server; past it, a clear 503."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def try_acquire(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


class EventStreamResponse(Response):
    """A Starlette `Response` (so FastAPI passes it through) that streams itself."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        limiter: StreamLimiter,
        headers: dict[str, str] | None = None,
        on_disconnect: Callable[[], Awaitable[Any]] | None = None,
        on_end: Callable[[], Awaitable[Any]] | None = None,
        *,
        slot_taken: bool = False,
    ) -> None:
        self.frames = frames
        self.limiter = limiter
        self.extra_headers = headers or {}
        self.on_disconnect = on_disconnect
        self.on_end = on_end
        self.slot_taken = slot_taken  # the caller took this stream's slot already
        self.disconnected = False
        self.status_code = 200
        self.background = None
        self.raw_headers = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.slot_taken and not self.limiter.try_acquire():
            await self.frames.aclose()  # type: ignore[attr-defined]
            if self.on_end is not None:
                await self.on_end()
            resp = error_response(
                503, "too_many_streams", f"{self.limiter.limit} streams are open; try again later"
            )
            await resp(scope, receive, send)
            return
        try:
            await self._stream(receive, send)
        finally:
            self.limiter.release()

    async def _stream(self, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        headers += [(k.lower().encode(), v.encode()) for k, v in self.extra_headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        async with anyio.create_task_group() as tg:

            async def listen() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        self.disconnected = True
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(listen)
            try:
                async with aclosing(self.frames) as frames:  # type: ignore[type-var]
                    async for frame in frames:
                        await send({"type": "http.response.body", "body": frame, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                self.disconnected = True  # the write failed: the client is gone
            tg.cancel_scope.cancel()
        await self._after()

    async def _after(self) -> None:
        callback = self.on_disconnect if self.disconnected else None
        if callback is not None:
            # shielded and bounded: the request is being torn down around us
            with anyio.move_on_after(5, shield=True):
                await callback()
        if self.on_end is not None:
            with anyio.move_on_after(5, shield=True):
                await self.on_end()


__all__ = ["EventStreamResponse", "StreamLimiter", "asyncio"]
