"""`tasklab serve`: the HTTP API + dashboard, the JSON-lines server, an embedded worker
and the outbox dispatcher, in one process on one event loop.

Shutdown on SIGTERM/SIGINT: new submissions answer 503 and open SSE streams end
cleanly (clients resume); the JSON-lines server closes by seed 000's order; the HTTP
server stops; request-bound tasks are asked to stop (`shutdown`) and given the drain
deadline; the worker shuts down by its own rule (release, drain, cancel). Exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import resource
import signal
import socket
import sys
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import uvicorn

from tasklab.app import TaskApp
from tasklab.core.states import CancelReason
from tasklab.edges.http.app import asgi_app
from tasklab.edges.http.guard import RequestGuard
from tasklab.edges.http.protocol import bounded_protocol
from tasklab.edges.http.state import ServerState
from tasklab.edges.hub import ChangeHub
from tasklab.edges.jsonl.server import JsonLinesServer
from tasklab.redact import redact
from tasklab.runners import default_concurrency
from tasklab.runners.thread import check_cpu
from tasklab.service.retention import Retention
from tasklab.service.scheduler import Scheduler

T = TypeVar("T")
log = logging.getLogger("tasklab.serve")
FD_RESERVE = 128  # descriptors kept for the database, the store's files, the runners


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    jsonl_port: int = 7411
    concurrency: int | None = None  # None: the runner's default
    runner: str = "thread"
    drain_timeout: float = 10.0
    webhooks: list[str] = field(default_factory=list)
    token: str | None = None
    max_streams: int = 1000
    sse_heartbeat: float = 15.0
    embed_worker: bool = True
    pin_cpu: int | None = None  # the embedded worker's thread runner (see runners.thread)
    retain: timedelta | None = None  # prune terminal tasks older than this (`--retain`)
    allowed_hosts: list[str] = field(default_factory=list)  # Host names beyond IPs/localhost
    allowed_origins: list[str] = field(default_factory=list)  # cross-origin writers allowed
    max_connections: int = 2000  # HTTP, SSE streams included
    jsonl_max_connections: int = 512
    header_timeout: float = 10.0  # seconds for a request's headers to arrive


def fit_connection_caps(opts: ServeOptions) -> list[str]:
    """Raise the soft file-descriptor limit toward the hard one, and lower the caps
    that still do not fit under it (one descriptor per connection): running out of
    descriptors would make both servers unreachable for everyone, silently."""
    notes: list[str] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = opts.max_connections + opts.jsonl_max_connections + FD_RESERVE
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    room = soft - FD_RESERVE
    if opts.max_connections + opts.jsonl_max_connections > room:
        opts.jsonl_max_connections = max(1, min(opts.jsonl_max_connections, room // 4))
        opts.max_connections = max(1, room - opts.jsonl_max_connections)
        notes.append(
            f"file descriptors: {soft}; connections capped at {opts.max_connections} "
            f"HTTP and {opts.jsonl_max_connections} JSON-lines"
        )
    return notes


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(opts: ServeOptions) -> None:
    """Refuse bad options before anything binds or opens."""
    if not is_loopback(opts.host) and not opts.token:
        raise ValueError(
            f"refusing to bind {opts.host}: a non-loopback address needs TASKLAB_TOKEN"
        )
    if opts.max_connections < 1 or opts.jsonl_max_connections < 1 or opts.header_timeout <= 0:
        raise ValueError("connection caps must be at least 1 and the header timeout positive")
    if opts.pin_cpu is not None:
        if opts.runner != "thread":
            raise ValueError(f"--pin-cpu is for the thread runner, not the {opts.runner} runner")
        check_cpu(opts.pin_cpu)


class _Server(uvicorn.Server):
    """uvicorn, telling us when it caught a signal."""

    def __init__(self, config: uvicorn.Config, stop: asyncio.Event) -> None:
        super().__init__(config)
        self._stop_event = stop

    def handle_exit(self, sig: int, frame: Any) -> None:
        self._stop_event.set()  # our shutdown order runs; uvicorn stops when we say


class Service:
    """Everything `tasklab serve` runs, with an explicit start and stop (tests drive it
    on a loop of their own; `serve()` adds the signals)."""

    def __init__(self, app: TaskApp, opts: ServeOptions) -> None:
        check_binding(opts)
        self.app, self.opts = app, opts
        self.stop_requested = asyncio.Event()
        self.state = ServerState(
            app,
            token=opts.token,
            max_streams=opts.max_streams,
            sse_heartbeat=opts.sse_heartbeat,
            webhooks=opts.webhooks,
            bound_slots=opts.concurrency or default_concurrency(opts.runner),
        )
        self.http_url = ""
        self.jsonl: JsonLinesServer | None = None
        for note in fit_connection_caps(opts):
            log.warning("%s", note)

    async def start(self) -> Service:
        """Listen, then start the work. A port taken or an address not this machine's
        fails first, before anything has started; whatever fails later undoes what had
        started (before, the embedded worker went on running beside the error, and
        logged that its store was closed under it)."""
        app, opts, state = self.app, self.opts, self.state
        sock = self._http_socket()
        async with contextlib.AsyncExitStack() as undo:
            undo.callback(sock.close)
            self.jsonl = await JsonLinesServer(
                app,
                state.db,
                host=opts.host,
                port=opts.jsonl_port,
                token=opts.token,
                on_cancelled=self._count_cancelled,
                submits=state.submits,
                max_connections=opts.jsonl_max_connections,
                budget=state.budget,
            ).start()
            undo.push_async_callback(self.jsonl.close, 0)
            state.hub = ChangeHub(app, asyncio.get_running_loop())
            undo.callback(state.hub.close)
            # The server runs request-bound tasks itself: it is an executor for its
            # whole life (exclusive recovery must refuse while it lives), with or
            # without a worker.
            self._presence = app.executor_presence()
            await state.db(self._presence.__enter__)
            undo.push_async_callback(state.db, self._presence.__exit__, None, None, None)
            self.worker = None
            if opts.embed_worker:
                self.worker = await state.db(
                    lambda: app.worker(
                        runner=opts.runner,
                        concurrency=opts.concurrency,
                        webhooks=opts.webhooks,
                        pin_cpu=opts.pin_cpu,
                    ).start()
                )
                undo.push_async_callback(state.db, self.worker.stop)
            # retention runs here, not in the embedded worker: also with --no-worker;
            # the schedules run in the embedded worker, or here without one
            self.retention = None
            if opts.retain is not None:
                self.retention = Retention(app, opts.retain).start()
                undo.push_async_callback(state.db, self.retention.stop)
            self.scheduler = None
            if self.worker is None:
                self.scheduler = await state.db(Scheduler(app).start)
                undo.push_async_callback(state.db, self.scheduler.stop)
            self._serve_http(sock)
            undo.callback(self.serving.cancel)
            while not self.server.started and not self.serving.done():  # noqa: ASYNC110 - uvicorn has only a flag
                await asyncio.sleep(0.01)
            if self.serving.done():
                self.serving.result()  # raises what stopped it
            undo.pop_all()  # started: `stop` undoes it from here on
        self.http_url = f"http://{opts.host}:{sock.getsockname()[1]}"
        return self

    def _http_socket(self) -> socket.socket:
        opts = self.opts
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so, and
        # without it every response pays Nagle + delayed ACK (~40 ms) on keep-alive.
        sock = socket.socket(
            socket.AF_INET6 if ":" in opts.host else socket.AF_INET,
            socket.SOCK_STREAM,
            socket.IPPROTO_TCP,
        )
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((opts.host, opts.port))
        except OSError as exc:
            sock.close()
            where = (opts.host, opts.port)  # said as asyncio says it for the JSON-lines port
            raise OSError(exc.errno, f"error while attempting to bind on address {where!r}: "
                          f"{(exc.strerror or str(exc)).lower()}") from None  # fmt: skip
        except BaseException:
            sock.close()
            raise
        return sock

    def _serve_http(self, sock: socket.socket) -> None:
        opts = self.opts
        api = RequestGuard(asgi_app(self.state), opts.allowed_hosts, opts.allowed_origins)
        config = uvicorn.Config(
            api,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=max(1, int(opts.drain_timeout)),
            http=bounded_protocol(opts.max_connections, opts.header_timeout),
        )
        self.server = _Server(config, self.stop_requested)
        self.serving = asyncio.create_task(self.server.serve(sockets=[sock]))

    def _count_cancelled(self, n: int) -> None:
        if self.state.metrics is not None:
            self.state.metrics.cancelled_handlers.labels("jsonl").inc(n)

    async def wait(self) -> None:
        stop_wait = asyncio.create_task(self.stop_requested.wait())
        await asyncio.wait({self.serving, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()

    async def stop(self) -> dict[str, Any]:
        opts, state = self.opts, self.state
        state.closing.set()  # SSE streams end, new submits answer 503
        assert self.jsonl is not None
        jsonl_report = await self.jsonl.close(opts.drain_timeout)
        # Request-bound tasks stop before the HTTP server does, so that each one's
        # stream still carries its committed terminal snapshot as `end`.
        await self._stop_bound()
        self.server.should_exit = True
        await self.serving
        state.bound.close()
        worker_report = await state.db(self.worker.stop) if self.worker else None
        if self.retention is not None:
            await state.db(self.retention.stop)
        if self.scheduler is not None:
            await state.db(self.scheduler.stop)
        await state.db(self._presence.__exit__, None, None, None)
        state.hub.close()
        return {"event": "stopped", "jsonl": jsonl_report, "worker": worker_report}

    async def _stop_bound(self) -> None:
        """Ask request-bound tasks to stop (`shutdown`) and give them the drain
        deadline; one that is still running then is left to its lease."""
        state = self.state
        bound = dict(state.bound_tasks)
        for task_id in bound.values():
            await state.db(self.app.cancel, task_id, CancelReason.SHUTDOWN)
        if not bound:
            return
        _, still = await asyncio.wait(set(bound), timeout=self.opts.drain_timeout)
        for t in still:
            t.cancel()
        # their streams see the terminal state and send `end` (a hub wake-up away)
        streams_end = asyncio.get_running_loop().time() + 2.0
        while state.streams.open and asyncio.get_running_loop().time() < streams_end:  # noqa: ASYNC110 - the limiter has only a count
            await asyncio.sleep(0.01)


async def serve(app: TaskApp, opts: ServeOptions) -> dict[str, Any]:
    service = Service(app, opts)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stop_requested.set)
    await service.start()
    assert service.jsonl is not None
    print(
        json.dumps(
            {
                "event": "ready",
                "http": service.http_url,
                "jsonl_port": service.jsonl.port,
                "db": redact(app.db),
            }
        ),
        file=sys.stderr,
        flush=True,
    )
    await service.wait()
    report = await service.stop()
    print(json.dumps(report), file=sys.stderr, flush=True)
    return report


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run the server's loop: uvloop where it is installed (Linux and macOS; the
    event loop is what bounds submits per second), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
