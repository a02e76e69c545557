"""Tasks the benchmarks run; workers load them with `--app tasklab.bench.tasks:app`."""

from __future__ import annotations

import time
from datetime import datetime
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


@app.task(name="bench.emit")
def emit(ctx: Any, n: int) -> int:
    """n progress events as fast as the execution buffer takes them."""
    for i in range(n):
        ctx.emit({"i": i})
    return n


@app.task(name="bench.wait")
def wait(ctx: Any, seconds: float = 600.0) -> str:
    """Idles until cancelled (for idle subscribers)."""
    ctx.sleep(seconds)
    return "waited"


@app.task(name="bench.keyed", concurrency_limit=1)
def keyed(ctx: Any) -> None:
    """`bench.noop` with a per-key limit of one (submitted with a concurrency_key)."""
    return None


def _nothing() -> None:
    return None


@app.task(name="bench.steps")
def steps(ctx: Any, n: int, journal: bool) -> int:
    """n steps of nothing (journal=True), or n plain calls (the baseline)."""
    for i in range(n):
        if journal:
            ctx.step(f"s{i}", _nothing)
        else:
            _nothing()
    return n


@app.task(name="bench.naps")
def naps(ctx: Any, n: int) -> int:
    """n durable sleeps of no time: each a suspend, a claim and a resume."""
    for _ in range(n):
        ctx.sleep_for(0.0001)
    return n


@app.task(name="bench.sleeper")
def sleeper(ctx: Any, until: str) -> str:
    """One durable sleep until a time (10,000 of them wait at once in the bench)."""
    ctx.sleep_until(datetime.fromisoformat(until))
    return "woke"
