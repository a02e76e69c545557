"""The JSON-lines server, with seed 000's shutdown order.

`close()`: set the closing gate → stop accepting → let running handlers finish until
`drain_timeout` → cancel the rest and await them → `wait_closed()`. It returns how many
handlers drained and how many were cancelled. A handler that starts after the gate
closes its connection without reading anything (the client sees EOF), so nothing is
submitted late. A half-sent line never holds shutdown past `drain_timeout`. Closing
the server does not touch tasks it already answered for (a replied `queued` task stays
queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tasklab._types import ToThread
from tasklab.app import TaskApp
from tasklab.core.filters import TaskFilter
from tasklab.core.queueing import SubmitOptions
from tasklab.edges.budget import ByteBudget
from tasklab.edges.http.protocol import LogOncePerSecond
from tasklab.edges.jsonl import codec
from tasklab.edges.submits import SubmitBatcher
from tasklab.edges.tokens import secret_matches
from tasklab.errors import TasklabError

log = logging.getLogger("tasklab.jsonl")
MAX_LINE = 1024 * 1024 + 4096
MAX_CONNECTIONS = 512
READ_CHUNK = 64 * 1024


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.frame = codec.error(code, message)


class JsonLinesServer:
    def __init__(
        self,
        app: TaskApp,
        db: ToThread,
        *,
        host: str = "127.0.0.1",
        port: int = 7411,
        token: str | None = None,
        max_line: int = MAX_LINE,
        read_timeout: float = 10.0,
        on_cancelled: Callable[[int], None] | None = None,
        submits: SubmitBatcher | None = None,
        max_connections: int = MAX_CONNECTIONS,
        budget: ByteBudget | None = None,
    ) -> None:
        self.app = app
        self.db = db
        self.submits = submits or SubmitBatcher(app, db)
        self.host, self.port = host, port
        self.token = token
        self.max_line = max_line
        self.read_timeout = read_timeout
        self.on_cancelled = on_cancelled
        self.max_connections = max_connections
        self.budget = budget or ByteBudget()
        self._refusals = LogOncePerSecond(log)
        self._closing = False
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        # Test hook: awaited at the start of every handler (a barrier for the late
        # handler scenario of seed 000).
        self.before_handle: Callable[[], Awaitable[None]] | None = None

    async def start(self) -> JsonLinesServer:
        # the stream's own buffer stays small: lines are read in chunks, counted
        # against the line limit and the server's byte budget
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, limit=2 * READ_CHUNK
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if self.before_handle is not None:
                await self.before_handle()
            if self._closing:
                return  # the gate is closed: not a byte is read
            if len(self._handlers) > self.max_connections:
                self._refusals.warning(
                    "JSON-lines: refused a connection: %d are open", self.max_connections
                )
                writer.write(
                    codec.error(
                        "too_many_connections",
                        f"{self.max_connections} connections are open; try again later",
                    )
                )
                await writer.drain()
                return
            writer.write(await self._respond(reader))
            await writer.drain()
            await self._linger(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancelled us and awaits us. This coroutine is the top of its task
            # and asyncio's stream protocol calls task.exception() on it, which would
            # re-raise the cancellation as an unraisable error: end normally instead.
            task.uncancel()
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    @staticmethod
    async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then read away what the client still sends (briefly): closing a
        socket with unread input resets it, and the client would lose our answer."""
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.5):
                while await reader.read(65536):
                    pass

    async def _respond(self, reader: asyncio.StreamReader) -> bytes:
        try:
            line = await asyncio.wait_for(self._read_line(reader), self.read_timeout)
        except TimeoutError:
            return codec.error("read_timeout", f"no complete line within {self.read_timeout:g}s")
        except _Refused as exc:
            return exc.frame
        if not line.endswith(b"\n"):
            return codec.error("bad_request", "the connection closed before a full line")
        try:
            request = codec.parse(line.rstrip(b"\r\n"))
        except codec.BadRequest as exc:
            return codec.error(exc.code, str(exc))
        if self.token is not None and not secret_matches(request.token, self.token):
            return codec.error("unauthorized", "missing or wrong token")
        # No second look at the gate here: a handler that started before close() is
        # drained, and its complete request is answered (seed 000's normal case).
        try:
            return await self._dispatch(request)
        except TasklabError as exc:
            return codec.error(exc.code, str(exc))
        except Exception as exc:  # every frame gets an answer; the log gets one line
            log.error("JSON-lines %s failed: %s", request.op, type(exc).__name__)
            return codec.error("internal", "internal server error")

    async def _read_line(self, reader: asyncio.StreamReader) -> bytes:
        """Up to the first newline (or EOF), at most `max_line` bytes, holding no more
        of the server's byte budget than this connection has sent."""
        buf = bytearray()
        try:
            while True:
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    return bytes(buf)
                if not self.budget.take(len(chunk)):
                    raise _Refused("server_busy", "too many request bytes held; try again")
                start = len(buf)
                buf += chunk
                newline = buf.find(b"\n", start)
                if newline >= 0:
                    return bytes(buf[: newline + 1])
                if len(buf) > self.max_line:
                    raise _Refused("too_large", f"line longer than {self.max_line} bytes")
        finally:
            self.budget.give(len(buf))

    async def _dispatch(self, request: codec.Request) -> bytes:
        doc, app = request.doc, self.app
        if request.op == "submit":
            snap, _ = await self.submits.submit(
                doc["task"],
                doc.get("payload", {}),
                doc.get("idempotency_key"),
                doc.get("max_attempts"),
                SubmitOptions.from_wire(doc),
            )
            return codec.ok(id=snap.id, task=snap.to_json())
        if request.op == "query":
            snap = await self.db(app.query, doc["id"])
            return codec.ok(task=snap.to_json())
        if request.op == "retry":
            new = await self.db(app.retry, doc["id"])
            return codec.ok(id=new, task=(await self.db(app.query, new)).to_json())
        if request.op in codec.BULK:
            where = TaskFilter.of(**doc["filter"])
            action = app.cancel_where if request.op == "cancel_where" else app.retry_where
            options = {"dry_run": doc.get("dry_run", False), "batch": doc.get("batch", 500)}
            return codec.ok(**await self.db(lambda: action(where, **options)))
        out = await self.db(app.cancel, doc["id"])
        snap = await self.db(app.query, doc["id"])
        return codec.ok(request_accepted=out.request_accepted, task=snap.to_json())

    async def close(self, drain_timeout: float = 10.0) -> dict[str, int]:
        """Seed 000's order; returns {"drained": n, "cancelled_handlers": m}."""
        self._closing = True  # 1. the gate
        if self._server is not None:
            self._server.close()  # 2. stop accepting
        pending = set(self._handlers)
        drained = cancelled = 0
        if pending:
            done, still = await asyncio.wait(pending, timeout=drain_timeout)  # 3. drain
            drained = len(done)
            for t in still:  # 4. cancel the rest and await them
                t.cancel()
            if still:
                await asyncio.gather(*still, return_exceptions=True)
            cancelled = len(still)
        if self._server is not None:
            await self._server.wait_closed()  # 5. only now
        if cancelled and self.on_cancelled is not None:
            self.on_cancelled(cancelled)
        return {"drained": drained, "cancelled_handlers": cancelled}

    @property
    def active_handlers(self) -> int:
        return len(self._handlers)
