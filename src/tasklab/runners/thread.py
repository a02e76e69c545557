"""`ThreadTaskRunner`: a pool of threads bounded by workers + backlog (seed 001).

Threads cannot be killed: a task that never reaches a checkpoint runs until it
returns. Threads are named `tasklab-worker-…` so that a shutdown can be checked. The
pool (slots.py) has `workers` turns: work beyond them — the backlog, claims ahead —
waits in its line, and a future not started yet can be cancelled.

`ahead` (a worker's runner; 0 when used directly) lets a slot start its next task while
the previous one's terminal write commits: the pool has up to `AHEAD_THREADS` more
threads than `workers`, and a turn is held only while the task function runs, so "concurrency N"
still means at most N task functions at once. A worker claims up
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
from concurrent.futures import Future, InvalidStateError
from functools import partial
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim
from tasklab.core.states import State
from tasklab.errors import TasklabError
from tasklab.runners.base import BaseRunner
from tasklab.runners.slots import Entry, SlotPool

if TYPE_CHECKING:
    from tasklab.engine import EngineLike

THREAD_PREFIX = "tasklab-worker"
AHEAD_WHILE_UNDER = 0.02  # seconds every running task has run, for claims ahead
AHEAD_WAIT = 0.1  # seconds a claim ahead waits for a turn (at most lease/10)
# Threads beyond the turns, at most: a thread that has ended its turn goes on with what
# follows it (handing over or writing a terminal write) while another takes the next
# turn; claims ahead wait in line without a thread (more threads measured no faster).
AHEAD_THREADS = 32


class ThreadTaskRunner(BaseRunner):
    kind = "thread"
    adopts = True  # work beyond the threads waits in the pool's line

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
        self.given_back = 0  # claims ahead given back unstarted (a long wait, a stop)
        self._given_back_on_stop = 0
        self._places: dict[str, Entry] = {}  # lined up, by task id, not yet handed over
        # until its first tasks have run, a worker takes them to be as long as claims
        # ahead allow: a few ahead at first, all of them once they prove short
        self._pool = SlotPool(
            workers,
            workers + min(ahead, AHEAD_THREADS),
            self._run,
            self._give_back,
            THREAD_PREFIX,
            initializer=None if pin_cpu is None else partial(pin_this_thread, pin_cpu),
            mean_run=AHEAD_WHILE_UNDER,
        )

    def _start_task(self, task_id: str) -> Future[Any]:
        return self._put(task_id, None)

    def _start_claim(self, claim: Claim) -> Future[Any]:
        if self.ahead == 0:
            return self._put(claim, None)
        return self._put(claim, time.monotonic() + min(AHEAD_WAIT, self.engine.settings.lease / 10))

    def _put(self, work: str | Claim, until: float | None) -> Future[Any]:
        future: Future[Any] = Future()
        if self.ahead and isinstance(work, str):
            # a worker's transactional task waits its turn as long as it takes and is
            # never cancelled unstarted: still queued, nobody else is kept from it
            future.set_running_or_notify_cancel()
        key = work.task_id if isinstance(work, Claim) else work
        with self._lock:
            place = self._places.pop(key, None)
        try:
            self._pool.put(place, work, future, until)
        except BaseException:
            if place is not None:
                self._pool.leave(place)
            raise
        return future

    def line_up(self, claims: list[Claim]) -> None:
        """Places in line for a batch of claims about to be handed over, taken at once
        in the batch's order (see slots.py)."""
        if self.ahead == 0 or not claims:
            return
        places = self._pool.reserve([c.sent_at for c in claims])
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
            self._pool.leave(place)

    def _run(self, entry: Entry) -> None:
        """A turn: the work's function runs now (in a pool thread)."""
        future, work = entry.future, entry.work
        assert future is not None
        if isinstance(work, str):
            if self.ahead == 0 and not future.set_running_or_notify_cancel():
                return  # cancelled unstarted: `_done` recorded it
            _answer(future, self.engine.run, work)
        elif not future.set_running_or_notify_cancel():
            return  # cancelled unstarted: `_done` gave the claim back
        elif self.ahead == 0:
            _answer(future, self.engine.execute, work)
        else:
            # The claim's future is done when its terminal write has committed, not when
            # its thread is free: the thread hands the write over and takes its next turn.
            try:
                self.engine.execute(
                    work,
                    ended=partial(self._pool.end_own, entry),
                    answered=partial(_settle, future),
                )
            except BaseException as exc:
                with contextlib.suppress(InvalidStateError):  # its commit answered first
                    future.set_exception(exc)

    def _give_back(self, entry: Entry) -> None:
        """Work that waited in line too long (a claim ahead behind long tasks) or that
        the runner will not start (it stops): a claim goes back to the queue for any
        worker, a task id stays queued."""
        future, work = entry.future, entry.work
        assert future is not None
        if isinstance(work, str):
            _answer(future, self.engine.store.get, work)
            return
        if not future.set_running_or_notify_cancel():
            return  # cancelled unstarted: `_done` gave the claim back
        try:
            self.engine.store.release(work)  # never started: queued again
        except TasklabError:
            pass  # the lease will expire and the reaper will requeue it
        with self._lock:
            self.given_back += 1
            self._given_back_on_stop += 1 if self.stopping or self._closing else 0
        _settle(future, None)

    def stop_starting(self) -> None:
        super().stop_starting()
        if self.ahead:
            self._pool.interrupt()

    def cancel_unstarted(self) -> int:
        """The futures not started, and the claims that were waiting for a turn: each
        is given back (waited for, a second at most, so that the count is whole)."""
        cancelled = super().cancel_unstarted()  # stops the starting, gives the line back
        deadline = time.monotonic() + 1.0
        while self._pool.waiting and time.monotonic() < deadline:
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
        if self.ahead == 0 or self._pool.longest_run(time.monotonic()) >= AHEAD_WHILE_UNDER:
            return 0
        served = self.workers * AHEAD_WAIT / 2 / max(self._pool.mean_run, 1e-6)
        return min(self.ahead, int(served))

    def _shutdown_executor(self) -> None:
        self._close(wait=True)

    def _abandon_executor(self) -> None:
        self._close(wait=False)

    def _close(self, wait: bool) -> None:
        if self.ahead:
            self._pool.interrupt()
        for future in self._pool.unstarted():
            future.cancel()  # `_done` records each (a claim released, a task id cancelled)
        self._pool.shutdown(wait)

    def __enter__(self) -> ThreadTaskRunner:
        super().__enter__()
        return self


def _answer(future: Future[Any], fn: Callable[[Any], Any], arg: Any) -> None:
    try:
        result = fn(arg)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


def _settle(settled: Future[Any], state: State | None) -> None:
    with contextlib.suppress(InvalidStateError):  # its thread failed first
        settled.set_result(state)


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
