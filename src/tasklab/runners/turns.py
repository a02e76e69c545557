"""Turns at a gate: at most N task functions at once, handed out in claim order — by
when the claiming statement was sent, then the claim's place in its batch (the
store's order: priorities, then submit order) — so a claim made ahead never
overtakes an earlier one, even when a terminal transaction's claims are handed over
before the claim loop has lined up all of an earlier batch. The gate also knows how
long the functions holding a turn have run, and a moving mean of how long they ran:
what the claims-ahead rule of the thread runner reads (runners/thread.py)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time


class Place:
    """A place in line, then a turn once granted."""

    __slots__ = ("_wake", "granted", "left", "since")

    def __init__(self) -> None:
        self._wake = threading.Lock()
        self._wake.acquire()  # released once, when the turn is granted
        self.granted = False
        self.left = False  # out of line before its turn
        self.since = 0.0  # when the turn began


class Gate:
    def __init__(self, turns: int, mean_run: float = 0.0) -> None:
        self._free = turns
        self._line: list[tuple[float, int, Place]] = []  # a heap, by claim order
        self._taken = itertools.count()
        self._running: set[Place] = set()
        self._lock = threading.Lock()
        self._interrupted = False
        self.mean_run = mean_run  # seconds a turn lasted, recently (a mean over ~16)

    def take_places(self, sent_at: list[float]) -> list[Place]:
        """Places for claims whose statements were sent at `sent_at` (monotonic), in
        the order given — a batch's places all at once, before any of its work can
        start (and finish, and hand over the claims of its terminal transaction)."""
        places = [Place() for _ in sent_at]
        with self._lock:
            for place, sent in zip(places, sent_at, strict=True):
                if self._free > 0 and not self._line:
                    self._free -= 1
                    self._grant(place)
                else:
                    heapq.heappush(self._line, (sent, next(self._taken), place))
        return places

    def wait(self, place: Place, timeout: float | None) -> bool:
        """True once the place's turn has begun; False after `timeout` (None: no
        limit) or once the gate is interrupted, the place still in line. A blocking
        wait, no polling: dozens of threads waking to look would take the GIL from
        the one function that runs."""
        if not place.granted and not self._interrupted:
            place._wake.acquire(timeout=-1 if timeout is None else max(0.0, timeout))
        return place.granted

    def interrupt(self) -> None:
        """Wake every place in line without a turn (the runner stops starting work);
        places taken later do not wait."""
        with self._lock:
            self._interrupted = True
            for _, _, place in self._line:
                if place._wake.locked():
                    place._wake.release()

    def leave(self, place: Place) -> None:
        """Out of line (a claim given back); a turn already granted ends. Once only
        counts: leaving again, or after `end`, does nothing."""
        with self._lock:
            if place.granted:
                self._end(place)
            else:
                place.left = True  # passed over when its turn comes

    def end(self, place: Place) -> None:
        """The turn's function has ended: the next place in line gets the turn."""
        with self._lock:
            self._end(place)

    def longest_run(self, now: float) -> float:
        """How long the longest-running turn has lasted so far (0: none)."""
        with self._lock:
            return max((now - p.since for p in self._running), default=0.0)

    def _grant(self, place: Place) -> None:
        place.granted = True
        place.since = time.monotonic()
        self._running.add(place)
        place._wake.release()

    def _end(self, place: Place) -> None:
        if place not in self._running:
            return
        self._running.discard(place)
        self.mean_run += (time.monotonic() - place.since - self.mean_run) / 16
        while self._line:
            _, _, following = heapq.heappop(self._line)
            if not following.left:
                self._grant(following)
                return
        self._free += 1
