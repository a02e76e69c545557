"""What the HTTP handlers of one server process share (`ServerState`), and the parsed
submit body: a module of its own, so that the handlers' modules import it without
importing the app that mounts them."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from tasklab.app import TaskApp
from tasklab.core.queueing import NO_OPTIONS, SubmitOptions
from tasklab.edges.budget import ByteBudget
from tasklab.edges.http.bound import BoundExecutor
from tasklab.edges.http.streaming import StreamLimiter
from tasklab.edges.submits import SubmitBatcher
from tasklab.metrics import Metrics


@dataclass(frozen=True)
class SubmitBody:
    task: str
    payload: dict[str, Any]
    idempotency_key: Any = None
    max_attempts: Any = None
    options: SubmitOptions = NO_OPTIONS


@dataclass
class ServerState:
    """Everything the handlers share; one per server process."""

    app: TaskApp
    token: str | None = None
    max_streams: int = 1000
    sse_heartbeat: float = 15.0
    webhooks: list[str] = field(default_factory=list)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(32))
    bound_tasks: dict[asyncio.Task[Any], str] = field(default_factory=dict)
    metrics: Metrics | None = None
    hub: Any = None
    streams: StreamLimiter = field(default_factory=lambda: StreamLimiter(1000))
    submits: SubmitBatcher | None = None
    budget: ByteBudget = field(default_factory=ByteBudget)  # request bytes held at once
    bound_slots: int = 4  # request-bound tasks at once (`--concurrency`)
    bound: BoundExecutor = field(init=False)

    def __post_init__(self) -> None:
        self.bound = BoundExecutor(self.bound_slots)

    def change_hub(self) -> Any:
        """The hub the streams wait on: the server's, or — in an application that
        mounted the API (`tasklab.asgi`) — one made on the first stream's loop."""
        if self.hub is None:
            from tasklab.edges.hub import ChangeHub

            self.hub = ChangeHub(self.app, asyncio.get_running_loop())
        return self.hub

    async def db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Every sync database call from async code: in a thread, with a bound."""
        return await anyio.to_thread.run_sync(lambda: fn(*args), limiter=self.limiter)

    def session_value(self) -> str:
        assert self.token is not None
        return hashlib.sha256(b"tasklab-session:" + self.token.encode()).hexdigest()
