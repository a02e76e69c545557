"""The API and the console mounted in a user's own FastAPI application (SPEC §9), on a
real socket: the user's auth dependency guards every route of ours, the API and SSE
work under the mount path, and the console in Chromium finds its assets, calls and
links under it too."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request

from tasklab.asgi import tasklab_api
from tests.browser.test_dashboard import browser, context  # noqa: F401 (fixtures)
from tests.conftest import make_app, wait_for

KEY = {"x-admin": "yes"}


def require_admin(request: Request) -> None:
    if request.headers.get("x-admin") != "yes":
        raise HTTPException(403, "admins only")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mounted(store_url: str) -> Iterator[tuple[object, str]]:
    app = make_app(store_url)
    api = FastAPI()

    @api.get("/hello")
    def hello() -> dict[str, str]:
        return {"hello": "world"}

    api.mount("/ops", tasklab_api(app, dependencies=[Depends(require_admin)]))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 10)
    try:
        with app.worker(concurrency=2):
            yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        app.close()


def test_the_users_auth_guards_the_mounted_api_and_sse_works_under_it(mounted):
    _app, url = mounted
    with httpx.Client(base_url=url, timeout=10) as c:
        assert c.get("/hello").json() == {"hello": "world"}  # the user's own route
        for path in ("/ops/tasks", "/ops/", "/ops/ui/workers", "/ops/tasks/counts"):
            assert c.get(path).status_code == 403, path  # refused by the user's dependency
        r = c.post("/ops/tasks", json={"task": "t.echo", "payload": {"value": 7}}, headers=KEY)
        assert r.status_code == 201, r.text
        tid = r.json()["id"]
        with c.stream("GET", f"/ops/tasks/{tid}/events", headers=KEY) as events:
            lines: list[str] = []
            for line in events.iter_lines():
                lines.append(line)
                if lines[-2:-1] == ["event: end"] and line.startswith("data:"):
                    break
        assert "event: end" in lines, lines
        end = json.loads(lines[-1].removeprefix("data:"))
        assert end["state"] == "succeeded" and end["result"] == 7
        workers = c.get("/ops/workers", headers=KEY).json()["items"]
        assert any(w["state"] == "live" for w in workers)


def test_the_console_works_under_the_mount_path(mounted, context):  # noqa: F811
    app, url = mounted
    tid = app.submit("t.echo", {"value": "mounted"})
    wait_for(lambda: app.query(tid).terminal)
    context.set_extra_http_headers(KEY)
    page = context.new_page()
    page.goto(url + "/ops/")
    page.wait_for_selector(f"#tasks a[href$='ui/tasks/{tid}']")
    page.click(f"#tasks a[href$='ui/tasks/{tid}']")
    page.wait_for_url(f"**/ops/ui/tasks/{tid}")
    page.wait_for_function("document.querySelector('#state').textContent === 'succeeded'")
    page.click("nav >> text=Workers")
    page.wait_for_url("**/ops/ui/workers")
    page.wait_for_selector("#workers tr[data-state=live]")
