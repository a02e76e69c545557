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
# The console's actions (cancel, retry, bulk actions, pausing queues) are clicks: no
# page of another site may frame it to borrow them (a console without a token has no
# cookie to withhold), and only its own scripts run — the data it shows is put in as
# text, never as markup, and this keeps it so should that slip. The pages' inline
# `style` attributes are the one exception.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'self'; "
        "base-uri 'self'; form-action 'self'; object-src 'none'"
    ),
    "X-Frame-Options": "SAMEORIGIN",  # what browsers without frame-ancestors read
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _read(name: str) -> str:
    return resources.files("tasklab.edges.dashboard").joinpath("static", name).read_text()


# page: (data-page, <title>, what follows the header's name, its nav entry)
PAGES = {
    "index": ("list", "tasklab", '<span class="muted">tasks that tell the truth</span>', "Tasks"),
    "task": ("task", "task · tasklab", '<span class="muted" id="task-title"></span>', None),
    "queues": ("queues", "queues · tasklab", "", "Queues"),
    "schedules": ("schedules", "schedules · tasklab", "", "Schedules"),
    "workers": ("workers", "workers · tasklab", "", "Workers"),
}
NAV = (
    ("./", "Tasks"),
    ("ui/queues", "Queues"),
    ("ui/schedules", "Schedules"),
    ("ui/workers", "Workers"),
)


def _page(name: str, request: Request) -> HTMLResponse:
    """A page: the shell (page.html) around its body (body-<name>.html). Its links,
    assets and API calls are relative to where the app is mounted (`<base>`: the root
    path Starlette's `Mount` sets, or `/`)."""
    page, title, subtitle, current = PAGES[name]
    here = ' aria-current="page"'
    nav = " ".join(
        f'<a href="{href}"{here if text == current else ""}>{text}</a>' for href, text in NAV
    )
    root = request.scope.get("root_path", "").rstrip("/")
    doc = _read("page.html")
    for key, value in (
        ("{title}", title),
        ("{page}", page),
        ("{subtitle}", subtitle),
        ("{nav}", nav),
        ("{body}", _read(f"body-{name}.html").split("\n", 1)[1]),  # without its comment
    ):
        doc = doc.replace(key, value, 1)
    base = f'<base href="{html.escape(root)}/">'
    return HTMLResponse(doc.replace("<head>", "<head>\n" + base, 1), headers=PAGE_HEADERS)


def mount_dashboard(api: FastAPI, state: ServerState, guards: list[Any] | None = None) -> None:
    """The pages (behind `guards`: the mounting application's own dependencies, if
    any) and their assets."""
    guards = guards or []

    @api.get("/", include_in_schema=False, dependencies=guards)
    async def index(request: Request) -> HTMLResponse:
        return _page("index", request)

    @api.get("/ui/tasks/{task_id}", include_in_schema=False, dependencies=guards)
    async def task_page(task_id: str, request: Request) -> HTMLResponse:
        return _page("task", request)

    @api.get("/ui/queues", include_in_schema=False, dependencies=guards)
    async def queues_page(request: Request) -> HTMLResponse:
        return _page("queues", request)

    @api.get("/ui/workers", include_in_schema=False, dependencies=guards)
    async def workers_page(request: Request) -> HTMLResponse:
        return _page("workers", request)

    @api.get("/ui/schedules", include_in_schema=False, dependencies=guards)
    async def schedules_page(request: Request) -> HTMLResponse:
        return _page("schedules", request)

    @api.get("/static/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPError(404, "not_found", f"no asset {name!r}")
        headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        return Response(_read(name), media_type=ASSETS[name], headers=headers)
