"""Waits: signals, children and the journal of durable functions (SPEC §8). A task's
suspend is a fenced terminal-like write in `leases.py`; this is everything around it."""

from __future__ import annotations

import json
from typing import Any

from tasklab._types import Row
from tasklab.core.jsontext import dumps
from tasklab.core.models import JSON, Claim, NewTask, Page, TaskSnapshot, iso
from tasklab.core.states import State
from tasklab.errors import TaskNotFound, TaskTerminal
from tasklab.store.ids import decode_cursor, encode_cursor
from tasklab.store.shared.submits import SqlSubmits


class SqlWaits(SqlSubmits):
    """The `Waits` role."""

    def signal(self, task_id: str, name: str, data: JSON) -> tuple[JSON, bool]:
        """Record signal `name` for a task once (a second answers the first: its data,
        False) and queue the task again if it waits for it. A task that has ended
        takes no signal (`TaskTerminal`)."""
        with self._write() as conn:
            self._x(conn, "task_lock", task_id=task_id)  # against its suspend (PostgreSQL)
            row = self._one(conn, "get_task", id=task_id)
            if row is None:
                raise TaskNotFound(f"no task with id {task_id!r}")
            if State(row["state"]).terminal:
                raise TaskTerminal(f"task {task_id} has ended ({row['state']}): no signal")
            new = self._one(conn, "signal_insert", task_id=task_id, name=name, data=dumps(data))
            if new is None:
                old = self._one(conn, "signal_get", task_id=task_id, name=name)
                assert old is not None
                return json.loads(old["data"]), False
            self._x(conn, "signal_wake", task_id=task_id, name=name)
        return data, True

    def signal_get(self, task_id: str, name: str) -> tuple[JSON] | None:
        with self._read() as conn:
            row = self._one(conn, "signal_get", task_id=task_id, name=name)
        return (json.loads(row["data"]),) if row is not None else None

    def signals(self, task_id: str) -> list[dict[str, JSON]]:
        with self._read() as conn:
            rows = self._all(conn, "signals_of", task_id=task_id)
        return [
            {"name": r["name"], "data": json.loads(r["data"]), "at": iso(self._dt(r["created_at"]))}
            for r in rows
        ]

    def spawn(self, claim: Claim, item: NewTask) -> tuple[TaskSnapshot, bool]:
        """A child task, inserted only while `claim` holds (fenced, in one transaction):
        an execution whose lease was taken cannot spawn."""
        with self._write() as conn:
            self._fenced(conn, claim, [])
            return self._insert(conn, item).pair()

    def children(self, parent_id: str, limit: int, cursor: str | None) -> Page:
        limit = max(1, min(int(limit), 1000))
        with self._read() as conn:
            rows = self._all(
                conn,
                "list_children",
                parent=parent_id,
                cursor=decode_cursor(cursor),
                limit=limit + 1,
            )
        items = [self._snapshot(r) for r in rows[:limit]]
        more = len(rows) > limit
        return Page(items, encode_cursor(items[-1].id) if more and items else None)

    def live_children(self, parent_id: str) -> list[str]:
        with self._read() as conn:
            return [r["id"] for r in self._all(conn, "live_children", parent=parent_id)]

    def journal(self, task_id: str) -> list[dict[str, JSON]]:
        """A task's steps, waits and effects, in the order they began."""
        with self._read() as conn:
            rows = self._all(conn, "journal_of", task_id=task_id)
        return [_entry(r, self._dt) for r in rows]


def _entry(r: Row, dt: Any) -> dict[str, JSON]:
    kind, _, name = str(r["key"]).partition(":")
    if kind not in ("step", "wait"):
        kind, name = "effect", str(r["key"])
    return {
        "kind": kind,
        "name": name,
        "status": r["status"],
        "result": json.loads(r["result"]) if r["result"] is not None else None,
        "attempt": r["attempt"],
        "started_at": iso(dt(r["started_at"])),
        "done_at": iso(dt(r["done_at"])),
    }
