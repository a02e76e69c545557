"""Serves the dashboard's pages and assets. They carry no task data (that comes from
the API, which checks the token), so they are open."""

from __future__ import annotations

import html
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from tasklab.edges.http.errors import HTTPError

if TYPE_CHECKING:
    from tasklab.edges.http.state import ServerState

ASSETS = {"app.js": "text/javascript", "console.js": "text/javascript", "style.css": "text/css"}


def _read(name: str) -> str:
    return resources.files("tasklab.edges.dashboard").joinpath("static", name).read_text()


def _page(name: str, request: Request) -> HTMLResponse:
    """A page whose links, assets and API calls are relative to where the app is
    mounted (`<base>`: the root path Starlette's `Mount` sets, or `/`)."""
    root = request.scope.get("root_path", "").rstrip("/")
    base = f'<base href="{html.escape(root)}/">'
    return HTMLResponse(_read(name).replace("<head>", "<head>\n" + base, 1))


def mount_dashboard(api: FastAPI, state: ServerState, guards: list[Any] | None = None) -> None:
    """The pages (behind `guards`: the mounting application's own dependencies, if
    any) and their assets."""
    guards = guards or []

    @api.get("/", include_in_schema=False, dependencies=guards)
    async def index(request: Request) -> HTMLResponse:
        return _page("index.html", request)

    @api.get("/ui/tasks/{task_id}", include_in_schema=False, dependencies=guards)
    async def task_page(task_id: str, request: Request) -> HTMLResponse:
        return _page("task.html", request)

    @api.get("/ui/queues", include_in_schema=False, dependencies=guards)
    async def queues_page(request: Request) -> HTMLResponse:
        return _page("queues.html", request)

    @api.get("/ui/workers", include_in_schema=False, dependencies=guards)
    async def workers_page(request: Request) -> HTMLResponse:
        return _page("workers.html", request)

    @api.get("/ui/schedules", include_in_schema=False, dependencies=guards)
    async def schedules_page(request: Request) -> HTMLResponse:
        return _page("schedules.html", request)

    @api.get("/static/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPError(404, "not_found", f"no asset {name!r}")
        return Response(_read(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})
