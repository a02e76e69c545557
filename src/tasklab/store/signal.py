"""A change counter that waiters can block on: moved by a store's watcher (SQLite's
`data_version` poll, PostgreSQL's LISTEN) and by local wake-ups."""

from __future__ import annotations

import threading


class ChangeSignal:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._token = 0

    def token(self) -> int:
        with self._cond:
            return self._token

    def wait(self, token: int, timeout: float) -> int:
        """Block until the counter moves past `token`, or the timeout; the counter now."""
        with self._cond:
            self._cond.wait_for(lambda: self._token != token, timeout)
            return self._token

    def bump(self) -> None:
        with self._cond:
            self._token += 1
            self._cond.notify_all()
