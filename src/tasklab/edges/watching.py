"""`tasklab watch`: follow a task's events with a progress bar, from the store or over
SSE, resuming after the last event seen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from tasklab.app import TaskApp
from tasklab.core.models import TaskSnapshot


class _View:
    """Renders events: `progress {done,total}` moves a bar, chunks print as text."""

    def __init__(self, console: Console, as_json: bool) -> None:
        self.console = console
        self.as_json = as_json
        self.reached = False  # a server answered once (watching over HTTP)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=as_json,
        )
        self.bar: Any = None
        self.last_seq = 0

    def __enter__(self) -> _View:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def show(self, event: dict[str, Any]) -> None:
        self.last_seq = max(self.last_seq, int(event["seq"]))
        if self.as_json:
            return
        data, etype = event["data"], event["type"]
        if etype == "progress" and isinstance(data, dict) and "done" in data and "total" in data:
            if self.bar is None:
                self.bar = self.progress.add_task("progress", total=data["total"] or 1)
            self.progress.update(self.bar, completed=data["done"], total=data["total"] or 1)
        elif etype == "chunk":
            self.progress.console.print(data.get("text", ""), end="", markup=False, highlight=False)
        elif etype == "attempt":
            self.progress.console.print(f"[dim]— attempt {data.get('attempt')} began —[/dim]")
        else:
            self.progress.console.print(json.dumps(data), markup=False)


def watch_store(
    app: TaskApp, task_id: str, after: int, console: Console, as_json: bool
) -> TaskSnapshot:
    """Follow from the database: wakes on every commit, ends after the terminal state
    has been read and every event before it shown."""
    snap = app.query(task_id)
    with _View(console, as_json) as view:
        view.last_seq = after
        while True:
            token = app.change_token()
            snap = app.query(task_id)  # read the state first: events up to it exist
            for ev in app.events(task_id, view.last_seq):
                view.show(ev.to_json())
            if snap.terminal and not app.events(task_id, view.last_seq, limit=1):
                break
            app.wait_change(token, 0.5)
    _summary(console, snap.to_json(), as_json)
    return snap


def watch_http(
    url: str, task_id: str, after: int, console: Console, as_json: bool
) -> dict[str, Any]:
    """Follow over SSE; a dropped connection reconnects with `Last-Event-ID`."""
    import time

    import httpx

    base = url.rstrip("/")
    headers: dict[str, str] = {}
    token = _token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with _View(console, as_json) as view:
        view.last_seq = after
        failures = 0
        while True:
            try:
                final = _follow(base, task_id, view, headers)
                if final is not None:
                    break
            except (httpx.TransportError, httpx.RemoteProtocolError) as exc:
                # one that was reached and dropped is restarting: reconnected for a
                # minute or so; one never reached may be restarting too, or be a wrong
                # URL: tried for about 8 s, then said plainly
                failures += 1
                if failures > (30 if view.reached else 12):
                    raise ConnectionError(f"cannot follow {task_id} at {base}: {exc}") from None
            time.sleep(min(2.0, 0.1 * failures))
    _summary(console, final, as_json)
    return dict(final)


def _follow(base: str, task_id: str, view: _View, headers: dict[str, str]) -> Any:
    import httpx

    hdrs = dict(headers)
    hdrs["Last-Event-ID"] = str(view.last_seq)
    with httpx.stream(
        "GET",
        f"{base}/tasks/{task_id}/events",
        headers=hdrs,
        timeout=httpx.Timeout(30.0, read=60.0),
    ) as resp:
        if resp.status_code == 404:
            from tasklab.errors import TaskNotFound

            raise TaskNotFound(f"no task with id {task_id!r}")
        if resp.status_code != 200:  # 401 without the token, 503 while it shuts down…
            resp.read()
            raise ConnectionRefusedError(f"{base} answered {resp.status_code}: {_message(resp)}")
        view.reached = True
        for etype, data in sse_events(resp.iter_lines()):
            doc = json.loads(data)
            if etype == "end":
                return doc
            view.show(doc)
    return None


def _message(resp: Any) -> str:
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200] or "(no message)"


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """Parse an SSE line stream into (event, data) pairs (comments skipped)."""
    etype, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield etype, "\n".join(data)
            etype, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            etype = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def _token() -> str | None:
    import os

    return os.environ.get("TASKLAB_TOKEN") or None


def _summary(console: Console, snap: dict[str, Any], as_json: bool) -> None:
    if as_json:
        return
    console.print()
    state = snap.get("state")
    if state == "succeeded":
        console.print(
            f"[green]succeeded[/green] result: {json.dumps(snap.get('result'))}",
            markup=True,
            highlight=False,
        )
    elif state == "cancelled":
        console.print(
            f"[yellow]cancelled[/yellow] ({snap.get('cancel_reason')}); effects "
            "already made outside tasklab are not undone",
            highlight=False,
        )
    else:
        error = snap.get("error") or {}
        console.print(
            f"[red]{state}[/red] {error.get('code')}: {error.get('message')}", highlight=False
        )
