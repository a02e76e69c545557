"""Running `tasklab serve`'s Service on a loop of its own, in a thread, on free
loopback ports — real sockets, no test client."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tasklab import TaskApp
from tasklab.edges.serve import ServeOptions, Service


class ServiceThread:
    def __init__(self, app: TaskApp, **options: Any) -> None:
        options.setdefault("port", 0)
        options.setdefault("jsonl_port", 0)
        options.setdefault("concurrency", 2)
        options.setdefault("drain_timeout", 2.0)
        self.opts = ServeOptions(**options)
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.service = Service(app, self.opts)
        self.report: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ServiceThread:
        self._thread.start()
        self.call(self.service.start())
        return self

    def call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def url(self) -> str:
        return self.service.http_url

    @property
    def jsonl_port(self) -> int:
        assert self.service.jsonl is not None
        return self.service.jsonl.port

    def stop(self) -> dict[str, Any]:
        if self.report is None:
            self.report = self.call(self.service.stop())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()
        return self.report

    def __exit__(self, *exc: object) -> None:
        self.stop()
