"""Effects: the idempotent-effect journal, and transactional tasks (claim, run and settle
in one transaction)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tasklab._types import PendingEvent
from tasklab.core.jsontext import dumps
from tasklab.core.models import (
    JSON,
    Claim,
    EffectRecord,
    Outcome,
)
from tasklab.core.policy import settle
from tasklab.core.states import State
from tasklab.store.shared.core import SqlCore


class SqlEffects(SqlCore):
    """The `Effects` role."""

    def effect_get(self, task_id: str, key: str) -> EffectRecord:
        with self._read() as conn:
            row = self._one(conn, "effect_get", task_id=task_id, key=key)
        if row is None:
            return EffectRecord(key, "none")
        result = json.loads(row["result"]) if row["result"] is not None else None
        return EffectRecord(key, row["status"], result, row["attempt"])

    def effect_records(self, task_id: str) -> list[EffectRecord]:
        """Every journal record of a task, in one read."""
        with self._read() as conn:
            rows = self._all(conn, "journal_of", task_id=task_id)
        return [
            EffectRecord(
                r["key"],
                r["status"],
                json.loads(r["result"]) if r["result"] is not None else None,
                r["attempt"],
            )
            for r in rows
        ]

    def effect_start(self, claim: Claim, key: str) -> None:
        with self._write() as conn:
            self._fenced(conn, claim, [])
            self._x(conn, "effect_start", task_id=claim.task_id, key=key, attempt=claim.attempt)

    def effect_done(self, claim: Claim, key: str, result: JSON) -> None:
        with self._write() as conn:
            self._fenced(conn, claim, [])
            self._x(conn, "effect_done", task_id=claim.task_id, key=key, result=dumps(result))

    def run_transactional(
        self, task_id: str, owner: str, body: Callable[[Any, Claim], Outcome]
    ) -> State | None:
        """Claim, run and settle in one transaction (docs/design.md §2, `transactional=True`).
        A crash anywhere inside rolls everything back: the task is still queued."""
        with self._write() as conn:
            row = self._one(conn, "claim_id", id=task_id, owner=owner, lease=3600.0)
            if row is None:
                return None
            claim = self._claim(row, owner, time.monotonic())  # no lease to keep: one transaction
            port = _TxPort(self, conn, claim)
            self._x(conn, "savepoint_body")
            outcome = body(port, claim)
            if outcome.kind != "return":
                self._x(conn, "rollback_body")  # the task's own writes go with its failure
                port.replay_events()
            self._x(conn, "release_body")
            row = self._fenced(conn, claim, [])
            settled = settle(State(row["state"]), outcome)
            self._apply(conn, claim.task_id, claim.epoch, State(row["state"]), settled, "finish")
            return settled.state


class _TxPort:
    """The context's window into a transactional run: events go into the open
    transaction; `connection` lets the task do its own database work in it."""

    def __init__(self, store: SqlCore, conn: Any, claim: Claim) -> None:
        self._store = store
        self.connection = conn
        self._claim = claim
        self._written: list[PendingEvent] = []

    def append_events(self, events: list[PendingEvent]) -> int:
        row = self._store._fenced(self.connection, self._claim, events)
        self._written.extend(events)
        return int(row["event_seq"])

    def replay_events(self) -> None:
        """After rolling back the body, write its events again: progress is kept."""
        if self._written:
            self._store._fenced(self.connection, self._claim, self._written)
