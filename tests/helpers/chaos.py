"""SIGKILLs at points of progress: a worker is killed each time the store says another
share of the tasks has ended, so every run kills as often however fast this machine
drains (kills on a timer came too late on a fast run: the drain ended first)."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any


def kill_as_they_end(
    app: Any,
    total: int,
    workers: list[subprocess.Popen[str]],
    spawn: Callable[[], subprocess.Popen[str]],
    at: list[int],
    rnd: random.Random,
    timeout: float = 100.0,
) -> dict[int, float]:
    """Until all `total` tasks have ended (or `timeout`): when the ended count passes
    the next number of `at`, SIGKILL a random worker and start another in its place.
    Returns each killed pid with its time of death (for the run ledgers)."""
    left = sorted(at)
    killed: dict[int, float] = {}
    starting: dict[int, threading.Thread] = {}  # a replacement starts while we go on

    def replace(i: int) -> None:
        workers[i] = spawn()

    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            counts = app.counts()
            ended = counts["succeeded"] + counts["failed"] + counts["cancelled"]
            if ended >= total:
                break
            alive = [i for i in range(len(workers)) if i not in starting]
            if left and ended >= left[0] and alive:
                left.pop(0)
                i = rnd.choice(alive)
                workers[i].send_signal(signal.SIGKILL)
                killed[workers[i].pid] = time.time()
                assert workers[i].wait(10) == -9
                workers[i].stderr.close()  # type: ignore[union-attr]
                starting[i] = threading.Thread(target=replace, args=(i,))
                starting[i].start()
            for i in [i for i, t in starting.items() if not t.is_alive()]:
                del starting[i]
            time.sleep(0.05)
    finally:
        for thread in starting.values():
            thread.join(60)
    return killed
