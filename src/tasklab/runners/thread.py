"""`ThreadTaskRunner`: a ThreadPoolExecutor bounded by workers + backlog (seed 001).

Threads cannot be killed: a task that never reaches a checkpoint runs until it
returns. Threads are named `tasklab-worker-…` so that a shutdown can be checked.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim
from tasklab.runners.base import BaseRunner

if TYPE_CHECKING:
    from tasklab.app import TaskApp

THREAD_PREFIX = "tasklab-worker"


class ThreadTaskRunner(BaseRunner):
    kind = "thread"
    adopts = True  # work beyond the threads waits in the pool's queue

    def __init__(self, app: TaskApp, workers: int = 1, backlog: int = 0) -> None:
        super().__init__(app, workers, backlog)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=THREAD_PREFIX)

    def _start_task(self, task_id: str) -> Future[Any]:
        return self._pool.submit(self.app.run, task_id)

    def _start_claim(self, claim: Claim) -> Future[Any]:
        return self._pool.submit(self.app.execute, claim)

    def _shutdown_executor(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _abandon_executor(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ThreadTaskRunner:
        super().__enter__()
        return self
