"""Reading a request's JSON body within bounds (size, media type, the server's budget
of bytes held at once)."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import ClientDisconnect, Request

from tasklab.core.jsontext import NotJSON, loads
from tasklab.edges.budget import ByteBudget
from tasklab.edges.http.errors import HTTPError

log = logging.getLogger("tasklab.http")
MAX_BODY = 1024 * 1024 + 4096  # a 1 MiB payload plus the envelope


async def read_json(request: Request, budget: ByteBudget) -> Any:
    """The request body as JSON: `application/json` only (a cross-site form or a
    `text/plain` "simple request" is refused before it is read), at most MAX_BODY
    bytes (413 beyond, nothing read on), within the server's budget of bytes held at
    once (503 beyond). A client that hangs up mid-body is a log line."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        raise HTTPError(415, "unsupported_media_type", "the body must be application/json")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY:
        raise HTTPError(413, "too_large", f"body larger than {MAX_BODY} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise HTTPError(413, "too_large", f"body larger than {MAX_BODY} bytes")
            if not budget.take(len(chunk)):
                raise HTTPError(503, "server_busy", "too many request bytes held; try again")
            chunks.append(chunk)
    except ClientDisconnect:
        log.info("%s %s: the client hung up mid-body", request.method, request.url.path)
        raise HTTPError(400, "client_disconnected", "the body ended early") from None
    finally:
        budget.give(sum(len(c) for c in chunks))
    try:
        return loads(b"".join(chunks))
    except NotJSON as exc:
        raise HTTPError(422, "bad_request", f"body is {exc}") from None
