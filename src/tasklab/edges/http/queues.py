"""The queue and schedule routes (SPEC §7): `GET /queues`, `PUT /queues/{name}`,
`POST /queues/{name}/pause|resume`, `GET /schedules`, `DELETE /schedules/{name}`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tasklab.core.queueing import KEEP, check_queue
from tasklab.edges.http.body import read_json
from tasklab.edges.http.errors import HTTPError
from tasklab.edges.http.state import ServerState

_SETTINGS = ("concurrency", "rate")


def queue_routes(r: APIRouter, state: ServerState) -> None:
    app = state.app

    async def one(name: str) -> JSONResponse:
        items = await state.db(app.queues)
        doc = next((q for q in items if q["name"] == name), None)
        return JSONResponse(doc or _empty(name))

    @r.get("/queues")
    async def queues() -> JSONResponse:
        return JSONResponse({"items": await state.db(app.queues)})

    @r.put("/queues/{name}")
    async def configure(name: str, request: Request) -> JSONResponse:
        """`{concurrency?, rate?}`: a field left out stays; null removes the limit."""
        check_queue(name)
        doc = await read_json(request, state.budget)
        if not isinstance(doc, dict):
            raise HTTPError(422, "bad_request", "body must be a JSON object")
        unknown = sorted(set(doc) - set(_SETTINGS))
        if unknown:
            raise HTTPError(422, "bad_request", f"unknown field(s): {', '.join(unknown[:5])}")
        settings: dict[str, Any] = {k: doc[k] if k in doc else KEEP for k in _SETTINGS}

        def configure_now() -> None:
            app.configure_queue(name, **settings)

        await state.db(configure_now)
        return await one(name)

    @r.post("/queues/{name}/pause")
    async def pause(name: str) -> JSONResponse:
        await state.db(app.pause, name)
        return await one(name)

    @r.post("/queues/{name}/resume")
    async def resume(name: str) -> JSONResponse:
        await state.db(app.resume, name)
        return await one(name)

    @r.get("/schedules")
    async def schedules() -> JSONResponse:
        return JSONResponse({"items": await state.db(app.schedules)})

    @r.delete("/schedules/{name}")
    async def unschedule(name: str) -> Response:
        if not await state.db(app.unschedule, name):
            raise HTTPError(404, "not_found", "no schedule of that name")
        return Response(status_code=204)


def _empty(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "paused": False,
        "concurrency": None,
        "rate": None,
        "queued": 0,
        "running": 0,
        "claimed": 0,
    }
