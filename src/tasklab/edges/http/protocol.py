"""uvicorn's httptools protocol with the two bounds it lacks: a cap on open
connections (answered at accept with a 503 and logged, instead of running out of
file descriptors for everyone) and a deadline for a request's headers (a slowloris
client that sends a header byte now and then is cut off)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("tasklab.http")

_FULL_BODY = (
    b'{"error":{"code":"too_many_connections","message":"the server has too many open '
    b'connections; try again later"}}'
)
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: %d\r\n\r\n%s"
    % (len(_FULL_BODY), _FULL_BODY)
)


class LogOncePerSecond:
    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._last = 0.0
        self.suppressed = 0

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last >= 1.0:
            if self.suppressed:
                message += f" (and {self.suppressed} more in the last second)"
            self.logger.warning(message, *args)
            self._last, self.suppressed = now, 0
        else:
            self.suppressed += 1


def bounded_protocol(max_connections: int, header_timeout: float) -> type[HttpToolsProtocol]:
    refusals = LogOncePerSecond(log)

    class BoundedHttpTools(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                refusals.warning("HTTP: refused a connection: %d are open", max_connections)
                transport.write(_FULL)
                transport.close()
                return
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:  # the next request on a kept-alive connection
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedHttpTools
