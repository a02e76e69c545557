"""Submits inside the caller's own transaction (`app.submit(..., connection=conn)`).

The task row is inserted with the caller's connection and left in the caller's open
transaction: it exists if and only if that transaction commits, and no worker can see
it before (the database's isolation, nothing of ours). Workers wake at the commit by
the store's usual means: on PostgreSQL the insert trigger's NOTIFY is delivered at
commit; on SQLite every waiting process checks `PRAGMA data_version` every 50 ms
besides its doorbell, and a commit by any connection changes it.

Accepted: a psycopg 3 connection to the store's database, a `sqlite3.Connection` on
the store's file, or a SQLAlchemy `Connection`/`Session` bound to either. The dialect
checks that the connection is on this store (`ForeignConnection` otherwise) before
anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def driver_connection(connection: Any) -> Any:
    """The driver's connection under a SQLAlchemy `Session` or `Connection`, whose
    transaction is begun here if it was not (so that the caller's `commit()` commits
    the task too, and its `rollback()` removes it); any other object as it is."""
    if not type(connection).__module__.startswith("sqlalchemy"):
        return connection
    if callable(getattr(connection, "get_bind", None)):  # a Session: its connection
        connection = connection.connection()
    if not connection.in_transaction():
        connection.begin()
    return connection.connection.dbapi_connection


class CallersConnection:
    """The caller's connection as the store's helpers use one (`execute(sql, params)`
    answering a cursor whose rows are mappings), through cursors of its own: the
    caller's row factory and cursors are left as they were."""

    def __init__(self, cursor: Callable[[], Any]) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Any = ()) -> Any:
        cur = self._cursor()
        cur.execute(sql, params)
        return cur
