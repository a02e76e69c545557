"""The one JSON text tasklab stores and sends: strict (no NaN or Infinity), compact,
non-ASCII kept as is — and therefore checked to be valid UTF-8.

Python strings may hold lone surrogates (``"\\ud800"``) that no database or wire can
take. Checking here, where a value becomes text, turns them into a clear "not JSON"
error for the caller instead of a failed write later: a task result with one would
otherwise fail the group commit it shares with other tasks.
"""

from __future__ import annotations

import json

# one encoder: json.dumps with options builds a new encoder on every call
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


class NotJSON(ValueError):
    """What a client sent is not JSON tasklab takes (the message says why)."""


def loads(data: bytes | str) -> object:
    """Parse what a client sent. Every way it can be bad is one `NotJSON`: broken
    syntax, bytes that are not UTF-8, nesting deeper than the parser's recursion limit,
    and integers longer than Python converts (4,300 digits) — none of them may reach a
    request handler as a `RecursionError` or a bare `ValueError`."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise NotJSON(f"not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        raise NotJSON("not valid UTF-8") from None
    except RecursionError:
        raise NotJSON("JSON nested too deeply") from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string"
        raise NotJSON(f"not JSON tasklab takes: {exc}") from None


def dumps(value: object) -> str:
    """The stored text of a JSON value; ValueError/TypeError if it is not JSON."""
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not text.isascii():
        check_text(text)
    return text


def check_text(text: str) -> str:
    """ValueError unless the string can be written as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(not_text(exc)) from None
    return text


def not_text(exc: UnicodeEncodeError) -> str:
    """What is wrong with a string that UTF-8 cannot encode."""
    return f"a lone surrogate ({exc.object[exc.start]!r}) at position {exc.start} is not text"
