"""Helpers for your own tests: run a task here, eagerly, to its end.

    app = TaskApp("sqlite:///:memory:")          # a private store, gone at close()

    def test_invoice():
        handle = send_invoice.submit(7, "a@b.c")
        assert tasklab.testing.run(handle) == {"order_id": 7}

`run` executes the queued tasks that are runnable now in this thread (what a worker
would do, one at a time: `app.run_pending`) until the handle's task has ended, and
answers as `handle.result()` would: the stored result, `TaskFailed`, `TaskCancelled`.
Children it spawns run too. A task that waits (a durable sleep, a signal) or a retry
whose backoff has not passed leaves it unfinished: `TimeoutError` names its state.
"""

from __future__ import annotations

from typing import TypeVar

from tasklab.handles import TaskHandle

R = TypeVar("R")


def run(handle: TaskHandle[R], max_tasks: int = 10_000) -> R:
    app = handle.app
    ran = 0
    while not handle.snapshot().terminal and ran < max_tasks:
        done = app.run_pending(limit=1)
        if done == 0:
            break
        ran += done
    return handle.result(timeout=0)
