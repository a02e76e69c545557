"""Runners: bounded executors with one interface (thread, process, asyncio)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasklab.engine import EngineLike
    from tasklab.runners.base import BaseRunner

RUNNER_KINDS = ("thread", "process", "async")


def default_concurrency(kind: str) -> int:
    """Slots when none are asked for (`tasklab worker` with no `--concurrency`).

    Thread and async: 32. Tasks on these runners are I/O-bound by nature — a
    pure-Python computation runs one at a time under the GIL whatever the slot count,
    while a task that waits on a web service or a database wants many slots, as a web
    server's request threads do; 32 is the bound Python's own ThreadPoolExecutor
    chose for I/O work. Short tasks gain too: many finishing at once share one commit
    (finisher.py). An idle slot costs a parked thread, nothing else.
    Process: one per CPU this process may run on — those tasks compute."""
    if kind == "process":
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    return 32


def make_runner(
    kind: str,
    engine: EngineLike,
    workers: int,
    backlog: int = 0,
    pin_cpu: int | None = None,
    ahead: int = 0,
) -> BaseRunner:
    """A runner of `kind`; `ahead` (claims beyond the slots, started while earlier
    tasks' terminal writes commit) is the thread runner's alone."""
    if pin_cpu is not None and kind != "thread":
        raise ValueError(f"pinning to a CPU is for the thread runner, not the {kind} runner")
    if kind == "thread":
        from tasklab.runners.thread import ThreadTaskRunner

        return ThreadTaskRunner(engine, workers, backlog, pin_cpu, ahead)
    if kind == "process":
        from tasklab.runners.process import ProcessTaskRunner

        return ProcessTaskRunner(engine, workers, backlog)
    if kind == "async":
        from tasklab.runners.aio import AsyncTaskRunner

        return AsyncTaskRunner(engine, workers, backlog)
    raise ValueError(f"unknown runner {kind!r}; one of {', '.join(RUNNER_KINDS)}")


__all__: list[Any] = ["RUNNER_KINDS", "make_runner"]
