"""`ThreadTaskRunner`: a ThreadPoolExecutor bounded by workers + backlog (seed 001).

Threads cannot be killed: a task that never reaches a checkpoint runs until it
returns. Threads are named `tasklab-worker-…` so that a shutdown can be checked.

`ahead` (a worker's runner; 0 when used directly) lets a slot start its next task while
the previous one's terminal write commits: the pool has `ahead` more threads than
`workers`, and a gate of `workers` turns is held only while the task function runs,
so "concurrency N" still means at most N task functions at once. A worker claims up
to `ahead` tasks beyond its slots only while every task running now has run less
than `AHEAD_WHILE_UNDER` (short tasks, where a commit is most of a task's time); a
claim waiting for a turn longer than `AHEAD_WAIT` (a task turned out long) is given
back to the queue for any worker to take, as a worker's shutdown gives back what has
not started. At concurrency 1 one fsync'd transaction per task was the bound; now up
to `ahead` + 1 tasks' terminal writes share one.

With claims ahead, a thread hands its task's terminal write to the finisher
(`finish_later`) and goes back to the pool instead of sleeping until the commit and
being woken: per short task that was most of the thread switches (about four per task
before, under one after). The claim's future — its slot — is done only once its write
has committed, so the worker never holds more than `workers + ahead` claims.

`pin_cpu` runs the runner's threads on one CPU. The GIL lets one thread run Python at
a time, so pure-Python tasks lose nothing, and every hand-off between them (a group
commit waking the threads it finished, a claim waking a thread) stays on one core
instead of needing a cross-CPU wake-up — expensive on virtual machines. Tasks that
compute in C without the GIL (hashing, compression, numpy) lose their parallelism, so
it is opt-in.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim, TaskSnapshot
from tasklab.core.states import State
from tasklab.errors import TasklabError
from tasklab.runners.base import BaseRunner
from tasklab.runners.turns import Gate, Place

if TYPE_CHECKING:
    from tasklab.engine import EngineLike

THREAD_PREFIX = "tasklab-worker"
AHEAD_WHILE_UNDER = 0.02  # seconds every running task has run, for claims ahead
AHEAD_WAIT = 0.1  # seconds a claim ahead waits for a turn (at most lease/10)


class ThreadTaskRunner(BaseRunner):
    kind = "thread"
    adopts = True  # work beyond the threads waits in the pool's queue

    def __init__(
        self,
        app: EngineLike,
        workers: int = 1,
        backlog: int = 0,
        pin_cpu: int | None = None,
        ahead: int = 0,
    ) -> None:
        if ahead < 0:
            raise ValueError("ahead must be >= 0")
        super().__init__(app, workers, backlog + ahead)
        self.backlog = backlog
        self.ahead = ahead
        self.pin_cpu = pin_cpu
        if pin_cpu is not None:
            check_cpu(pin_cpu)
        # until its first tasks have run, a worker takes them to be as long as claims
        # ahead allow: a few ahead at first, all of them once they prove short
        self._gate = Gate(workers, mean_run=AHEAD_WHILE_UNDER)
        self.given_back = 0  # claims ahead given back unstarted (a long wait, a stop)
        self._waiting = 0  # claims waiting for a turn now
        self._given_back_on_stop = 0
        self._places: dict[str, Place] = {}  # lined up, by task id, not yet handed over
        self._pool = ThreadPoolExecutor(
            max_workers=workers + ahead,
            thread_name_prefix=THREAD_PREFIX,
            initializer=None if pin_cpu is None else partial(pin_this_thread, pin_cpu),
        )

    def _start_task(self, task_id: str) -> Future[Any]:
        if self.ahead == 0:
            return self._pool.submit(self.engine.run, task_id)
        return self._in_line(self._run_in_turn, task_id)

    def _start_claim(self, claim: Claim) -> Future[Any]:
        if self.ahead == 0:
            return self._pool.submit(self.engine.execute, claim)
        # The claim's future is done when its terminal write has committed, not when
        # its thread is free: the thread hands the write over and takes its next task.
        settled: Future[Any] = Future()
        thread = self._in_line(partial(self._execute_in_turn, settled), claim)
        thread.add_done_callback(partial(_follow, settled))
        return settled

    def line_up(self, claims: list[Claim]) -> None:
        """Places at the gate for a batch of claims about to be handed over, taken at
        once in the batch's order (see turns.py)."""
        if self.ahead == 0 or not claims:
            return
        places = self._gate.take_places([c.sent_at for c in claims])
        with self._lock:
            self._places.update((c.task_id, p) for c, p in zip(claims, places, strict=True))

    def submit_claim(self, claim: Claim) -> Future[Any]:
        try:
            return super().submit_claim(claim)
        except BaseException:
            self.leave_line(claim.task_id)  # not started: its place goes
            raise

    def adopt(self, claim: Claim) -> Future[Any]:
        try:
            return super().adopt(claim)
        except BaseException:
            self.leave_line(claim.task_id)
            raise

    def leave_line(self, task_id: str) -> None:
        with self._lock:
            place = self._places.pop(task_id, None)
        if place is not None:
            self._gate.leave(place)

    def _in_line(self, fn: Callable[[Any, Place], Any], work: str | Claim) -> Future[Any]:
        key = work.task_id if isinstance(work, Claim) else work
        with self._lock:
            place = self._places.pop(key, None)
        if place is None:
            (place,) = self._gate.take_places([time.monotonic()])
        try:
            return self._pool.submit(fn, work, place)
        except BaseException:
            self._gate.leave(place)
            raise

    def _execute_in_turn(self, settled: Future[Any], claim: Claim, place: Place) -> None:
        if not settled.set_running_or_notify_cancel():
            self._gate.leave(place)  # cancelled unstarted: `_done` gave the claim back
            return
        cap = min(AHEAD_WAIT, self.engine.settings.lease / 10)
        with self._lock:
            self._waiting += 1  # until it has its turn, or has been given back
        turn = self._wait_for_turn(place, time.monotonic() + cap)
        if turn:
            with self._lock:
                self._waiting -= 1
            try:
                self.engine.execute(
                    claim, ended=lambda: self._gate.end(place), answered=partial(_settle, settled)
                )
                return
            finally:
                self._gate.end(place)
        try:
            self.engine.store.release(claim)  # never started: queued again
        except TasklabError:
            pass  # the lease will expire and the reaper will requeue it
        with self._lock:
            self._waiting -= 1
            self.given_back += 1
            self._given_back_on_stop += 1 if self.stopping or self._closing else 0
        _settle(settled, None)

    def _run_in_turn(self, task_id: str, place: Place) -> TaskSnapshot:
        """A task id (a worker's transactional task) waits its turn as long as it
        takes: it is still queued, nobody else is kept from it."""
        if not self._wait_for_turn(place, None):
            return self.engine.store.get(task_id)  # stopping: left queued
        try:
            return self.engine.run(task_id)
        finally:
            self._gate.end(place)

    def _wait_for_turn(self, place: Place, until: float | None) -> bool:
        """True once the place's turn has begun; False when it is to be given up (it
        waited until `until`, or the worker stops — checked after a turn is had)."""
        turn = self._gate.wait(place, None if until is None else until - time.monotonic())
        if turn and not (self._closing or self.stopping):
            return True
        self._gate.leave(place)
        return False

    def stop_starting(self) -> None:
        super().stop_starting()
        self._gate.interrupt()

    def cancel_unstarted(self) -> int:
        """The futures not started, and the claims that were waiting for a turn: each
        is woken and gives itself back (waited for, a second at most, so that the
        count is whole)."""
        cancelled = super().cancel_unstarted()  # stops the starting, wakes the line
        deadline = time.monotonic() + 1.0
        while self._waiting and time.monotonic() < deadline:
            time.sleep(0.005)
        with self._lock:
            return cancelled + self._given_back_on_stop

    @property
    def free_slots(self) -> int:
        """Free slots, counting the claims ahead only while every task function
        running now is short."""
        with self._lock:
            return self.workers + self.backlog + self._ahead_now() - len(self._work)

    def _ahead_now(self) -> int:
        """0 while a task function running now has run `AHEAD_WHILE_UNDER`; else as
        many as get a turn within half of `AHEAD_WAIT` at the recent run times (more
        would only be claimed and given back)."""
        if self.ahead == 0 or self._gate.longest_run(time.monotonic()) >= AHEAD_WHILE_UNDER:
            return 0
        served = self.workers * AHEAD_WAIT / 2 / max(self._gate.mean_run, 1e-6)
        return min(self.ahead, int(served))

    def _shutdown_executor(self) -> None:
        self._gate.interrupt()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _abandon_executor(self) -> None:
        self._gate.interrupt()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ThreadTaskRunner:
        super().__enter__()
        return self


def _settle(settled: Future[Any], state: State | None) -> None:
    with contextlib.suppress(InvalidStateError):  # its thread failed first
        settled.set_result(state)


def _follow(settled: Future[Any], thread: Future[Any]) -> None:
    """A claim's thread is done: cancelled before it ran (a shutdown), the claim is
    too; raised, that is the claim's answer unless its commit answered first."""
    if thread.cancelled():
        settled.cancel()
        return
    exc = thread.exception()
    if exc is not None:
        with contextlib.suppress(InvalidStateError):
            settled.set_exception(exc)


def check_cpu(cpu: int) -> None:
    """ValueError unless this process may run threads on `cpu`."""
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("pinning threads to a CPU needs Linux (sched_setaffinity)")
    allowed = sorted(os.sched_getaffinity(0))
    if cpu not in allowed:
        raise ValueError(f"CPU {cpu} is not available to this process; it may use {allowed}")


def pin_this_thread(cpu: int) -> None:
    """Run the calling thread on `cpu` from now on; threads it starts inherit this."""
    os.sched_setaffinity(0, {cpu})  # 0: the calling thread only (Linux affinity is per thread)
