"""Leases: claiming, renewing, fenced events and terminal writes (alone, grouped, with
the next claims), giving claims back."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from typing import Any

from tasklab._types import PendingEvent
from tasklab.core.jsontext import dumps
from tasklab.core.models import (
    Claim,
    ClaimRequest,
    Outcome,
)
from tasklab.core.policy import settle
from tasklab.core.states import ErrorCode, State
from tasklab.errors import LeaseLost
from tasklab.store.ids import new_event_id
from tasklab.store.shared.claims import SqlClaims
from tasklab.store.shared.core import lease_lost

NO_WAIT = "a request-bound task cannot wait: it runs in its request, which no worker resumes"


class SqlLeases(SqlClaims):
    """The `Leases` role."""

    def claim(
        self,
        names: list[str],
        limit: int,
        owner: str,
        lease: float,
        *,
        queues: list[str] | None = None,
        keyed: tuple[str, ...] = (),
    ) -> list[Claim]:
        """Up to `limit` runnable tasks of `names` in `queues` (None: every queue), by
        priority then run_after, within every queue's and key's limits."""
        if not names or limit <= 0:
            return []
        request = ClaimRequest(names, limit, owner, lease, queues, keyed)
        sent = time.monotonic()
        rows = self._claim_once(request)
        if len(rows) < limit and self.view_is_stale():
            # short on a view read a while ago: a queue may have got its first tasks
            self.forget_queue_view()
            rows += self._claim_once(dataclasses.replace(request, limit=limit - len(rows)))
        self.faults.check("claim_answer")
        return [self._claim(r, owner, sent) for r in rows]

    def _claim_once(self, request: ClaimRequest) -> list[Any]:
        served = self._served(request)
        if not served:  # no queue known: stage what came due, and look again
            self._stage()
            self.forget_queue_view()
            served = self._served(request)
        queue = self._open_queue(request, served) if served else None
        if queue is not None:  # one statement (PostgreSQL: no BEGIN/COMMIT round trips)
            rows = self._write_steps(self._open_steps(self._open_params(request, queue)))[-1]
            self._note_claimed(request, len(rows))
            return rows
        with self._write() as conn:
            return self._claim_rows(conn, request)

    def claim_id(self, task_id: str, owner: str, lease: float) -> Claim | None:
        sent = time.monotonic()
        with self._write() as conn:
            row = self._one(conn, "claim_id", id=task_id, owner=owner, lease=lease)
        self.faults.check("claim_answer")
        return self._claim(row, owner, sent) if row else None

    def queued_ids(
        self, names: list[str], limit: int, queues: list[str] | None = None
    ) -> list[str]:
        served = queues if queues is not None else list(self.queue_view().known)
        if not names or not served:
            return []
        with self._read() as conn:
            rows = self._all(
                conn,
                "queued_ids",
                names=self._list_param(names),
                queues=self._list_param(served),
                limit=limit,
            )
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
            rows = self._claim_rows(conn, refill) if refill else []
        self.faults.check("finish_answer")
        return results, [self._claim(r, refill.owner, sent) for r in rows] if refill else []

    def _finish_in(
        self, conn: Any, items: list[tuple[Claim, Outcome, list[PendingEvent]]]
    ) -> list[State | LeaseLost]:
        """A batch in four statements whatever its size (four round trips on
        PostgreSQL): one fencing read for every claim (locking each row it passes until
        the commit, so the settlements cannot miss), then the events, the settlements
        (which write the event counters the fence answered) and the outbox rows as
        `executemany`s."""
        # a suspend takes its task's lock before the fence takes the row (a signal
        # takes them in that order too)
        for task_id in sorted(c.task_id for c, o, _ in items if o.kind == "suspend"):
            self._x(conn, "task_lock", task_id=task_id)
        results: list[State | LeaseLost] = []
        events: list[dict[str, Any]] = []
        settles: list[dict[str, Any]] = []
        outbox: list[dict[str, Any]] = []
        fence = [{"id": c.task_id, "epoch": c.epoch, "n": len(evs)} for c, _, evs in items]
        rows = self._all(conn, "fence_many", **self._rows_param(fence))
        fenced = {(r["id"], r["epoch"]): r for r in rows}
        for claim, outcome, evs in items:
            row = fenced.get((claim.task_id, claim.epoch))
            if row is None:
                results.append(lease_lost(claim))
                continue
            seq = int(row["event_seq"])
            events += self._event_params(claim, seq - len(evs) + 1, evs)
            current = State(row["state"])
            settled = settle(current, outcome)
            if settled.state is State.WAITING:
                results.append(self._suspend(conn, claim, current, settled.wait or {}, seq))
                continue
            settles.append(self._settle_params(claim.task_id, claim.epoch, current, settled, seq))
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

    def _suspend(
        self,
        conn: Any,
        claim: Claim,
        current: State,
        wait: dict[str, Any],
        event_seq: int | None = None,
    ) -> State:
        """End a fenced execution into its wait, with the wait's journal record, under
        the task's lock (taken before the fence): `waiting`, or `queued` at once when
        what it waits for came meanwhile (a signal, the children's ends, the time).
        `event_seq` as in `_settle_params`."""
        self._x(
            conn,
            "journal_wait",
            task_id=claim.task_id,
            key=wait["key"],
            result=dumps(wait.get("record") or {}),
            attempt=claim.attempt,
        )
        wake = wait.get("wake_at")
        row = self._one(
            conn,
            "suspend",
            id=claim.task_id,
            epoch=claim.epoch,
            kind=wait["kind"],
            name=wait.get("name"),
            ids=dumps(wait["children"]) if wait.get("children") else None,
            wake_at=self._time_param(_parse_time(wake)) if wake else None,
            event_seq=event_seq,
        )
        if row is None:  # fenced here, so: a request-bound task, whose request ran it
            refused = settle(current, Outcome.failed(ErrorCode.TASK_ERROR, NO_WAIT))
            self._apply(conn, claim.task_id, claim.epoch, current, refused, "finish", event_seq)
            return refused.state
        return State(row["state"])

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


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
