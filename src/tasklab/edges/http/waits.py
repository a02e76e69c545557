"""The durable functions' routes (SPEC §8): `POST /tasks/{id}/signals/{name}` and
`GET /tasks/{id}/journal` (the attempts' timeline, steps, waits, signals and children,
for the task page)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tasklab.edges.http.body import read_json
from tasklab.edges.http.errors import HTTPError
from tasklab.edges.http.state import ServerState


def wait_routes(r: APIRouter, state: ServerState) -> None:
    app = state.app

    @r.post("/tasks/{task_id}/signals/{name}")
    async def signal(task_id: str, name: str, request: Request) -> JSONResponse:
        """Body: `{"data": <any JSON>}` (or none: null). 201 when recorded, 200 when the
        signal was already there (its first data answers), 409 `task_terminal`."""
        data = None
        if request.headers.get("content-length", "0") != "0":
            doc = await read_json(request, state.budget)
            if not isinstance(doc, dict) or set(doc) - {"data"}:
                raise HTTPError(422, "bad_request", 'body must be {"data": <JSON>}')
            data = doc.get("data")
        stored, created = await state.db(app.signal, task_id, name, data)
        snap = await state.db(app.query, task_id)
        return JSONResponse(
            {"name": name, "data": stored, "created": created, "task": snap.to_json()},
            status_code=201 if created else 200,
        )

    @r.get("/tasks/{task_id}/journal")
    async def journal(task_id: str) -> JSONResponse:
        entries = await state.db(app.journal, task_id)
        signals = await state.db(app.signals, task_id)
        children = await state.db(app.children, task_id, 1000, None)
        attempts = await state.db(app.attempts, task_id)
        return JSONResponse(
            {
                "attempts": attempts,
                "journal": entries,
                "signals": signals,
                "children": [c.to_json(payload=False) for c in children.items],
            }
        )
