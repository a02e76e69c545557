"""A server's bound on the request bytes it holds at once, across all connections:
one slow client may buffer a line or a body up to its limit, a thousand may not."""

from __future__ import annotations

import threading

DEFAULT_BUFFERED = 64 * 1024 * 1024


class ByteBudget:
    def __init__(self, limit: int = DEFAULT_BUFFERED) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Reserve `n` bytes; False (nothing reserved) if that would pass the limit."""
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.held -= n
