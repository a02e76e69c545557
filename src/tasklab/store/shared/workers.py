"""Workers: each executor's row (what it is, its heartbeat, how it ended) and what it
runs now, for people — the console, `tasklab workers`, `GET /workers`. Recovery does
not trust these rows; liveness is the store's lock (store/shared/core.py)."""

from __future__ import annotations

import json
import os

from tasklab.core.models import JSON, WorkerInfo, iso
from tasklab.store.shared.core import SqlCore


class SqlWorkers(SqlCore):
    """The `Workers` role."""

    def register_worker(self, worker_id: str, info: WorkerInfo | None = None) -> None:
        info = info or WorkerInfo()
        with self._write() as conn:
            self._x(
                conn,
                "register_worker",
                id=worker_id,
                host=os.uname().nodename,
                pid=os.getpid(),
                owner=info.owner or None,
                runner=info.runner or None,
                queues=json.dumps(info.queues) if info.queues is not None else None,
                slots=info.slots or None,
            )

    def worker_heartbeat(self, worker_id: str, dead_after: float, keep: float) -> None:
        """This executor is alive; rows whose heartbeat is older than `dead_after`
        seconds are marked dead, and rows that ended over `keep` seconds ago go (and
        queue activity older than that) — one transaction, at the reaper's pace."""
        with self._write() as conn:
            self._x(conn, "heartbeat_worker", id=worker_id)
            self._x(conn, "mark_dead_workers", after=float(dead_after))
            self._x(conn, "prune_workers", keep=float(keep))
            self._x(conn, "prune_activity", minutes=int(keep // 60))  # the charts' rows

    def unregister_worker(self, worker_id: str) -> None:
        with self._write() as conn:
            self._x(conn, "unregister_worker", id=worker_id)

    def workers(self) -> list[dict[str, JSON]]:
        """Every row, newest first, each with the tasks its process runs now (running
        tasks whose lease owner is its claims')."""
        with self._read() as conn:
            rows = self._all(conn, "list_workers")
            running = self._all(conn, "running_tasks")
        out: list[dict[str, JSON]] = []
        for r in rows:
            owner = r["owner"]
            mine = [
                {"id": t["id"], "task": t["task"], "started_at": iso(self._dt(t["started_at"]))}
                for t in running
                if owner and r["ended"] is None and (t["lease_owner"] or "").startswith(owner + "#")
            ]
            out.append(
                {
                    "id": r["id"],
                    "host": r["host"],
                    "pid": r["pid"],
                    "runner": r["runner"],
                    "queues": json.loads(r["queues"]) if r["queues"] else None,
                    "slots": r["slots"],
                    "started_at": iso(self._dt(r["started_at"])),
                    "heartbeat_at": iso(self._dt(r["heartbeat_at"])),
                    "state": r["ended"] or "live",
                    "ended_at": iso(self._dt(r["ended_at"])),
                    "running": mine,
                }
            )
        return out
