"""Serves the dashboard's pages and assets. They carry no task data (that comes from
the API, which checks the token), so they are open."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from tasklab.edges.http.errors import HTTPError

if TYPE_CHECKING:
    from tasklab.edges.http.state import ServerState

ASSETS = {"app.js": "text/javascript", "console.js": "text/javascript", "style.css": "text/css"}


def _read(name: str) -> str:
    return resources.files("tasklab.edges.dashboard").joinpath("static", name).read_text()


def mount_dashboard(api: FastAPI, state: ServerState) -> None:
    @api.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(_read("index.html"))

    @api.get("/ui/tasks/{task_id}", include_in_schema=False)
    async def task_page(task_id: str) -> HTMLResponse:
        return HTMLResponse(_read("task.html"))

    @api.get("/ui/queues", include_in_schema=False)
    async def queues_page() -> HTMLResponse:
        return HTMLResponse(_read("queues.html"))

    @api.get("/ui/workers", include_in_schema=False)
    async def workers_page() -> HTMLResponse:
        return HTMLResponse(_read("workers.html"))

    @api.get("/ui/schedules", include_in_schema=False)
    async def schedules_page() -> HTMLResponse:
        return HTMLResponse(_read("schedules.html"))

    @api.get("/static/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPError(404, "not_found", f"no asset {name!r}")
        return Response(_read(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})
