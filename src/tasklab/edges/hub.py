"""Async wake-ups for the servers: one thread waits on the store's change signal
(LISTEN/NOTIFY on PostgreSQL, `PRAGMA data_version` on SQLite) and fans it out to
every asyncio waiter, so a thousand idle SSE streams cost no threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol


class Changes(Protocol):
    """What the hub waits on (a `TaskApp`: its store's change signal)."""

    def change_token(self) -> int: ...
    def wait_change(self, token: int, timeout: float) -> int: ...
    def wake(self) -> None: ...


class ChangeHub:
    def __init__(self, changes: Changes, loop: asyncio.AbstractEventLoop) -> None:
        self.changes = changes
        self.loop = loop
        self._event = asyncio.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tasklab-change-hub", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        token = self.changes.change_token()
        while not self._stop.is_set():
            fresh = self.changes.wait_change(token, 0.5)
            if fresh != token:
                token = fresh
                try:
                    self.loop.call_soon_threadsafe(self._fire)
                except RuntimeError:  # the loop is closed
                    return

    def _fire(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def current(self) -> asyncio.Event:
        """The event the next change sets; take it *before* reading the store."""
        return self._event

    def close(self) -> None:
        self._stop.set()
        self.changes.wake()
        self._thread.join(2)
