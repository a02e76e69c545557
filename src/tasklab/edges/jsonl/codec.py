"""Pure parsing and encoding of JSON-lines requests and responses (no I/O)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tasklab.core.jsontext import NotJSON, loads

OPS = ("submit", "query", "cancel", "retry", "cancel_where", "retry_where")
BULK = ("cancel_where", "retry_where")  # {"filter": {...}, "dry_run"?: bool, "batch"?: int}


class BadRequest(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Request:
    op: str
    doc: dict[str, Any]

    @property
    def token(self) -> Any:
        return self.doc.get("token")


def parse(line: bytes) -> Request:
    """One request line → a Request, or BadRequest with a wire code."""
    try:
        doc = loads(line)
    except NotJSON as exc:
        raise BadRequest("bad_request", f"the line is {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest("bad_request", "a request is a JSON object")
    op = doc.get("op")
    if op not in OPS:
        raise BadRequest("bad_request", f"unknown op {op!r}; one of {', '.join(OPS)}")
    if op == "submit":
        if not isinstance(doc.get("task"), str):
            raise BadRequest("bad_request", "submit needs 'task' (a string)")
        if not isinstance(doc.get("payload", {}), dict):
            raise BadRequest("invalid_payload", "payload must be a JSON object")
    elif op in BULK:
        if not isinstance(doc.get("filter"), dict):
            raise BadRequest("bad_request", f"{op} needs 'filter' (an object of criteria)")
        if not isinstance(doc.get("dry_run", False), bool):
            raise BadRequest("bad_request", "dry_run must be true or false")
    elif not isinstance(doc.get("id"), str):
        raise BadRequest("bad_request", f"{op} needs 'id' (a string)")
    return Request(op, doc)


def ok(**fields: Any) -> bytes:
    return encode({"ok": True, **fields})


def error(code: str, message: str) -> bytes:
    return encode({"ok": False, "error": {"code": code, "message": message}})


def encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"
