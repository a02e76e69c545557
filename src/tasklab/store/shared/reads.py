"""TaskReads: snapshots, pages, counts, events, the database clock."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tasklab.core.models import Event, TaskSnapshot
from tasklab.core.states import State
from tasklab.errors import TaskNotFound
from tasklab.store.shared.core import SqlCore


class SqlReads(SqlCore):
    """The `TaskReads` role."""

    def get(self, task_id: str) -> TaskSnapshot:
        with self._read() as conn:
            row = self._one(conn, "get_task", id=task_id)
        if row is None:
            raise TaskNotFound(f"no task with id {task_id!r}")
        return self._snapshot(row)

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            rows = self._all(conn, "count_states")
        counts = {s.value: 0 for s in State}
        counts.update({r["state"]: int(r["n"]) for r in rows})
        return counts

    def states_of(self, task_ids: list[str]) -> dict[str, State]:
        if not task_ids:
            return {}
        with self._read() as conn:
            rows = self._all(conn, "states_of", ids=self._list_param(task_ids))
        return {r["id"]: State(r["state"]) for r in rows}

    def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        with self._read() as conn:
            rows = self._all(conn, "events_after", task_id=task_id, after=after, limit=limit)
        return self._events(rows)

    def trace_context(self, task_id: str) -> str | None:
        """The submitter's stored trace context (tracing.py), or None."""
        with self._read() as conn:
            row = self._one(conn, "trace_context", id=task_id)
        return row["trace_context"] if row is not None else None

    def timeline_events(self, task_id: str) -> list[Event]:
        """The attempt, resume, retry, expiry and wait events (core/timeline.py)."""
        with self._read() as conn:
            return self._events(self._all(conn, "timeline_events", task_id=task_id))

    def _events(self, rows: list[Any]) -> list[Event]:
        return [
            Event(
                r["task_id"],
                r["seq"],
                r["attempt"],
                r["type"],
                json.loads(r["data"]),
                self._at(r["at"]),
            )
            for r in rows
        ]

    def now(self) -> datetime:
        """The database clock."""
        with self._read() as conn:
            return self._at(self._one(conn, "now")["now"])  # type: ignore[index]
