"""Runners: bounded executors with one interface (thread, process, asyncio)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasklab.engine import EngineLike
    from tasklab.runners.base import BaseRunner

RUNNER_KINDS = ("thread", "process", "async")


def make_runner(
    kind: str, engine: EngineLike, workers: int, backlog: int = 0, pin_cpu: int | None = None
) -> BaseRunner:
    if pin_cpu is not None and kind != "thread":
        raise ValueError(f"pinning to a CPU is for the thread runner, not the {kind} runner")
    if kind == "thread":
        from tasklab.runners.thread import ThreadTaskRunner

        return ThreadTaskRunner(engine, workers, backlog, pin_cpu)
    if kind == "process":
        from tasklab.runners.process import ProcessTaskRunner

        return ProcessTaskRunner(engine, workers, backlog)
    if kind == "async":
        from tasklab.runners.aio import AsyncTaskRunner

        return AsyncTaskRunner(engine, workers, backlog)
    raise ValueError(f"unknown runner {kind!r}; one of {', '.join(RUNNER_KINDS)}")


__all__: list[Any] = ["RUNNER_KINDS", "make_runner"]
