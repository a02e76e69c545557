"""Retention and health: pruning finished tasks, the counters."""

from __future__ import annotations

from datetime import datetime

from tasklab.store.base import PRUNED
from tasklab.store.shared.core import SqlCore


class SqlRetention(SqlCore):
    """The `Retention` role."""

    def counters(self) -> dict[str, int]:
        with self._read() as conn:
            rows = self._all(conn, "counters")
        from tasklab.store.base import counter_names

        out = dict.fromkeys(counter_names(), 0)
        out.update({r["name"]: int(r["value"]) for r in rows})
        return out

    def prune(self, before: datetime, limit: int) -> dict[str, int]:
        """Delete up to `limit` terminal tasks finished before `before` with their
        events, effect records, notification (outbox) and delivery rows, in one short
        transaction; answers the rows deleted per table. A task whose notification a
        subscribed URL still waits for is kept until it is delivered. Call again until
        it answers no tasks."""
        with self._write() as conn:
            self._lock_table(conn, "prune_lock")
            rows = self._all(conn, "prunable", before=self._time_param(before), limit=limit)
            if not rows:
                return dict.fromkeys(PRUNED, 0)
            ids = self._list_param([r["id"] for r in rows])
            gone = {table: self._x(conn, f"prune_{table}", ids=ids).rowcount for table in PRUNED}
            self._x(conn, "bump_counter", name="tasks_pruned", n=gone["tasks"])
        return gone
