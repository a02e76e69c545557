"""`ThreadTaskRunner`: a ThreadPoolExecutor bounded by workers + backlog (seed 001).

Threads cannot be killed: a task that never reaches a checkpoint runs until it
returns. Threads are named `tasklab-worker-…` so that a shutdown can be checked.

`pin_cpu` runs the runner's threads on one CPU. The GIL lets one thread run Python at
a time, so pure-Python tasks lose nothing, and every hand-off between them (a group
commit waking the threads it finished, a claim waking a thread) stays on one core
instead of needing a cross-CPU wake-up — expensive on virtual machines. Tasks that
compute in C without the GIL (hashing, compression, numpy) lose their parallelism, so
it is opt-in.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from tasklab.core.models import Claim
from tasklab.runners.base import BaseRunner

if TYPE_CHECKING:
    from tasklab.engine import EngineLike

THREAD_PREFIX = "tasklab-worker"


class ThreadTaskRunner(BaseRunner):
    kind = "thread"
    adopts = True  # work beyond the threads waits in the pool's queue

    def __init__(
        self, app: EngineLike, workers: int = 1, backlog: int = 0, pin_cpu: int | None = None
    ) -> None:
        super().__init__(app, workers, backlog)
        self.pin_cpu = pin_cpu
        if pin_cpu is not None:
            check_cpu(pin_cpu)
        self._pool = ThreadPoolExecutor(
            max_workers=workers,
            thread_name_prefix=THREAD_PREFIX,
            initializer=None if pin_cpu is None else partial(pin_this_thread, pin_cpu),
        )

    def _start_task(self, task_id: str) -> Future[Any]:
        return self._pool.submit(self.engine.run, task_id)

    def _start_claim(self, claim: Claim) -> Future[Any]:
        return self._pool.submit(self.engine.execute, claim)

    def _shutdown_executor(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _abandon_executor(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ThreadTaskRunner:
        super().__enter__()
        return self


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
