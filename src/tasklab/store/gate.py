"""The store's closing gate: nothing uses a store after it is closed.

Every call of a store passes the gate; `close()` shuts it, waits (up to a deadline)
for the calls in flight and only then lets the store close its connections. A call
that comes later — a task thread that returned after its worker gave up on it —
gets `StoreError` instead of a connection that is being closed under it (SQLite's
C library does not survive a connection closed while another thread uses it).
"""

from __future__ import annotations

import threading

from tasklab.errors import StoreError


class ClosingGate:
    """`with gate.use():` around each call (an object, not a generator: every store
    call passes here, a short task several times)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._busy = 0
        self.closed = False

    def use(self) -> ClosingGate:
        return self

    def __enter__(self) -> None:
        with self._lock:
            if self.closed:
                raise StoreError("the store is closed")
            self._busy += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._busy -= 1
            if self._busy == 0 and self.closed:
                self._cond.notify_all()  # `close` waits for this

    def close(self, timeout: float) -> bool:
        """Refuse new calls; True once none is in flight, False if some still are
        after `timeout` seconds (their connections must then be left alone)."""
        with self._cond:
            self.closed = True
            return self._cond.wait_for(lambda: self._busy == 0, timeout)
