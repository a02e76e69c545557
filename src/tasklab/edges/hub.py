"""Async wake-ups for the servers: one thread waits on the store's change signal
(LISTEN/NOTIFY on PostgreSQL, `PRAGMA data_version` on SQLite) and fans it out to
every asyncio waiter, so a thousand idle SSE streams cost no threads."""

from __future__ import annotations

import asyncio
import threading

from tasklab.store.base import Store


class ChangeHub:
    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self._event = asyncio.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tasklab-change-hub", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        token = self.store.change_token()
        while not self._stop.is_set():
            fresh = self.store.wait_change(token, 0.5)
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
        self.store.wake()
        self._thread.join(2)
