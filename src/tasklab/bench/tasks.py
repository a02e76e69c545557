"""Tasks the benchmarks run; workers load them with `--app tasklab.bench.tasks:app`."""

from __future__ import annotations

import time
from typing import Any

from tasklab.app import TaskApp

app = TaskApp("sqlite:///never-opened.db")


@app.task(name="bench.noop")
def noop(ctx: Any) -> None:
    return None


@app.task(name="bench.stamp")
def stamp(ctx: Any) -> float:
    """Returns the wall-clock time at which it started (enqueue→start latency)."""
    return time.time()
