"""What every HTTP request meets first: the Host and Origin checks, and the last net.

- **Host** (DNS rebinding): a page on `evil.example` whose name resolves to 127.0.0.1
  reaches a loopback server with `Host: evil.example`. A request is served only when
  its Host is an IP address, `localhost`, or a name given with `--allowed-host`.
- **Origin** (cross-site requests): any web page can send a "simple" cross-origin POST
  without a preflight. A state-changing request (not GET/HEAD/OPTIONS) that a browser
  marks as coming from another origin (`Origin` not this server's, or
  `Sec-Fetch-Site: cross-site|same-site`) is refused unless its origin is given with
  `--allowed-origin`. Clients that are not browsers send neither header and pass.
- **The last net**: an exception escaping the app is answered 500 (if nothing was sent
  yet) and logged as one line — never a traceback per request.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tasklab.edges.http.errors import error_response

log = logging.getLogger("tasklab.http")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(host_header: str) -> str:
    """`[::1]:8000` → `::1`, `Example.COM:80` → `example.com`."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    if host_header is None or "*" in allowed:
        return True
    name = host_name(host_header)
    if name == "localhost" or name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True  # an IP literal is what the browser's origin is: nothing to rebind


def cross_origin_refusal(
    method: str,
    origin: str | None,
    fetch_site: str | None,
    host_header: str | None,
    allowed_origins: frozenset[str],
) -> str | None:
    """Why a request must be refused as cross-origin, or None."""
    if method in SAFE_METHODS:
        return None
    if origin is not None:
        origin = origin.strip().lower()
        if origin in allowed_origins or "*" in allowed_origins:
            return None
        if origin == "null":
            return "a request from an opaque origin (Origin: null) may not change state"
        netloc = urlsplit(origin).netloc
        if host_header is not None and netloc == host_header.strip().lower():
            return None
        return f"a request from {origin} may not change state here (see --allowed-origin)"
    if fetch_site in ("cross-site", "same-site"):
        return f"a {fetch_site} request may not change state here (see --allowed-origin)"
    return None


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.allowed_hosts = frozenset(h.strip().lower() for h in allowed_hosts if h.strip())
        self.allowed_origins = frozenset(
            o.strip().lower().rstrip("/") for o in allowed_origins if o.strip()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        if not host_allowed(host, self.allowed_hosts):
            refusal = error_response(
                400, "bad_host", f"Host {host!r} is not served here (see --allowed-host)"
            )
            await refusal(scope, receive, send)
            return
        why = cross_origin_refusal(
            scope["method"],
            headers.get("origin"),
            headers.get("sec-fetch-site"),
            host,
            self.allowed_origins,
        )
        if why is not None:
            await error_response(403, "cross_origin", why)(scope, receive, send)
            return
        await self._guarded(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:  # the last net: one line, no traceback, no payload
            log.error("%s %s failed: %s", scope["method"], scope["path"], type(exc).__name__)
            if not started:
                await error_response(500, "internal", "internal server error")(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope["headers"]:
        out.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return out
