"""Trying again while a database comes back (a broken session, a restarting server)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def retried(
    fn: Callable[[], T],
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    within: float,
) -> T:
    """`fn()`, tried again while it raises `retry_on`, pausing 50 ms and doubling up to
    1 s, for at most `within` seconds; then its last error is raised."""
    deadline = time.monotonic() + within
    pause = 0.05
    while True:
        try:
            return fn()
        except retry_on:
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
