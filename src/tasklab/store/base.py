"""The store contract: everything the rest of tasklab asks of durable storage.

Every method is one short transaction. Methods that take a `Claim` are *fenced*: they
succeed only while the claim's epoch is the task's epoch, the task is live and its
lease has not expired by the database clock; otherwise they raise `LeaseLost` and
change nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from tasklab._types import PendingEvent
from tasklab.core.models import (
    JSON,
    CancelOutcome,
    Claim,
    ClaimRequest,
    EffectRecord,
    Event,
    NewTask,
    Outcome,
    Page,
    TaskSnapshot,
)
from tasklab.core.policy import Backoff
from tasklab.core.states import CancelReason, State
from tasklab.errors import LeaseLost, SessionLost, StoreError

# What `Store.prune` deletes, table by table, in this order (deliveries are found
# through the outbox, so before it).
PRUNED = ("events", "effects", "deliveries", "outbox", "tasks")


class TxPort(Protocol):
    """What a transactional task's context may do inside the open transaction."""

    connection: Any

    def append_events(self, events: list[PendingEvent]) -> int: ...


class Store(Protocol):
    url: str

    # -- submitting and reading
    def submit(self, items: list[NewTask]) -> list[tuple[TaskSnapshot, bool]]: ...
    def submit_and_claim(
        self, item: NewTask, owner: str, lease: float
    ) -> tuple[TaskSnapshot, bool, Claim | None]: ...
    def get(self, task_id: str) -> TaskSnapshot: ...
    def page(self, state: State | None, limit: int, cursor: str | None) -> Page: ...
    def counts(self) -> dict[str, int]: ...
    def states_of(self, task_ids: list[str]) -> dict[str, State]: ...
    def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Event]: ...
    def cancel(self, task_id: str, reason: CancelReason) -> CancelOutcome: ...

    # -- executing (fenced)
    def claim(self, names: list[str], limit: int, owner: str, lease: float) -> list[Claim]: ...
    def claim_id(self, task_id: str, owner: str, lease: float) -> Claim | None: ...
    def queued_ids(self, names: list[str], limit: int) -> list[str]: ...
    def seconds_until_runnable(self, names: list[str]) -> float | None: ...
    def heartbeat(self, claim: Claim, lease: float) -> State | None: ...
    def append_events(self, claim: Claim, events: list[PendingEvent]) -> int: ...
    def finish(self, claim: Claim, outcome: Outcome, events: list[PendingEvent]) -> State: ...
    def finish_many(
        self, items: list[tuple[Claim, Outcome, list[PendingEvent]]]
    ) -> list[State | LeaseLost]: ...
    def finish_and_claim(
        self, items: list[tuple[Claim, Outcome, list[PendingEvent]]], refill: ClaimRequest | None
    ) -> tuple[list[State | LeaseLost], list[Claim]]: ...
    def release(self, claim: Claim) -> bool: ...
    def release_owned(self, owner: str) -> list[str]: ...
    def effect_get(self, task_id: str, key: str) -> EffectRecord: ...
    def effect_start(self, claim: Claim, key: str) -> None: ...
    def effect_done(self, claim: Claim, key: str, result: JSON) -> None: ...
    def run_transactional(
        self, task_id: str, owner: str, body: Callable[[TxPort, Claim], Outcome]
    ) -> State | None: ...

    # -- recovery
    def expire(self, backoff: Backoff) -> list[str]: ...
    def recover_running(self, backoff: Backoff) -> list[str]: ...
    def executor_presence(self) -> AbstractContextManager[None]: ...
    def register_worker(self, worker_id: str) -> None: ...
    def unregister_worker(self, worker_id: str) -> None: ...
    def workers(self) -> list[dict[str, JSON]]: ...

    # -- health, notifications, wake-ups
    def bump(self, name: str, n: int = 1) -> None: ...
    def counters(self) -> dict[str, int]: ...
    def subscribe(self, urls: list[str]) -> list[str]: ...
    def unsubscribe(self, url: str) -> bool: ...
    def webhooks(self) -> dict[str, int]: ...
    def outbox_pending(self, url: str, limit: int) -> list[dict[str, JSON]]: ...
    def record_delivery(
        self, event_id: str, url: str, ok: bool, delay: float, error: str | None
    ) -> None: ...
    def notification_lag(self, url: str) -> float: ...
    def outbox_for(self, task_id: str) -> dict[str, JSON] | None: ...
    def now(self) -> datetime: ...
    def prune(self, before: datetime, limit: int) -> dict[str, int]: ...
    def change_token(self) -> int: ...
    def wait_change(self, token: int, timeout: float) -> int: ...
    def wake(self) -> None: ...
    def close(self, timeout: float = 5.0) -> None: ...


class Faults:
    """Fault injection for tests, without mocking the store (docs/design.md §6).

    `store.faults.arm("finish")` makes the next terminal write raise `StoreError`
    before it commits; `arm("finish", times=3)` the next three; `lost=True` raises
    `SessionLost` instead, as a broken session would. Points: `finish`,
    `append_events`, `heartbeat`, `delivery_record`, and four after a commit, where the
    write is made and its answer lost with the session (`SessionLost`):
    `finish_answer` (a terminal write and the claims made with it), `claim_answer`,
    `submit_answer` and `append_events_answer`. In a child process set
    `TASKLAB_FAULTS="finish:1,heartbeat:2"`.
    """

    AFTER_COMMIT = frozenset(
        {"finish_answer", "claim_answer", "submit_answer", "append_events_answer"}
    )
    POINTS = frozenset({"finish", "append_events", "heartbeat", "delivery_record"}) | AFTER_COMMIT

    def __init__(self) -> None:
        # point -> (writes left to fail, delay, raise SessionLost)
        self._armed: dict[str, tuple[int, float, bool]] = {}
        self.fired: dict[str, int] = {}  # faults raised per point: a test can see it bit
        self._lock = threading.Lock()
        for item in filter(None, os.environ.get("TASKLAB_FAULTS", "").split(",")):
            point, _, times = item.partition(":")
            self.arm(point.strip(), int(times or 1))

    def arm(self, point: str, times: int = 1, delay: float = 0.0, lost: bool = False) -> None:
        """Fail the next `times` writes at `point`, each after `delay` seconds (a write
        that hangs, then fails — as a locked database would)."""
        if point not in self.POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {sorted(self.POINTS)}")
        with self._lock:
            left = self._armed.get(point, (0, 0.0, False))[0]
            self._armed[point] = (left + times, delay, lost or point in self.AFTER_COMMIT)

    def check(self, point: str) -> None:
        if point not in self._armed:  # every write passes here: no lock unless armed
            return
        with self._lock:
            left, delay, lost = self._armed.pop(point, (0, 0.0, False))
            if left <= 0:
                return
            if left > 1:
                self._armed[point] = (left - 1, delay, lost)
            self.fired[point] = self.fired.get(point, 0) + 1
        if delay:
            time.sleep(delay)
        raise (SessionLost if lost else StoreError)(f"injected fault at {point!r}")


def counter_names() -> Iterator[str]:
    """The counters every store keeps: recovery health (docs/design.md §3), deliveries,
    retention."""
    yield from (
        "expired_leases",
        "rejected_stale_writes",
        "terminal_write_failures",
        "notifications_delivered",
        "delivery_failures",
        "tasks_pruned",
        "lost_claims_released",
        "lease_deadline_stops",
    )
