"""The operator routes (SPEC §9): `GET /tasks` with search filters, `GET /workers`,
`GET /queues/activity`, `POST
/tasks/{id}/retry`, and the bulk actions `POST /tasks/cancel` / `POST /tasks/retry`
with `{filter, dry_run}`, answering the counts (the batches run in a worker thread,
each its own short transaction)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from tasklab.core.filters import TaskFilter
from tasklab.edges.http.body import read_json
from tasklab.edges.http.errors import HTTPError
from tasklab.edges.http.state import ServerState

_BULK = ("filter", "dry_run", "batch")


def operation_routes(r: APIRouter, state: ServerState) -> None:
    app = state.app

    @r.get("/tasks")
    async def search(
        state_: Annotated[str | None, Query(alias="state")] = None,
        task: str | None = None,
        queue: str | None = None,
        parent_id: str | None = None,
        idempotency_key: str | None = None,
        id_prefix: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JSONResponse:
        """Newest first; every filter given must hold; `next_cursor` pages on."""
        if not 1 <= limit <= 1000:
            raise HTTPError(422, "bad_request", "limit must be from 1 to 1000")
        where = TaskFilter.of(
            state=state_,
            task=task,
            queue=queue,
            parent_id=parent_id,
            idempotency_key=idempotency_key,
            id_prefix=id_prefix,
            created_after=created_after,
            created_before=created_before,
        )
        page = await state.db(lambda: app.search(where, limit=limit, cursor=cursor))
        return JSONResponse(
            {
                "items": [s.to_json(payload=False) for s in page.items],
                "next_cursor": page.next_cursor,
            }
        )

    @r.get("/queues/activity")
    async def activity(minutes: int = 60) -> JSONResponse:
        """Per queue and minute: claims, mean and longest wait (the console's charts)."""
        return JSONResponse({"items": await state.db(app.queue_activity, minutes)})

    @r.get("/workers")
    async def workers() -> JSONResponse:
        """Every executor's row (live, stopped, dead) with what it runs now."""
        return JSONResponse({"items": await state.db(app.workers)})

    @r.post("/tasks/{task_id}/retry", status_code=201)
    async def retry(task_id: str, request: Request) -> JSONResponse:
        """A new task made of an ended one; `{idempotency_key?}`. 409 `task_live`."""
        doc = await _body(request, state, ("idempotency_key",))
        key = doc.get("idempotency_key")
        new = await state.db(lambda: app.retry(task_id, idempotency_key=key))
        return JSONResponse((await state.db(app.query, new)).to_json(), status_code=201)

    @r.post("/tasks/cancel")
    async def cancel_where(request: Request) -> JSONResponse:
        """`{filter, dry_run?, batch?}` → `{matched, cancelled, cancel_requested,
        unchanged}` (a dry run: `{matched}`)."""
        where, options = await _bulk(request, state)
        return JSONResponse(await state.db(lambda: app.cancel_where(where, **options)))

    @r.post("/tasks/retry")
    async def retry_where(request: Request) -> JSONResponse:
        """`{filter, dry_run?, batch?}` → `{matched, retried, skipped}`."""
        where, options = await _bulk(request, state)
        return JSONResponse(await state.db(lambda: app.retry_where(where, **options)))


async def _body(request: Request, state: ServerState, fields: tuple[str, ...]) -> dict[str, Any]:
    doc = await read_json(request, state.budget) if await _has_body(request) else {}
    if not isinstance(doc, dict):
        raise HTTPError(422, "bad_request", "body must be a JSON object")
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        raise HTTPError(422, "bad_request", f"unknown field(s): {', '.join(unknown[:5])}")
    return doc


async def _has_body(request: Request) -> bool:
    return request.headers.get("content-length", "0") != "0" or (
        "transfer-encoding" in request.headers
    )


async def _bulk(request: Request, state: ServerState) -> tuple[TaskFilter, dict[str, Any]]:
    doc = await _body(request, state, _BULK)
    criteria = doc.get("filter")
    if not isinstance(criteria, dict):
        raise HTTPError(422, "bad_request", "filter must be a JSON object of criteria")
    dry_run = doc.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise HTTPError(422, "bad_request", "dry_run must be true or false")
    options: dict[str, Any] = {"dry_run": dry_run}
    if "batch" in doc:
        options["batch"] = doc["batch"]
    return TaskFilter.of(**criteria), options
