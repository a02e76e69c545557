"""The store contract: everything the rest of tasklab asks of durable storage, as the
union of its roles (store/roles.py, which says what every method promises); fault
injection; the counters every store keeps."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from tasklab.errors import SessionLost, StoreError
from tasklab.store.roles import (
    Effects,
    Leases,
    Outbox,
    Queues,
    Recovery,
    Retention,
    Schedules,
    Search,
    Signals,
    Submits,
    TaskReads,
    Waits,
    Workers,
)

# What `Store.prune` deletes, table by table, in this order (deliveries are found
# through the outbox, so before it).
PRUNED = ("events", "effects", "signals", "deliveries", "outbox", "tasks")


class Store(
    Submits,
    TaskReads,
    Search,
    Leases,
    Queues,
    Schedules,
    Waits,
    Effects,
    Recovery,
    Outbox,
    Retention,
    Signals,
    Workers,
    Protocol,
):
    """Every role, and the store's own lifetime."""

    url: str

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
