"""The type aliases shared between layers, in one place (Starlette's `types.py` habit)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

JSON = Any  # a value that json.dumps accepts; checked where it enters
PendingEvent = tuple[str, JSON]  # an event not yet stored: (type, data)
Row = Any  # a mapping-like database row (sqlite3.Row or a psycopg dict row)
# how async code runs a sync (database) call: in a thread, with a bound
ToThread = Callable[..., Awaitable[Any]]

__all__ = ["JSON", "PendingEvent", "Row", "ToThread"]
