"""Submits: new tasks (one, many, idempotent), request-bound create-and-claim, cancel."""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

from tasklab._types import Row
from tasklab.core.models import (
    CancelOutcome,
    Claim,
    NewTask,
    Submission,
    TaskSnapshot,
)
from tasklab.core.states import CancelReason, State
from tasklab.errors import IdempotencyConflict, TaskNotFound
from tasklab.store.caller import driver_connection
from tasklab.store.ids import new_event_id, new_task_id
from tasklab.store.shared.claims import SqlClaims


class SqlSubmits(SqlClaims):
    """The `Submits` role."""

    def submit(self, items: list[NewTask]) -> list[tuple[TaskSnapshot, bool]]:
        """Insert every item in one transaction. An existing idempotency key answers the
        existing task (same name and payload) or raises IdempotencyConflict."""
        return [s.pair() for s in self.submissions(items)]

    def submissions(self, items: list[NewTask]) -> list[Submission]:
        """`submit`, each snapshot made only when asked for (core/models.py)."""
        self._see_queues(items)
        if len(items) == 1:  # the common case, in one round trip where it can be
            item = items[0]
            params = self._insert_params(item)
            inserted = self._write_steps([("insert_task", params)])[0]
            self.faults.check("submit_answer")
            if inserted:
                return [self._inserted(item, params, inserted[0])]
            # ON CONFLICT DO NOTHING: a key is taken, by a committed task (the insert
            # waited for a concurrent one); answer it rather than insert a second time
            with self._write() as conn:
                return [self._insert(conn, item)]
        with self._write() as conn:
            if len(items) > 1 and all(i.unique_key is None for i in items):
                out = self._insert_many(conn, items)
            else:
                out = [self._insert(conn, item) for item in items]
        self.faults.check("submit_answer")
        return out

    def submit_on(self, connection: Any, items: list[NewTask]) -> list[tuple[TaskSnapshot, bool]]:
        """Insert every item with the caller's connection, in its open transaction
        (store/caller.py): the tasks exist if and only if that transaction commits.
        `ForeignConnection` (nothing written) for a connection not on this store;
        the driver's own errors reach the caller as they are (it is their
        transaction)."""
        conn = self._on_callers(driver_connection(connection))
        self._see_queues(items)
        if len(items) > 1 and all(i.unique_key is None for i in items):
            return [s.pair() for s in self._insert_many(conn, items)]
        return [self._insert(conn, item).pair() for item in items]

    def _see_queues(self, items: list[NewTask]) -> None:
        view = self._view
        if view is not None and any(i.queue not in view.busy for i in items):
            self.forget_queue_view()  # a queue with its first tasks: claims here see it

    def _insert_params(self, item: NewTask) -> dict[str, Any]:
        return {
            "id": new_task_id(),
            "task": item.task,
            "payload": item.payload_text(),
            "max_attempts": item.max_attempts,
            "retry_safe": item.retry_safe,
            "request_bound": item.request_bound,
            "timeout": item.timeout,
            "idempotency_key": item.idempotency_key,
            "queue": item.queue,
            "priority": item.priority,
            "run_at": self._time_param(item.run_at) if item.run_at is not None else None,
            "delay": item.delay,
            "concurrency_key": item.concurrency_key,
            "concurrency_limit": item.concurrency_limit,
            "unique_key": item.unique_key,
            "parent_id": item.parent_id,
            "trace_context": item.trace_context,
        }

    def _inserted(self, item: NewTask, params: dict[str, Any], row: Row) -> Submission:
        return Submission(params["id"], True, partial(self._fresh, item, params, row))

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
            queue=item.queue,
            priority=item.priority,
            concurrency_key=item.concurrency_key,
            unique_key=item.unique_key,
            parent_id=item.parent_id,
        )

    def _insert_many(self, conn: Any, items: list[NewTask]) -> list[Submission]:
        """Many new tasks in one statement (`insert_tasks`, its rows as the dialect
        passes many: `_rows_param`), in batch order; those whose idempotency key is
        taken answer the task holding it (read in one more statement) or conflict."""
        batch = [self._insert_params(i) for i in items]
        rows = self._all(conn, "insert_tasks", **self._rows_param(batch))
        by_id = {r["id"]: r for r in rows}  # RETURNING promises no order
        taken = [p["idempotency_key"] for p in batch if p["id"] not in by_id]
        holders: dict[str, Row] = {}
        if taken:
            found = self._all(conn, "tasks_by_keys", keys=self._list_param(taken))
            holders = {r["idempotency_key"]: r for r in found}
        out: list[Submission] = []
        for item, params in zip(items, batch, strict=True):
            row = by_id.get(params["id"])
            if row is not None:
                out.append(self._inserted(item, params, row))
                continue
            existing = holders[item.idempotency_key]  # type: ignore[index]
            self._existing(existing, item, item.payload_text())
            out.append(Submission.of(self._snapshot(existing), False))
        return out

    def _insert(self, conn: Any, item: NewTask) -> Submission:
        params = self._insert_params(item)
        for _ in range(3):
            row = self._one(conn, "insert_task", **params)
            if row is not None:
                return self._inserted(item, params, row)
            # ON CONFLICT DO NOTHING: a key exists (perhaps committed a moment ago by a
            # concurrent submit, which this statement waited for). The idempotency key
            # is permanent: the same task and payload, or a conflict.
            if item.idempotency_key is not None:
                existing = self._one(conn, "task_by_key", key=item.idempotency_key)
                if existing is not None:
                    self._existing(existing, item, item.payload_text())
                    return Submission.of(self._snapshot(existing), False)
            # The unique key holds only while its task is live: answer that task, or
            # (it finished in between) try the insert again.
            if item.unique_key is not None:
                live = self._one(conn, "task_by_unique", key=item.unique_key)
                if live is not None:
                    return Submission.of(self._snapshot(live), False)
        raise IdempotencyConflict(
            f"task {item.task!r}: its keys kept conflicting with tasks ending meanwhile"
        )

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
            snap, created = self._insert(conn, item).pair()
            claimed = self._one(conn, "claim_id", id=snap.id, owner=owner, lease=lease)
            if claimed is not None:
                snap = self._snapshot(self._one(conn, "get_task", id=snap.id))
        claim = self._claim(claimed, owner, sent) if claimed is not None else None
        return snap, created, claim

    def cancel(self, task_id: str, reason: CancelReason) -> CancelOutcome:
        """queued → cancelled (terminal, outbox row); running → cancel_requested;
        cancel_requested → accepted, unchanged; terminal → not accepted."""
        out = self.cancel_many([task_id], reason)[0]
        if out is None:
            raise TaskNotFound(f"no task with id {task_id!r}")
        return out

    def cancel_many(self, task_ids: list[str], reason: CancelReason) -> list[CancelOutcome | None]:
        """`cancel` of each, in one transaction (a bulk action's batch); None for an
        id the store does not know."""
        out: list[CancelOutcome | None] = []
        with self._write() as conn:
            for task_id in task_ids:
                if self._x(conn, "cancel_queued", id=task_id, reason=reason.value).rowcount:
                    self._x(conn, "insert_outbox", event_id=new_event_id(), task_id=task_id)
                    out.append(CancelOutcome(True, State.CANCELLED))
                elif self._x(conn, "cancel_running", id=task_id, reason=reason.value).rowcount:
                    out.append(CancelOutcome(True, State.CANCEL_REQUESTED))
                else:
                    row = self._one(conn, "get_task", id=task_id)
                    out.append(None if row is None else _unchanged(State(row["state"])))
        return out


def _unchanged(state: State) -> CancelOutcome:
    """A cancel that changed nothing: accepted only if one was asked for already."""
    return CancelOutcome(state is State.CANCEL_REQUESTED, state)
