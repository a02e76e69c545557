"""The monitor: one thread per app that keeps every local execution's promises.

Every few milliseconds it flushes buffered events that are older than the flush
interval, renews leases every lease/3 (without the task's cooperation — a sync task in
a tight loop keeps its lease), turns a passed `timeout` into a `deadline` cancel
request, and delivers cancel requests made by other processes: when the store reports
a change, it re-reads the states of the tasks it runs.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from tasklab.core.states import CancelReason, State

if TYPE_CHECKING:
    from tasklab.app import TaskApp
    from tasklab.execution import Execution

TICK = 0.005
# Re-reading the states of the tasks we run on every commit would cost a query per
# commit; at most every 10 ms is prompt enough for a cancel and cheap under load.
CANCEL_CHECK = 0.01


class Monitor:
    def __init__(self, app: TaskApp) -> None:
        self.app = app
        self._active: dict[str, Execution] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, execution: Execution) -> None:
        with self._lock:
            self._active[execution.task_id] = execution
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                self._thread = threading.Thread(
                    target=self._loop, name="tasklab-monitor", daemon=True
                )
                self._thread.start()

    def remove(self, execution: Execution) -> None:
        with self._lock:
            if self._active.get(execution.task_id) is execution:
                del self._active[execution.task_id]

    def get(self, task_id: str) -> Execution | None:
        with self._lock:
            return self._active.get(task_id)

    def snapshot(self) -> list[Execution]:
        with self._lock:
            return list(self._active.values())

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        token = self.app.store.change_token()
        next_check = 0.0
        while not self._stopped:
            self._wake.wait(TICK)
            active = self.snapshot()
            if not active:
                continue
            now = time.monotonic()
            # Nothing can be due before the first flush interval, heartbeat or timeout
            # of an execution: short tasks (most of them under load) are skipped.
            settings = self.app.settings
            quiet = min(settings.flush_interval, settings.heartbeat_every)
            for ex in active:
                age = now - ex.started
                if age < quiet and (ex.task.timeout is None or age <= ex.task.timeout):
                    continue
                self._tend(ex, now)
            fresh = self.app.store.change_token()
            if fresh != token and now >= next_check:
                token = fresh
                next_check = now + CANCEL_CHECK
                self._deliver_cancels(active)

    def _tend(self, ex: Execution, now: float) -> None:
        settings = self.app.settings
        try:
            if ex.flush_due(now):
                ex.flush()
            if now - ex.last_beat >= settings.heartbeat_every:
                ex.beat()
            timeout = ex.task.timeout
            if timeout is not None and not ex.cancel_flag.is_set() and now - ex.started > timeout:
                self.app.store.cancel(ex.task_id, CancelReason.DEADLINE)
                ex.request_stop(CancelReason.DEADLINE)
        except Exception:  # noqa: S110 - the monitor must outlive any one failure
            pass  # a lost authority is recorded on the execution; the lease decides the rest

    def _deliver_cancels(self, active: list[Execution]) -> None:
        try:
            states = self.app.store.states_of([ex.task_id for ex in active])
        except Exception:
            return
        for ex in active:
            if states.get(ex.task_id) is State.CANCEL_REQUESTED and not ex.cancel_flag.is_set():
                ex.request_stop(None)
