"""The store logic shared by SQLite and PostgreSQL, written once over DB-API.

A dialect supplies connections, its named queries, how it begins a write transaction,
how it converts times and lists, and its liveness lock; everything else — fencing,
settling outcomes with the pure policy, the outbox row in the terminal transaction,
recovery — lives here.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from tasklab._types import PendingEvent, Row
from tasklab.core.jsontext import dumps
from tasklab.core.models import (
    JSON,
    CancelOutcome,
    Claim,
    ClaimRequest,
    EffectRecord,
    ErrorInfo,
    Event,
    Expired,
    NewTask,
    Outcome,
    Page,
    TaskSnapshot,
)
from tasklab.core.policy import Backoff, Settlement, expiry_outcome, settle
from tasklab.core.states import CancelReason, State
from tasklab.errors import IdempotencyConflict, LeaseLost, TaskNotFound
from tasklab.store.base import PRUNED, Faults


class _TaskIds:
    """Time-ordered ids (ms since the epoch, then 48 random bits) so that `ORDER BY id`
    is creation order and keyset pagination needs no second column. Within one
    process they strictly increase (within a millisecond the random part counts up, as
    in ULID's monotonic mode; a clock stepping back does not reorder): tasks submitted
    one after another are claimed in that order. Across processes, tasks of the same
    millisecond are ordered by chance."""

    _RANDOM_BITS = 47  # the first of the 48 stays 0: room to count up within a ms

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = 0
        self._rand = 0
        # a forked child counting up from its parent's last id could repeat the
        # parent's next one: it draws afresh instead
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._ms = 0

    def __call__(self) -> str:
        ms = int(time.time() * 1000)
        with self._lock:
            if ms <= self._ms:
                ms, rand = self._ms, self._rand + 1
            else:
                rand = int.from_bytes(os.urandom(6)) >> (48 - self._RANDOM_BITS)
            self._ms, self._rand = ms, rand
        return f"{ms:012x}{rand:012x}"


new_task_id = _TaskIds()


def new_event_id() -> str:
    """Time-ordered too: outbox rows then append to the key's index instead of
    dirtying a random page of it in every commit (32 hex digits, like a uuid4)."""
    return f"{int(time.time() * 1000):012x}{os.urandom(10).hex()}"


_ID = re.compile(r"[0-9a-f]{24}")


def encode_cursor(task_id: str) -> str:
    return base64.urlsafe_b64encode(task_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if not cursor:
        return None
    from tasklab.errors import InvalidPayload

    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = base64.b64decode(padded.encode(), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        value = ""
    if not _ID.fullmatch(value):
        raise InvalidPayload("cursor is not one this server handed out")
    return value


class SqlStore(ABC):
    """Shared implementation; subclasses provide the dialect hooks below."""

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
        )

    # ---- submitting and reading ----------------------------------------------------
    def submit(self, items: list[NewTask]) -> list[tuple[TaskSnapshot, bool]]:
        """Insert every item in one transaction. An existing idempotency key answers the
        existing task (same name and payload) or raises IdempotencyConflict."""
        if len(items) == 1:  # the common case, in one round trip where it can be
            item = items[0]
            params = self._insert_params(item)
            inserted = self._write_steps([("insert_task", params)])[0]
            self.faults.check("submit_answer")
            if inserted:
                return [(self._fresh(item, params, inserted[0]), True)]
            # ON CONFLICT DO NOTHING: the key is taken, by a committed task (the insert
            # waited for a concurrent one); answer it rather than insert a second time
            with self._read() as conn:
                existing = self._one(conn, "task_by_key", key=item.idempotency_key)
            self._existing(existing, item, item.payload_text())
            return [(self._snapshot(existing), False)]
        with self._write() as conn:
            if len(items) > 1 and all(i.idempotency_key is None for i in items):
                batch = [self._insert_params(i) for i in items]
                rows = self._insert_batch(conn, batch)
                out = [
                    (self._fresh(i, p, r), True) for i, p, r in zip(items, batch, rows, strict=True)
                ]
            else:
                out = [self._insert(conn, item) for item in items]
        self.faults.check("submit_answer")
        return out

    @staticmethod
    def _insert_params(item: NewTask) -> dict[str, Any]:
        return {
            "id": new_task_id(),
            "task": item.task,
            "payload": item.payload_text(),
            "max_attempts": item.max_attempts,
            "retry_safe": item.retry_safe,
            "request_bound": item.request_bound,
            "timeout": item.timeout,
            "idempotency_key": item.idempotency_key,
        }

    def _fresh(self, item: NewTask, params: dict[str, Any], row: Row) -> TaskSnapshot:
        """The snapshot of a task just inserted: everything but the database's clock
        readings is known here, so the insert returns only those."""
        return TaskSnapshot(
            id=params["id"],
            task=item.task,
            payload=item.payload,
            state=State.QUEUED,
            attempt=0,
            max_attempts=item.max_attempts,
            result=None,
            error=None,
            cancel_reason=None,
            idempotency_key=item.idempotency_key,
            created_at=self._at(row["created_at"]),
            started_at=None,
            finished_at=None,
            lease_owner=None,
            lease_until=None,
            run_after=self._dt(row["run_after"]),
        )

    def _insert_batch(self, conn: Any, batch: list[dict[str, Any]]) -> list[Row]:
        """Many new tasks without idempotency keys (a store may pipeline them)."""
        return [self._one(conn, "insert_task", **params) for params in batch]

    def _insert(self, conn: Any, item: NewTask) -> tuple[TaskSnapshot, bool]:
        params = self._insert_params(item)
        row = self._one(conn, "insert_task", **params)
        if row is not None:
            return self._fresh(item, params, row), True
        # ON CONFLICT DO NOTHING: the key exists (perhaps committed a moment ago by a
        # concurrent submit, which this statement waited for).
        existing = self._one(conn, "task_by_key", key=item.idempotency_key)
        self._existing(existing, item, item.payload_text())
        return self._snapshot(existing), False

    @staticmethod
    def _existing(row: Row, item: NewTask, payload: str) -> None:
        if row["task"] != item.task or json.loads(row["payload"]) != json.loads(payload):
            raise IdempotencyConflict(
                f"idempotency key {item.idempotency_key!r} belongs to task {row['id']} "
                "with a different task name or payload"
            )

    def submit_and_claim(
        self, item: NewTask, owner: str, lease: float
    ) -> tuple[TaskSnapshot, bool, Claim | None]:
        """A request-bound task: created and claimed by its request in one transaction,
        so that no worker can take it in between (workers never claim such tasks)."""
        sent = time.monotonic()
        with self._write() as conn:
            snap, created = self._insert(conn, item)
            claimed = self._one(conn, "claim_id", id=snap.id, owner=owner, lease=lease)
            if claimed is not None:
                snap = self._snapshot(self._one(conn, "get_task", id=snap.id))
        claim = self._claim(claimed, owner, sent) if claimed is not None else None
        return snap, created, claim

    def get(self, task_id: str) -> TaskSnapshot:
        with self._read() as conn:
            row = self._one(conn, "get_task", id=task_id)
        if row is None:
            raise TaskNotFound(f"no task with id {task_id!r}")
        return self._snapshot(row)

    def page(self, state: State | None, limit: int, cursor: str | None) -> Page:
        limit = max(1, min(int(limit), 1000))
        after = decode_cursor(cursor)
        with self._read() as conn:
            rows = self._all(
                conn,
                "list_tasks",
                state=state.value if state else None,
                cursor=after,
                limit=limit + 1,
            )
        items = [self._snapshot(r) for r in rows[:limit]]
        more = len(rows) > limit
        return Page(items, encode_cursor(items[-1].id) if more and items else None)

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

    def cancel(self, task_id: str, reason: CancelReason) -> CancelOutcome:
        """queued → cancelled (terminal, outbox row); running → cancel_requested;
        cancel_requested → accepted, unchanged; terminal → not accepted."""
        with self._write() as conn:
            if self._x(conn, "cancel_queued", id=task_id, reason=reason.value).rowcount:
                self._x(conn, "insert_outbox", event_id=new_event_id(), task_id=task_id)
                return CancelOutcome(True, State.CANCELLED)
            if self._x(conn, "cancel_running", id=task_id, reason=reason.value).rowcount:
                return CancelOutcome(True, State.CANCEL_REQUESTED)
            row = self._one(conn, "get_task", id=task_id)
        if row is None:
            raise TaskNotFound(f"no task with id {task_id!r}")
        state = State(row["state"])
        return CancelOutcome(state is State.CANCEL_REQUESTED, state)

    # ---- executing -----------------------------------------------------------------
    def claim(self, names: list[str], limit: int, owner: str, lease: float) -> list[Claim]:
        if not names or limit <= 0:
            return []
        request = ClaimRequest(names, limit, owner, lease)
        sent = time.monotonic()
        rows = self._write_steps([("claim_next", self._claim_params(request))])[0]
        self.faults.check("claim_answer")
        return [self._claim(r, owner, sent) for r in rows]

    def _claim_params(self, r: ClaimRequest) -> dict[str, Any]:
        return {
            "names": self._list_param(r.names),
            "limit": r.limit,
            "owner": r.owner,
            "lease": r.lease,
        }

    def claim_id(self, task_id: str, owner: str, lease: float) -> Claim | None:
        sent = time.monotonic()
        with self._write() as conn:
            row = self._one(conn, "claim_id", id=task_id, owner=owner, lease=lease)
        self.faults.check("claim_answer")
        return self._claim(row, owner, sent) if row else None

    def queued_ids(self, names: list[str], limit: int) -> list[str]:
        if not names:
            return []
        with self._read() as conn:
            rows = self._all(conn, "queued_ids", names=self._list_param(names), limit=limit)
        return [r["id"] for r in rows]

    def seconds_until_runnable(self, names: list[str]) -> float | None:
        if not names:
            return None
        with self._read() as conn:
            row = self._one(conn, "next_run_after", names=self._list_param(names))
        return None if row is None or row["wait"] is None else max(0.0, float(row["wait"]))

    def heartbeat(self, claim: Claim, lease: float) -> State | None:
        """Renew the lease; the answer carries a pending cancel. None: authority lost."""
        with self._write() as conn:
            self.faults.check("heartbeat")
            row = self._one(conn, "heartbeat", id=claim.task_id, epoch=claim.epoch, lease=lease)
        return State(row["state"]) if row else None

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

    def append_events(self, claim: Claim, events: list[PendingEvent]) -> int:
        with self._write() as conn:
            self.faults.check("append_events")
            row = self._fenced(conn, claim, events)
        self.faults.check("append_events_answer")
        return int(row["event_seq"])

    def finish(self, claim: Claim, outcome: Outcome, events: list[PendingEvent]) -> State:
        """Flush the last events and commit the outcome, fenced, in one transaction; a
        terminal state inserts its outbox row in the same transaction."""
        result = self.finish_many([(claim, outcome, events)])[0]
        if isinstance(result, LeaseLost):
            raise result
        return result

    def finish_many(
        self, items: list[tuple[Claim, Outcome, list[PendingEvent]]]
    ) -> list[State | LeaseLost]:
        """Several terminal writes in one transaction (group commit). Each is fenced on
        its own: one that lost its authority writes nothing and answers LeaseLost."""
        return self.finish_and_claim(items, None)[0]

    def finish_and_claim(
        self, items: list[tuple[Claim, Outcome, list[PendingEvent]]], refill: ClaimRequest | None
    ) -> tuple[list[State | LeaseLost], list[Claim]]:
        """`finish_many`, and in the same transaction claim the next tasks for the slots
        these executions are about to free: one commit per cycle instead of two."""
        sent = time.monotonic()
        with self._write() as conn:
            results = self._finish_in(conn, items)
            self.faults.check("finish")
            rows = self._all(conn, "claim_next", **self._claim_params(refill)) if refill else []
        self.faults.check("finish_answer")
        return results, [self._claim(r, refill.owner, sent) for r in rows] if refill else []

    def _finish_in(
        self, conn: Any, items: list[tuple[Claim, Outcome, list[PendingEvent]]]
    ) -> list[State | LeaseLost]:
        """A batch in four statements whatever its size (four round trips on
        PostgreSQL): one fencing UPDATE for every claim, then the events, the settlements
        and the outbox rows as `executemany`s (the fence holds each row until the
        commit, so the settlements cannot miss)."""
        if len(items) == 1:
            return self._finish_one(conn, *items[0])
        results: list[State | LeaseLost] = []
        events: list[dict[str, Any]] = []
        settles: list[dict[str, Any]] = []
        outbox: list[dict[str, Any]] = []
        fence = [(c.task_id, c.epoch, len(evs)) for c, _, evs in items]
        rows = self._all(conn, "fence_many", **self._fence_many_params(fence))
        fenced = {(r["id"], r["epoch"]): r for r in rows}
        for claim, outcome, evs in items:
            row = fenced.get((claim.task_id, claim.epoch))
            if row is None:
                results.append(lease_lost(claim))
                continue
            events += self._event_params(claim, int(row["event_seq"]) - len(evs) + 1, evs)
            current = State(row["state"])
            settled = settle(current, outcome)
            settles.append(self._settle_params(claim.task_id, claim.epoch, current, settled))
            if settled.state.terminal:
                outbox.append({"event_id": new_event_id(), "task_id": claim.task_id})
            results.append(settled.state)
        for query, params in (
            ("insert_event", events),
            ("finish", settles),
            ("insert_outbox", outbox),
        ):
            if params:
                self._executemany(conn, query, params)
        return results

    @abstractmethod
    def _fence_many_params(self, batch: list[tuple[str, int, int]]) -> dict[str, Any]:
        """(task id, epoch, event count) per claim, as the `fence_many` query takes them."""

    def _executemany(self, conn: Any, query: str, params: list[dict[str, Any]]) -> None:
        conn.executemany(self.q[query], params)

    def _finish_one(
        self, conn: Any, claim: Claim, outcome: Outcome, events: list[PendingEvent]
    ) -> list[State | LeaseLost]:
        row = self._fence(conn, claim, events)
        if row is None:
            return [lease_lost(claim)]
        current = State(row["state"])
        settled = settle(current, outcome)
        self._apply(conn, claim.task_id, claim.epoch, current, settled, "finish")
        return [settled.state]

    def _apply(
        self,
        conn: Any,
        task_id: str,
        epoch: int,
        current: State,
        s: Settlement,
        query: str,
        **extra: Any,
    ) -> bool:
        params = self._settle_params(task_id, epoch, current, s)
        changed = self._x(conn, query, **params, **extra).rowcount
        if changed and s.state.terminal:
            self._x(conn, "insert_outbox", event_id=new_event_id(), task_id=task_id)
        return bool(changed)

    @staticmethod
    def _settle_params(task_id: str, epoch: int, current: State, s: Settlement) -> dict[str, Any]:
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
            "delay": s.delay,
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

    def release(self, claim: Claim) -> bool:
        with self._write() as conn:
            return bool(self._x(conn, "release", id=claim.task_id, epoch=claim.epoch).rowcount)

    def release_owned(self, owner: str) -> list[str]:
        """Give back every running claim whose lease owner is exactly `owner` (one
        claim call's, none of them started); their ids."""
        with self._write() as conn:
            ids = [r["id"] for r in self._all(conn, "release_owned", owner=owner)]
            if ids:
                self._x(conn, "bump_counter", name="lost_claims_released", n=len(ids))
        return ids

    def effect_get(self, task_id: str, key: str) -> EffectRecord:
        with self._read() as conn:
            row = self._one(conn, "effect_get", task_id=task_id, key=key)
        if row is None:
            return EffectRecord(key, "none")
        result = json.loads(row["result"]) if row["result"] is not None else None
        return EffectRecord(key, row["status"], result, row["attempt"])

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

    # ---- recovery ------------------------------------------------------------------
    def expire(self, backoff: Backoff) -> list[str]:
        """The reaper: settle tasks whose lease ran out, by the lease-expiry policy."""
        resolved = self._resolve("expired", backoff, exclusive=False)
        if resolved:
            self.bump("expired_leases", len(resolved))
        return resolved

    def recover_running(self, backoff: Backoff) -> list[str]:
        """Exclusive recovery: with no executor alive, settle every live task now."""
        with self._exclusive():
            resolved = self._resolve("live", backoff, exclusive=True)
            with self._write() as conn:
                self._x(conn, "clear_workers")
        return resolved

    def _resolve(self, query: str, backoff: Backoff, *, exclusive: bool) -> list[str]:
        resolved: list[str] = []
        while True:
            with self._write() as conn:
                rows = self._all(conn, query, limit=500)
                for r in rows:
                    task = Expired(
                        r["id"],
                        r["epoch"],
                        State(r["state"]),
                        r["attempt"],
                        r["max_attempts"],
                        bool(r["retry_safe"]),
                        bool(r["request_bound"]),
                    )
                    settled = settle(task.state, expiry_outcome(task, backoff))
                    if self._apply(
                        conn,
                        task.task_id,
                        task.epoch,
                        task.state,
                        settled,
                        "resolve_expired",
                        exclusive=exclusive,
                    ):
                        resolved.append(task.task_id)
            if len(rows) < 500:
                return resolved

    # ---- workers, counters, outbox -------------------------------------------------
    def register_worker(self, worker_id: str) -> None:
        with self._write() as conn:
            self._x(
                conn, "register_worker", id=worker_id, host=os.uname().nodename, pid=os.getpid()
            )

    def unregister_worker(self, worker_id: str) -> None:
        with self._write() as conn:
            self._x(conn, "unregister_worker", id=worker_id)

    def workers(self) -> list[dict[str, JSON]]:
        with self._read() as conn:
            rows = self._all(conn, "list_workers")
        return [{"id": r["id"], "host": r["host"], "pid": r["pid"]} for r in rows]

    def bump(self, name: str, n: int = 1) -> None:
        self._write_steps([("bump_counter", {"name": name, "n": n})])

    def counters(self) -> dict[str, int]:
        with self._read() as conn:
            rows = self._all(conn, "counters")
        from tasklab.store.base import counter_names

        out = dict.fromkeys(counter_names(), 0)
        out.update({r["name"]: int(r["value"]) for r in rows})
        return out

    def outbox_pending(self, url: str, limit: int) -> list[dict[str, JSON]]:
        with self._read() as conn:
            rows = self._all(conn, "outbox_pending", url=url, limit=limit)
        return [
            {"event_id": r["event_id"], "task_id": r["task_id"], "attempts": r["attempts"] or 0}
            for r in rows
        ]

    def record_delivery(
        self, event_id: str, url: str, ok: bool, delay: float, error: str | None
    ) -> None:
        with self._write() as conn:
            self.faults.check("delivery_record")
            self._x(
                conn,
                "delivery_attempted",
                event_id=event_id,
                url=url,
                ok=ok,
                delay=delay,
                error=error,
            )

    def subscribe(self, urls: list[str]) -> list[str]:
        """Subscribe webhook URLs (kept in the database: notifications made while no
        dispatcher runs wait for it). A new URL gets the whole history queued once.
        Answers the URLs that were new."""
        new: list[str] = []
        with self._write() as conn:
            self._lock_table(conn, "subscribe_lock")
            for url in urls:
                if self._one(conn, "subscribe", url=url) is not None:
                    self._x(conn, "queue_history", url=url)
                    new.append(url)
        return new

    @abstractmethod
    def _lock_table(self, conn: Any, query: str) -> None:
        """Take the table lock the named statement describes, where concurrent writers
        need one (PostgreSQL); SQLite's writers take turns already."""

    def unsubscribe(self, url: str) -> bool:
        """Forget a webhook URL and drop what it had still to receive."""
        with self._write() as conn:
            gone = self._x(conn, "unsubscribe", url=url).rowcount
            self._x(conn, "drop_pending", url=url)
        return bool(gone)

    def webhooks(self) -> dict[str, int]:
        """Subscribed URLs and how many notifications each has still to receive."""
        with self._read() as conn:
            return {r["url"]: int(r["pending"]) for r in self._all(conn, "webhooks")}

    def notification_lag(self, url: str) -> float:
        with self._read() as conn:
            row = self._one(conn, "oldest_undelivered", url=url)
        return float(row["lag"]) if row and row["lag"] is not None else 0.0

    def outbox_for(self, task_id: str) -> dict[str, JSON] | None:
        with self._read() as conn:
            row = self._one(conn, "outbox_for_task", task_id=task_id)
        return {"event_id": row["event_id"], "task_id": row["task_id"]} if row else None

    # ---- retention -----------------------------------------------------------------
    def now(self) -> datetime:
        """The database clock."""
        with self._read() as conn:
            return self._at(self._one(conn, "now")["now"])  # type: ignore[index]

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


class _TxPort:
    """The context's window into a transactional run: events go into the open
    transaction; `connection` lets the task do its own database work in it."""

    def __init__(self, store: SqlStore, conn: Any, claim: Claim) -> None:
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


def lease_lost(claim: Claim) -> LeaseLost:
    return LeaseLost(
        f"task {claim.task_id} epoch {claim.epoch}: the claim no longer holds "
        "(reassigned, expired or no longer live)"
    )
