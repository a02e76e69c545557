"""The HTTP API and the operator console as an ASGI application to mount in yours.

    from fastapi import Depends, FastAPI
    from tasklab.asgi import tasklab_api

    api = FastAPI()
    api.mount("/tasklab", tasklab_api(app, dependencies=[Depends(require_admin)]))

Every route — the API, the SSE streams, the console's pages — runs your dependencies
first (your auth: raise HTTPException(401/403) to refuse); `token=` adds tasklab's own
bearer token on top. The console works under the mount path (its links and calls are
relative to it). What `tasklab serve` adds around it and a mounted one does not: the
worker (run `tasklab worker`, or `app.worker()` in your lifespan), the Host/Origin
checks, connection caps and read timeouts of its own server (your server's then), and
the JSON-lines port. The SSE change hub starts with the first stream; `close()` on the
returned application's `state.tasklab` is not needed (its thread is a daemon).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from tasklab.app import TaskApp
from tasklab.edges.http.app import create_app
from tasklab.edges.http.state import ServerState


def tasklab_api(
    app: TaskApp,
    *,
    dependencies: Sequence[Any] = (),
    token: str | None = None,
    max_streams: int = 1000,
) -> FastAPI:
    """A FastAPI application serving tasklab's HTTP API and console for `app`."""
    return create_app(ServerState(app, token=token, max_streams=max_streams), list(dependencies))
