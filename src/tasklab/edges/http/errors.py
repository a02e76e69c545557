"""Mapping tasklab errors to HTTP: one body shape, `{"error": {"code", "message"}}`."""

from __future__ import annotations

from starlette.responses import JSONResponse

from tasklab.errors import (
    IdempotencyConflict,
    InvalidPayload,
    QueueFull,
    ShuttingDown,
    TasklabError,
    TaskNotFound,
    UnknownTask,
)

STATUS: list[tuple[type[TasklabError], int]] = [
    (TaskNotFound, 404),
    (IdempotencyConflict, 409),
    (InvalidPayload, 422),
    (UnknownTask, 422),
    (ShuttingDown, 503),
    (QueueFull, 503),
]


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def from_tasklab(exc: TasklabError) -> JSONResponse:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return error_response(status, exc.code, str(exc))
    return error_response(500, exc.code, str(exc))


class HTTPError(Exception):
    """Raised by handlers for an error that is not a TasklabError (bad body, auth…)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
