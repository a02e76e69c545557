"""The HTTP API (docs/design.md §5): FastAPI for routing and OpenAPI; bodies parsed by
hand so that size limits, JSON errors and payload validation answer in one error shape."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from tasklab.core.queueing import SubmitOptions
from tasklab.edges.http.body import read_json
from tasklab.edges.http.errors import HTTPError, error_response, from_tasklab
from tasklab.edges.http.operations import operation_routes
from tasklab.edges.http.queues import queue_routes
from tasklab.edges.http.state import ServerState, SubmitBody
from tasklab.edges.http.streaming import EventStreamResponse, StreamLimiter
from tasklab.edges.http.waits import wait_routes
from tasklab.edges.submits import SubmitBatcher
from tasklab.edges.tokens import secret_matches
from tasklab.errors import TasklabError
from tasklab.metrics import Metrics

log = logging.getLogger("tasklab.http")
MAX_RESUME = 2**63 - 1  # seq is a signed 64-bit integer in both stores


class SubmitSchema(BaseModel):
    """`POST /tasks` and `POST /tasks/stream` (the OpenAPI schema; bodies are checked
    by `parse_submit`, whose errors name the field without echoing the input)."""

    task: str
    payload: dict[str, Any] = {}
    idempotency_key: str | None = None
    max_attempts: int | None = None
    run_at: str | None = None  # ISO 8601 with an offset
    delay: float | None = None  # seconds
    queue: str | None = None
    priority: int | None = None
    concurrency_key: str | None = None
    unique_key: str | None = None


def create_app(state: ServerState, dependencies: list[Any] | None = None) -> FastAPI:
    """The API and the dashboard. `dependencies`: FastAPI dependencies of the
    application that mounts this one (its auth), run before every route of ours."""
    # no open docs: the schema lists every task type, so it sits behind the token
    api = FastAPI(title="tasklab", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)
    api.state.tasklab = state
    state.streams = StreamLimiter(state.max_streams)
    state.metrics = state.metrics or Metrics(state.app, state.webhooks)
    state.submits = state.submits or SubmitBatcher(state.app, state.db)
    _install_errors(api)
    guards = list(dependencies or [])
    protected = APIRouter(dependencies=[*guards, Depends(_auth(state))])
    _task_routes(protected, state)
    queue_routes(protected, state)
    operation_routes(protected, state)
    wait_routes(protected, state)
    api.include_router(protected)

    @api.get("/openapi.json", include_in_schema=False, dependencies=[Depends(_auth(state))])
    async def openapi() -> JSONResponse:
        return JSONResponse(api.openapi())

    _open_routes(api, state)
    from tasklab.edges.dashboard.routes import mount_dashboard

    mount_dashboard(api, state, guards)
    return api


def _install_errors(api: FastAPI) -> None:
    @api.exception_handler(TasklabError)
    async def tasklab_error(request: Request, exc: TasklabError) -> JSONResponse:
        return from_tasklab(exc)

    @api.exception_handler(HTTPError)
    async def http_error(request: Request, exc: HTTPError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message)

    @api.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "bad_request", _first_error(exc))

    @api.exception_handler(StarletteHTTPException)
    async def starlette_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        return error_response(exc.status_code, code, str(exc.detail))


def _first_error(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request"
    e = errors[0]
    where = ".".join(str(p) for p in e.get("loc", ()))
    return f"{where}: {e.get('msg', 'invalid')}"


def _auth(state: ServerState) -> Callable[[Request], Awaitable[None]]:
    async def check(request: Request) -> None:
        if state.token is None:
            return
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and secret_matches(header[7:].strip(), state.token):
            return
        cookie = request.cookies.get("tasklab_session", "")
        if cookie and secret_matches(cookie, state.session_value()):
            return
        raise HTTPError(401, "unauthorized", "missing or wrong token")

    return check


def parse_submit(doc: Any, request: Request) -> SubmitBody:
    """The submit envelope; field types are checked where the values are used
    (`TaskApp.prepare`), with messages that never echo the input."""
    if not isinstance(doc, dict):
        raise HTTPError(422, "bad_request", "body must be a JSON object")
    if "task" not in doc or not isinstance(doc["task"], str):
        raise HTTPError(422, "bad_request", "missing field 'task' (a string)")
    payload = doc.get("payload", {})
    if not isinstance(payload, dict):
        raise HTTPError(422, "invalid_payload", "payload must be a JSON object")
    key = doc.get("idempotency_key")
    if key is None:
        key = request.headers.get("idempotency-key")
    options = SubmitOptions.from_wire(doc)  # InvalidPayload (422) names the field
    return SubmitBody(doc["task"], payload, key, doc.get("max_attempts"), options)


_SUBMIT_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": SubmitSchema.model_json_schema()}},
    }
}


async def submit_response(state: ServerState, request: Request) -> JSONResponse:
    body = parse_submit(await read_json(request, state.budget), request)
    if state.closing.is_set():
        raise HTTPError(503, "shutting_down", "the server is shutting down")
    assert state.submits is not None
    snap, created = await state.submits.submit(
        body.task, body.payload, body.idempotency_key, body.max_attempts, body.options
    )
    return JSONResponse(snap.to_json(), status_code=201 if created else 200)


class SubmitFastPath:
    """`POST /tasks` — the hottest route — answered before the framework's middleware,
    dependency and telemetry layers (which cost more than the submit's own work); the
    same auth check, body limits, validation, batching and error bodies as the route.
    Everything else goes on to FastAPI."""

    def __init__(self, api: FastAPI, state: ServerState) -> None:
        self.api = api
        self.state = state
        self._auth = _auth(state)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/tasks"
        ):
            await self.api(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            await self._auth(request)
            response = await submit_response(self.state, request)
        except HTTPError as exc:
            response = error_response(exc.status, exc.code, exc.message)
        except TasklabError as exc:
            response = from_tasklab(exc)
        except Exception as exc:  # one line: no traceback, no payload
            log.error("POST /tasks failed: %s", type(exc).__name__)
            response = error_response(500, "internal", "internal server error")
        await response(scope, receive, send)


def asgi_app(state: ServerState) -> SubmitFastPath:
    """What the server runs: the FastAPI app behind the submit fast path."""
    return SubmitFastPath(create_app(state), state)


def _task_routes(r: APIRouter, state: ServerState) -> None:
    app = state.app

    @r.post("/tasks", status_code=201, openapi_extra=_SUBMIT_DOC)
    async def submit(request: Request) -> JSONResponse:
        # served by SubmitFastPath in front of the framework; here for OpenAPI and for
        # an app used without that wrapper
        return await submit_response(state, request)

    @r.get("/tasks/counts")
    async def counts() -> JSONResponse:
        return JSONResponse(await state.db(app.counts))

    @r.get("/task-types")
    async def task_types() -> JSONResponse:
        return JSONResponse(
            {
                "items": [
                    {
                        "name": t.name,
                        "schema": t.json_schema(),
                        "async": t.is_async,
                        "transactional": t.transactional,
                        "max_attempts": t.max_attempts,
                        "retry_safe": t.retry_safe,
                        "doc": (t.fn.__doc__ or "").strip(),
                    }
                    for t in app.registry.all()
                ]
            }
        )

    @r.get("/tasks/{task_id}")
    async def get_task(task_id: str) -> JSONResponse:
        return JSONResponse((await state.db(app.query, task_id)).to_json())

    @r.post("/tasks/{task_id}/cancel")
    async def cancel(task_id: str) -> JSONResponse:
        out = await state.db(app.cancel, task_id)
        snap = await state.db(app.query, task_id)
        return JSONResponse({"request_accepted": out.request_accepted, "task": snap.to_json()})

    @r.get("/tasks/{task_id}/events")
    async def events(task_id: str, request: Request, after: int | None = None) -> Response:
        last = _resume_point(request, after)
        await state.db(app.query, task_id)  # 404 before the stream starts
        from tasklab.edges.http.sse import relay, task_events

        hub = state.change_hub()
        frames = relay(
            task_events(app, hub, state.db, task_id, last, state.closing, state.sse_heartbeat)
        )
        return EventStreamResponse(frames, state.streams)

    @r.post("/tasks/stream", openapi_extra=_SUBMIT_DOC)
    async def stream(request: Request) -> Response:
        from tasklab.edges.http.bound import start_bound

        body = parse_submit(await read_json(request, state.budget), request)
        if state.closing.is_set():
            raise HTTPError(503, "shutting_down", "the server is shutting down")
        return await start_bound(state, body)


def _resume_point(request: Request, after: int | None) -> int:
    header = request.headers.get("last-event-id")
    value: Any = header if header not in (None, "") else after
    if value is None:
        return 0
    try:
        point = int(value) if not isinstance(value, str) or len(value) <= 20 else -1
    except (TypeError, ValueError):
        raise HTTPError(422, "bad_request", "Last-Event-ID / after must be an integer") from None
    if not 0 <= point <= MAX_RESUME:
        raise HTTPError(422, "bad_request", f"Last-Event-ID / after must be from 0 to {MAX_RESUME}")
    return point


def _open_routes(api: FastAPI, state: ServerState) -> None:
    @api.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"ok": True, "closing": state.closing.is_set()})

    @api.get("/metrics", dependencies=[Depends(_auth(state))])
    async def metrics() -> Response:
        assert state.metrics is not None
        body = await state.db(state.metrics.render)
        return Response(body, media_type="text/plain; version=0.0.4")

    @api.post("/ui/login")
    async def login(request: Request) -> JSONResponse:
        doc = await read_json(request, state.budget)
        token = doc.get("token") if isinstance(doc, dict) else None
        if state.token is None:
            return JSONResponse({"ok": True, "auth": False})
        if not secret_matches(token, state.token):
            raise HTTPError(401, "unauthorized", "wrong token")
        resp = JSONResponse({"ok": True, "auth": True})
        resp.set_cookie(
            "tasklab_session", state.session_value(), httponly=True, samesite="strict", path="/"
        )
        return resp
