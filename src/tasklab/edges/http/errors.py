"""Mapping tasklab errors to HTTP: one body shape, `{"error": {"code", "message"}}`."""

from __future__ import annotations

from starlette.responses import JSONResponse

from tasklab.errors import (
    IdempotencyConflict,
    InvalidPayload,
    QueueFull,
    SessionLost,
    ShuttingDown,
    TasklabError,
    TaskLive,
    TaskNotFound,
    TaskTerminal,
    UnknownTask,
)

STATUS: list[tuple[type[TasklabError], int]] = [
    (TaskNotFound, 404),
    (TaskTerminal, 409),
    (TaskLive, 409),
    (IdempotencyConflict, 409),
    (InvalidPayload, 422),
    (UnknownTask, 422),
    (ShuttingDown, 503),
    (QueueFull, 503),
    (SessionLost, 503),  # the database session broke: try again (with the same key)
]


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def from_tasklab(exc: TasklabError) -> JSONResponse:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            retry = {"Retry-After": "1"} if isinstance(exc, SessionLost) else None
            return error_response(status, exc.code, str(exc), retry)
    return error_response(500, exc.code, str(exc))


class HTTPError(Exception):
    """Raised by handlers for an error that is not a TasklabError (bad body, auth…)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
