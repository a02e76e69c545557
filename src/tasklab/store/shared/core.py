"""The store logic shared by SQLite and PostgreSQL, written once over DB-API: the
dialect hooks and the helpers every role uses (fencing, settling with the pure policy,
the outbox row a terminal state inserts).

A dialect supplies connections, its named queries, how it begins a write transaction,
how it converts times and lists, and its liveness lock. Each role of the store
contract (store/roles.py) is one module beside this one; `SqlStore` is all of them.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from tasklab._types import PendingEvent, Row
from tasklab.core.jsontext import dumps
from tasklab.core.models import (
    Claim,
    ErrorInfo,
    TaskSnapshot,
    iso,
)
from tasklab.core.policy import Settlement
from tasklab.core.states import CancelReason, State
from tasklab.errors import LeaseLost
from tasklab.store.base import Faults
from tasklab.store.ids import new_event_id


class SqlCore(ABC):
    """The dialect hooks and shared helpers; the roles build on it."""

    url: str
    q: dict[str, str]
    integrity_errors: tuple[type[BaseException], ...]

    def __init__(self) -> None:
        self.faults = Faults()
        self._presence_lock = threading.Lock()
        self._presence_count = 0
        self._presence_handle: Any = None

    # ---- dialect hooks -------------------------------------------------------------
    @abstractmethod
    def _read(self) -> AbstractContextManager[Any]:
        """Provided by each implementation."""

    @abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """Provided by each implementation."""

    @abstractmethod
    def _dt(self, value: Any) -> datetime | None:
        """Provided by each implementation."""

    @abstractmethod
    def _time_param(self, at: datetime) -> Any:
        """A time as the dialect's time columns hold it."""

    @abstractmethod
    def _list_param(self, values: list[str]) -> Any:
        """Provided by each implementation."""

    @contextmanager
    def executor_presence(self) -> Iterator[None]:
        """Hold the liveness lock while any executor of this store object runs
        (reference-counted); waits while an exclusive recovery is in progress."""
        with self._presence_lock:
            if self._presence_count == 0:
                self._presence_handle = self._hold_presence()
            self._presence_count += 1
        try:
            yield
        finally:
            with self._presence_lock:
                self._presence_count -= 1
                if self._presence_count == 0:
                    handle, self._presence_handle = self._presence_handle, None
                    self._drop_presence(handle)

    @abstractmethod
    def _hold_presence(self) -> Any:
        """Take the shared liveness lock; returns what releases it."""

    @abstractmethod
    def _drop_presence(self, handle: Any) -> None:
        """Release what `_hold_presence` returned."""

    @abstractmethod
    def _on_callers(self, connection: Any) -> Any:
        """The caller's driver connection as the helpers use one (store/caller.py),
        after checking that it is on this store; else `ForeignConnection`."""

    @abstractmethod
    def _exclusive(self) -> AbstractContextManager[None]:
        """Provided by each implementation."""

    # ---- helpers -------------------------------------------------------------------
    def _x(self, conn: Any, query: str, /, **params: Any) -> Any:
        return conn.execute(self.q[query], params)

    def _one(self, conn: Any, query: str, /, **params: Any) -> Row | None:
        # fetchall: a half-read RETURNING statement would still be active at COMMIT
        rows = self._x(conn, query, **params).fetchall()
        return rows[0] if rows else None

    def _all(self, conn: Any, query: str, /, **params: Any) -> list[Row]:
        return list(self._x(conn, query, **params).fetchall())

    def _write_steps(self, steps: list[tuple[str, dict[str, Any]]]) -> list[list[Row]]:
        """Statements that do not depend on each other's results, in one transaction;
        each one's rows. A store may run a lone statement as its own transaction (no
        BEGIN/COMMIT round trips)."""
        with self._write() as conn:
            cursors = [self._x(conn, query, **params) for query, params in steps]
            return [list(c.fetchall()) if c.description is not None else [] for c in cursors]

    def _at(self, value: Any) -> datetime:
        """A NOT NULL time column."""
        at = self._dt(value)
        assert at is not None
        return at

    def _snapshot(self, row: Row) -> TaskSnapshot:
        error = (
            ErrorInfo(row["error_code"], row["error_message"] or "") if row["error_code"] else None
        )
        state = State(row["state"])
        return TaskSnapshot(
            id=row["id"],
            task=row["task"],
            payload=json.loads(row["payload"]),
            state=state,
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            result=json.loads(row["result"]) if row["result"] is not None else None,
            error=error,
            cancel_reason=CancelReason(row["cancel_reason"]) if row["cancel_reason"] else None,
            idempotency_key=row["idempotency_key"],
            created_at=self._at(row["created_at"]),
            started_at=self._dt(row["started_at"]),
            finished_at=self._dt(row["finished_at"]),
            lease_owner=row["lease_owner"],
            lease_until=self._dt(row["lease_until"]),
            run_after=self._dt(row["run_after"]),
            queue=row["queue"],
            priority=row["priority"],
            concurrency_key=row["concurrency_key"],
            unique_key=row["unique_key"],
            parent_id=row["parent_id"],
            wait=_wait_of(row, self._dt) if state is State.WAITING else None,
            retry_of=row["retry_of"],
        )

    def _claim(self, row: Row, owner: str, sent_at: float) -> Claim:
        return Claim(
            task_id=row["id"],
            task=row["task"],
            payload=json.loads(row["payload"]),
            epoch=row["epoch"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            owner=owner,
            sent_at=sent_at,
            resumed=row["wait_kind"],
        )

    # ---- fencing and settling -------------------------------------------------------
    def _fenced(self, conn: Any, claim: Claim, events: list[PendingEvent]) -> Row:
        row = self._fence(conn, claim, events)
        if row is None:
            raise lease_lost(claim)
        return row

    def _fence(self, conn: Any, claim: Claim, events: list[PendingEvent]) -> Row | None:
        """The fencing check plus the claim's pending events; None: authority lost."""
        row = self._one(conn, "fence", id=claim.task_id, epoch=claim.epoch, n=len(events))
        if row is None:
            return None
        first = int(row["event_seq"]) - len(events) + 1
        for params in self._event_params(claim, first, events):
            self._x(conn, "insert_event", **params)
        return row

    def _apply(
        self,
        conn: Any,
        task_id: str,
        epoch: int,
        current: State,
        s: Settlement,
        query: str,
        event_seq: int | None = None,
        **extra: Any,
    ) -> bool:
        params = self._settle_params(task_id, epoch, current, s, event_seq)
        changed = self._x(conn, query, **params, **extra).rowcount
        if changed and s.state.terminal:
            self._x(conn, "insert_outbox", event_id=new_event_id(), task_id=task_id)
        return bool(changed)

    @staticmethod
    def _settle_params(
        task_id: str, epoch: int, current: State, s: Settlement, event_seq: int | None = None
    ) -> dict[str, Any]:
        """A settlement's parameters; `event_seq`: the counter a reading fence
        (`fence_many`) answered, which the settlement writes (None: it stays)."""
        return {
            "id": task_id,
            "epoch": epoch,
            "from_state": current.value,
            "state": s.state.value,
            "result": (s.encoded if s.encoded is not None else dumps(s.result))
            if s.state is State.SUCCEEDED
            else None,
            "error_code": s.error.code if s.error else None,
            "error_message": s.error.message if s.error else None,
            "reason": s.reason.value if s.reason else None,
            "terminal": s.state.terminal,
            "delay": float(s.delay),  # one type per array column (PostgreSQL batches)
            "event_seq": event_seq,
        }

    @staticmethod
    def _event_params(claim: Claim, first: int, events: list[PendingEvent]) -> list[dict[str, Any]]:
        return [
            {
                "task_id": claim.task_id,
                "seq": first + i,
                "attempt": claim.attempt,
                "type": etype,
                "data": dumps(data),
            }
            for i, (etype, data) in enumerate(events)
        ]

    @abstractmethod
    def _lock_table(self, conn: Any, query: str) -> None:
        """Take the table lock the named statement describes, where concurrent writers
        need one (PostgreSQL); SQLite's writers take turns already."""

    @staticmethod
    def _rows_param(batch: list[dict[str, Any]]) -> dict[str, Any]:
        """Many rows of one statement's parameters as every batch query takes them: one
        JSON array of objects, `:rows` (SQLite `json_each`, PostgreSQL
        `json_to_recordset`; times as ISO 8601 with their offset)."""
        return {"rows": _ROWS.encode(batch)}

    def _executemany(self, conn: Any, query: str, params: list[dict[str, Any]]) -> None:
        conn.executemany(self.q[query], params)

    def bump(self, name: str, n: int = 1) -> None:
        self._write_steps([("bump_counter", {"name": name, "n": n})])


def _iso_time(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a batch parameter")


_ROWS = json.JSONEncoder(separators=(",", ":"), default=_iso_time)


def _wait_of(row: Row, dt: Any) -> dict[str, Any]:
    """What a waiting task waits for, as its snapshot shows it."""
    return {
        "kind": row["wait_kind"],
        "signal": row["wait_name"],
        "children": json.loads(row["wait_ids"]) if row["wait_ids"] else [],
        "until": iso(dt(row["wake_at"])),
    }


def lease_lost(claim: Claim) -> LeaseLost:
    return LeaseLost(
        f"task {claim.task_id} epoch {claim.epoch}: the claim no longer holds "
        "(reassigned, expired or no longer live)"
    )
