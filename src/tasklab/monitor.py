"""The monitor: one thread per engine that keeps every local execution's promises.

Every few milliseconds it enforces each execution's local lease deadline (past it
without a confirmed renewal the task is told to stop — a partition or a paused
process must not leave a body running beside the retry the reaper will allow), turns
a passed `timeout` into a `deadline` cancel request, and hands the I/O — flushing
buffered events older than the flush interval, renewing leases every lease/3 (without
the task's cooperation: a sync task in a tight loop keeps its lease), re-reading the
states of its tasks when the store reports a change (cancel requests made by other
processes) — to I/O threads, at most one call in flight per execution. A call that
hangs on a silent network therefore never holds up the deadlines of the others.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tasklab import tracing
from tasklab.core.models import Claim
from tasklab.core.states import CancelReason, State
from tasklab.store.roles import Signals, Submits, TaskReads

if TYPE_CHECKING:
    from tasklab.engine import Engine
    from tasklab.execution import Execution

log = logging.getLogger("tasklab.monitor")
TICK = 0.005
# Re-reading the states of the tasks we run on every commit would cost a query per
# commit; at most every 10 ms is prompt enough for a cancel and cheap under load.
CANCEL_CHECK = 0.01
IO_THREADS = 8


class _MonitorStore(Submits, TaskReads, Signals, Protocol):
    """The store roles used here: deadline cancels, the states of running tasks, wake-ups."""


class IoThreads:
    """A few daemon threads for the monitor's database calls. Daemons: one stuck on a
    dead connection must not hold the process's exit up."""

    def __init__(self, n: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None]
        self._queue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"tasklab-monitor-io-{i}", daemon=True)
            for i in range(n)
        ]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self._queue.put((fn, args))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # the monitor's I/O must outlive any one failure
                log.debug("monitor I/O failed: %s", exc)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


class Monitor:
    @property
    def store(self) -> _MonitorStore:
        return self.engine.store

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._active: dict[str, Execution] = {}
        self._busy: set[str] = set()  # executions with a call in flight
        self._renewals: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._io: IoThreads | None = None
        self._stopped = False

    def add(self, execution: Execution) -> None:
        with self._lock:
            self._active[execution.task_id] = execution
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                if self._io is not None:
                    self._io.stop()
                self._io = IoThreads(IO_THREADS)
                self._thread = threading.Thread(
                    target=self._loop, name="tasklab-monitor", daemon=True
                )
                self._thread.start()

    def remove(self, execution: Execution) -> None:
        with self._lock:
            if self._active.get(execution.task_id) is execution:
                del self._active[execution.task_id]

    def watching(self, execution: Execution) -> _Watching:
        """Keep an execution's promises (deadline, heartbeats, flushes) while inside."""
        return _Watching(self, execution)

    def get(self, task_id: str) -> Execution | None:
        with self._lock:
            return self._active.get(task_id)

    def snapshot(self) -> list[Execution]:
        with self._lock:
            return list(self._active.values())

    # ---- renewals of claims that have not started yet ---------------------------------
    def note_renewal(self, claim: Claim, sent: float) -> None:
        """A claim waiting in a backlog was renewed by a statement sent at `sent`: its
        execution's local deadline counts from there, not from the claim."""
        with self._lock:
            self._renewals[(claim.task_id, claim.epoch)] = sent

    def renewal_of(self, claim: Claim) -> float:
        with self._lock:
            return self._renewals.pop((claim.task_id, claim.epoch), 0.0)

    def in_background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a database call off the calling thread (which may be a task's)."""
        io = self._io
        if io is not None:
            io.submit(fn, *args)
        else:
            threading.Thread(target=fn, args=args, daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._io is not None:
            self._io.stop()

    # ---- the loop ------------------------------------------------------------------
    def _loop(self) -> None:
        token = self.store.change_token()
        next_check = 0.0
        while not self._stopped:
            self._wake.wait(TICK)
            active = self.snapshot()
            if not active:
                continue
            now = time.monotonic()
            # Nothing but a deadline can be due before the first flush interval,
            # heartbeat or timeout of an execution: short tasks (most of them under
            # load) cost one comparison.
            settings = self.engine.settings
            quiet = min(settings.flush_interval, settings.heartbeat_every)
            for ex in active:
                if ex.past_deadline(now):
                    continue
                age = now - ex.started
                if age < quiet and (ex.task.timeout is None or age <= ex.task.timeout):
                    continue
                self._tend(ex, now)
            fresh = self.store.change_token()
            if fresh != token and now >= next_check:
                token = fresh
                next_check = now + CANCEL_CHECK
                self._call("__cancels__", self._deliver_cancels, active)

    def _tend(self, ex: Execution, now: float) -> None:
        settings = self.engine.settings
        timeout = ex.task.timeout
        if timeout is not None and not ex.cancel_flag.is_set() and now - ex.started > timeout:
            self._call(ex.task_id, self._deadline_cancel, ex)
            return
        flush = ex.flush_due(now)
        beat = now - ex.last_beat >= settings.heartbeat_every
        if flush or beat:
            self._call(ex.task_id, _io_round, ex, flush, beat)

    def _call(self, key: str, fn: Callable[..., Any], *args: Any) -> None:
        """At most one call in flight per key (an execution, or the cancel check)."""
        with self._lock:
            if key in self._busy or self._io is None:
                return
            self._busy.add(key)
        io = self._io

        def run() -> None:
            try:
                fn(*args)
            finally:
                with self._lock:
                    self._busy.discard(key)

        io.submit(run)

    def _deadline_cancel(self, ex: Execution) -> None:
        # recorded first: the task's cancelled outcome settles from cancel_requested
        self.store.cancel(ex.task_id, CancelReason.DEADLINE)
        ex.request_stop(CancelReason.DEADLINE)

    def _deliver_cancels(self, active: list[Execution]) -> None:
        states = self.store.states_of([ex.task_id for ex in active])
        for ex in active:
            if states.get(ex.task_id) is State.CANCEL_REQUESTED and not ex.cancel_flag.is_set():
                ex.request_stop(None)


def _io_round(ex: Execution, flush: bool, beat: bool) -> None:
    # a lost authority is recorded on the execution; the lease decides the rest
    if flush:
        ex.flush()
    if beat:
        ex.beat()


class _Watching:
    """`Monitor.watching` (a class, not a generator: it wraps every task's run)."""

    __slots__ = ("_execution", "_monitor")

    def __init__(self, monitor: Monitor, execution: Execution) -> None:
        self._monitor = monitor
        self._execution = execution

    def __enter__(self) -> Execution:
        self._monitor.add(self._execution)
        if tracing.enabled():  # the attempt's spans, in the submitter's trace
            ex = self._execution
            claim = ex.claim
            attributes = {
                "tasklab.task_id": claim.task_id,
                "tasklab.task": claim.task,
                "tasklab.attempt": claim.attempt,
                "tasklab.epoch": claim.epoch,
                "tasklab.worker": claim.owner,
            }
            stored = ex.engine.store.trace_context(claim.task_id)
            ex.span = tracing.ExecutionSpan(stored, attributes, claim.sent_at or time.monotonic())
        return self._execution

    def __exit__(self, *exc: object) -> None:
        self._monitor.remove(self._execution)
        span = self._execution.span
        if span is not None:
            settled = self._execution.settled
            span.end(settled.value if settled is not None else None)
