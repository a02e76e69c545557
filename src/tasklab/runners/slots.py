"""The thread runner's pool: threads, a line in claim order, and N turns (seed 001).

At most `turns` pieces of work hold a turn at once (a task function running), handed
out in claim order — by when the claiming statement was sent, then the claim's place
in its batch (the store's order: priorities, then submit order) — so a claim made
ahead never overtakes an earlier one, even when a terminal transaction's claims are
handed over before the claim loop has lined up all of an earlier batch: a batch's
places are `reserve`d at once, before any of it can start, and a turn granted to a
place whose work has not been `put` yet waits for it.

The pool has more threads than turns (a thread runner's claims ahead): a thread that
has ended its turn goes on with what follows (handing over a terminal write, or
writing a group commit) while another thread takes the next turn. Work waiting in
line past its `until` (a claim ahead behind tasks that turned out long), and after
`interrupt` everything not started, is handed to `give_back` in a pool thread.

Why not a `ThreadPoolExecutor` with a gate in front (as before): there each task
paid for a second future (the pool's work item beside the claim's own), a work queue,
an idle semaphore and a thread of its own parked on its place in line. Here a turn is
taken by whichever thread is free — most often the one whose turn just ended — and
threads are woken one at a time, each waking the next once it has work: woken all at
once for a batch of claims, most found it taken by the first ones back (0.8 wasted
wake-ups per no-op task, measured). Draining 10,000 no-op tasks in one process, CPU per
task fell from 364-408 to 330-339 µs and thread switches from 1.2-1.3 to 0.9-1.0.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from tasklab.groupcommit import when_kept

WATCH_TICK = 0.02  # seconds between the timer's looks while work waits with an `until`

# Pool threads are not daemons (a task runs until it returns, as a ThreadPoolExecutor's
# would): at the interpreter's exit, idle ones are told to end so that it can.
_POOLS: weakref.WeakSet[SlotPool] = weakref.WeakSet()


def _at_exit() -> None:
    for pool in list(_POOLS):
        pool.shutdown(wait=False)


getattr(threading, "_register_atexit")(_at_exit)  # noqa: B009 - private, as concurrent.futures uses it


class Entry:
    """One piece of work in line: its place, then its turn."""

    __slots__ = ("future", "granted", "left", "order", "since", "until", "work")

    def __init__(self, order: tuple[float, int]) -> None:
        self.order = order
        self.work: Any = None  # None: reserved, not handed over yet
        self.future: Future[Any] | None = None
        self.until: float | None = None  # given back if still in line then
        self.granted = False
        self.left = False  # out of line before its turn (given back, or never put)
        self.since = 0.0  # when its turn began

    def __lt__(self, other: Entry) -> bool:
        return self.order < other.order


class SlotPool:
    def __init__(
        self,
        turns: int,
        threads: int,
        run: Callable[[Entry], None],
        give_back: Callable[[Entry], None],
        name: str,
        initializer: Callable[[], None] | None = None,
        mean_run: float = 0.0,
    ) -> None:
        self._run_turn = run
        self._give_back = give_back
        self._name = name
        self._initializer = initializer
        self._max_threads = threads
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for something to do
        # threads woken or started that have not yet looked for work: no more are
        # woken while they cover what is ready (each extra one would wake for nothing)
        self._coming = 0
        # threads that ended their own turn and will be back for the next: no thread is
        # woken for ready work they will take (unless one leads a group commit first)
        self._returning = 0
        self._local = threading.local()
        # `with self._lock` where no wait or notify follows: a Condition's own
        # __enter__ is a Python call more, on every hand-over
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._free = turns
        self._line: list[Entry] = []  # a heap by claim order, without a turn yet
        self._ready: deque[Entry] = deque()  # with a turn and work: for the next thread
        self._returns: deque[Entry] = deque()  # to be given back by the next thread
        self._deadlines: deque[Entry] = deque()  # in line with an `until`, as put
        self._running: set[Entry] = set()  # holding a turn
        self._seq = itertools.count()
        # One thread of its own watches the `until`s (a pool thread waiting with a
        # timeout would be woken for work, and the next would take over the watch):
        # see `_watch`.
        self._timer_wake = threading.Event()
        self._timer_idle = True
        self._timer: threading.Thread | None = None
        self._interrupted = False
        self._closed = False
        self.waiting = 0  # put, neither started nor given back yet
        self.mean_run = mean_run  # seconds a turn lasted, recently (a mean over ~16)
        _POOLS.add(self)

    # ---- the line --------------------------------------------------------------------
    def reserve(self, sent_at: list[float]) -> list[Entry]:
        """Places for work about to be put, in the order given (a batch's places all at
        once, before any of its work can start)."""
        entries = [Entry((sent, next(self._seq))) for sent in sent_at]
        with self._lock:
            for entry in entries:
                heapq.heappush(self._line, entry)
            self._grant()
        return entries

    def put(self, entry: Entry | None, work: Any, future: Future[Any], until: float | None) -> None:
        """Hand work over, at its reserved place or (None) at the end of the line."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            if entry is None:
                entry = Entry((time.monotonic(), next(self._seq)))
                heapq.heappush(self._line, entry)
            entry.work, entry.future, entry.until = work, future, until
            self.waiting += 1
            if until is not None:
                self._deadlines.append(entry)
                if self._timer is None:
                    self._timer = threading.Thread(
                        target=self._watch, name=f"{self._name}-timer", daemon=True
                    )
                    self._timer.start()
            if self._interrupted:
                self._drop_turn(entry)
                self._returns.append(entry)
                entry.left = True
            elif entry.granted:
                self._ready.append(entry)
            else:
                self._grant()
            if self._ready or self._returns:
                self._wake()
            if until is not None and self._timer_idle:
                self._timer_idle = False
                self._timer_wake.set()

    def leave(self, entry: Entry) -> None:
        """A reserved place that will not be put after all: out of line (a turn
        already granted to it goes on)."""
        with self._lock:
            if entry.work is not None:
                return
            if entry.granted:
                self._end(entry, wake=True)
            else:
                entry.left = True

    def end(self, entry: Entry) -> None:
        """The turn's function has ended: the next place in line gets the turn. Once
        only counts."""
        with self._lock:
            self._end(entry, wake=True)

    def end_own(self, entry: Entry) -> None:
        """`end`, called by the thread whose turn it was, which comes back for more
        once it has handed its write over: no thread is woken for the turn it will take
        (a short task's wake-up saved). Should a group commit keep it first (to lead
        or to wait for one), it stops being counted on (`_not_returning`); other work
        on its way back (an inline flush of a large buffer of events) can hold that
        turn up for one store call."""
        with self._lock:
            if not getattr(self._local, "returning", False):
                self._local.returning = True
                self._returning += 1
            self._end(entry, wake=True)

    def longest_run(self, now: float) -> float:
        """How long the longest-running turn has lasted so far (0: none)."""
        with self._lock:
            return max((now - e.since for e in self._running if e.work is not None), default=0.0)

    def interrupt(self) -> None:
        """Start nothing more: whatever is in line or has a turn without a thread yet
        is given back."""
        with self._lock:
            self._interrupted = True
            for entry in [*self._ready, *self._line]:
                self._drop_turn(entry)
                if entry.work is not None and not entry.left:
                    entry.left = True
                    self._returns.append(entry)
            self._ready.clear()
            self._line.clear()
            self._cond.notify_all()

    def unstarted(self) -> list[Future[Any]]:
        with self._lock:
            entries = [*self._ready, *self._line, *self._returns]
        return [e.future for e in entries if e.future is not None and not e.left]

    def shutdown(self, wait: bool) -> None:
        """No more work; threads end once nothing is left to give back (running work
        finishes first). Cancel the futures of `unstarted` work before this."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            self._cond.notify_all()
        self._timer_wake.set()
        if wait:
            if self._timer is not None:
                threads.append(self._timer)
            for t in threads:
                if t is not threading.current_thread():
                    t.join()

    # ---- under the lock ----------------------------------------------------------------
    def _grant(self) -> None:
        while self._free > 0 and self._line and not self._interrupted:
            entry = heapq.heappop(self._line)
            if entry.left:
                continue
            self._free -= 1
            entry.granted = True
            entry.since = time.monotonic()
            self._running.add(entry)
            if entry.work is not None:
                self._ready.append(entry)

    def _drop_turn(self, entry: Entry) -> None:
        """A turn granted to work that will not run (interrupted) is free again."""
        if entry in self._running:
            self._running.discard(entry)
            self._free += 1

    def _end(self, entry: Entry, wake: bool) -> None:
        if entry not in self._running:
            return
        self._running.discard(entry)
        self.mean_run += (time.monotonic() - entry.since - self.mean_run) / 16
        self._free += 1
        self._grant()
        if self._ready and wake:
            self._wake()

    def _not_returning(self) -> None:
        """This thread will not be back soon (a group commit keeps it): a thread for
        the work it would have taken."""
        if getattr(self._local, "returning", False):
            with self._lock:
                self._back()
                self._wake()

    def _back(self) -> None:
        if getattr(self._local, "returning", False):
            self._local.returning = False
            self._returning -= 1

    def _wake(self) -> None:
        """A thread for the work ready now: one at a time — the thread woken, having
        taken its work, wakes the next if work is left (`_next`). Woken all at once for
        a batch of short tasks, most would find it taken by the first ones back."""
        if self._coming or self._returning >= len(self._ready) + len(self._returns):
            return
        if self._idle:
            self._coming += 1
            self._cond.notify()
        elif len(self._threads) < self._max_threads:
            self._coming += 1
            thread = threading.Thread(target=self._loop, name=f"{self._name}_{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def _expire(self, now: float) -> float | None:
        """Entries in line past their `until` go to be given back; the time until the
        next one is due (None: none waits). Entries are looked at in the order they
        were put: the same wait for all (a runner's cap), so the order of their `until`."""
        due = self._deadlines
        while due:
            entry = due[0]
            if entry.granted or entry.left:
                due.popleft()
            elif entry.until is not None and entry.until <= now:
                due.popleft()
                entry.left = True
                self._returns.append(entry)
            else:
                return None if entry.until is None else entry.until - now
        return None

    def _next(self) -> tuple[Entry | None, bool]:
        """What this thread does next: (entry, True) run its turn, (entry, False) give
        it back, (None, _) end."""
        self._back()
        while True:
            if self._returns:
                return self._returns.popleft(), False
            if self._ready:
                entry = self._ready.popleft()
                if self._ready or self._returns:
                    self._wake()  # more than one thread's worth
                return entry, True
            if self._closed:
                return None, False
            self._idle += 1
            try:
                self._cond.wait()
            finally:
                self._idle -= 1
                self._coming = max(0, self._coming - 1)

    # ---- the threads -------------------------------------------------------------------
    def _watch(self) -> None:
        """The timer: gives back what waited in line past its `until`. While work with
        an `until` comes and goes it looks every `WATCH_TICK` (woken at each put, it
        would cost short tasks a thread switch each); after a second without any it
        sleeps until one is put."""
        quiet_since = time.monotonic()
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                left = self._expire(now)
                if self._returns:
                    self._wake()
                if left is not None or self._deadlines:
                    quiet_since = now
                self._timer_idle = now - quiet_since > 1.0
                self._timer_wake.clear()
            if self._timer_idle:
                self._timer_wake.wait()
                quiet_since = time.monotonic()
            else:
                self._timer_wake.wait(WATCH_TICK if left is None else min(left, WATCH_TICK))

    def _loop(self) -> None:
        if self._initializer is not None:
            self._initializer()
        when_kept(self._not_returning)
        with self._lock:
            self._coming = max(0, self._coming - 1)  # started: looks for work now
        while True:
            with self._lock:
                entry, turn = self._next()
                if turn:
                    self.waiting -= 1
            if entry is None:
                return
            if turn:
                try:
                    self._run_turn(entry)
                finally:
                    self.end(entry)
                continue
            try:
                self._give_back(entry)
            finally:
                with self._lock:
                    self.waiting -= 1
