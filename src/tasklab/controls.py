"""The part of the Python API that runs the queues: their settings (pause, limits) and
schedules (`@app.periodic`, `app.schedule`). Everything here is stored, so it holds
for every worker on every machine and outlives the process that said it."""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from tasklab.core.jsontext import dumps
from tasklab.core.models import JSON, Page
from tasklab.core.queueing import KEEP, Keep, check_concurrency, check_queue, parse_rate
from tasklab.core.registry import TaskDef
from tasklab.core.schedules import ScheduleDef
from tasklab.errors import InvalidPayload
from tasklab.store.ids import known_id

if TYPE_CHECKING:
    from tasklab.engine import Engine

F = TypeVar("F", bound=Callable[..., Any])
_SIGNAL = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


class QueueControls:
    """Mixed into `TaskApp` (which provides `engine`)."""

    engine: Engine

    # ---- queues --------------------------------------------------------------------
    def configure_queue(
        self,
        name: str,
        *,
        concurrency: int | Keep | None = KEEP,
        rate: str | Keep | None = KEEP,
    ) -> None:
        """Set a queue's limits across all workers: `concurrency` — at most that many of
        its tasks running at once; `rate` — at most N claims per period (`"100/s"`,
        `"600/m"`, `"10000/h"`; a token bucket, see the README). None removes a limit;
        a limit not given stays as it is."""
        check_queue(name)
        if not isinstance(concurrency, Keep) and concurrency is not None:
            check_concurrency(concurrency)
        parsed = rate if isinstance(rate, Keep) or rate is None else parse_rate(rate)
        self.engine.store.configure_queue(name, concurrency, parsed)

    def pause(self, name: str) -> None:
        """No new claims from this queue until `resume` (running tasks go on)."""
        self.engine.store.pause_queue(check_queue(name), True)

    def resume(self, name: str) -> None:
        self.engine.store.pause_queue(check_queue(name), False)

    def queues(self) -> builtins.list[dict[str, JSON]]:
        """Every queue: `name, paused, concurrency, rate, queued, running, claimed`."""
        return self.engine.store.queue_stats()

    def queue_activity(self, minutes: int = 60) -> builtins.list[dict[str, JSON]]:
        """Per queue and minute over the last `minutes` (at most a day): `claims`,
        `wait_ms_mean`, `wait_ms_max` — how long claimed tasks had waited since they
        became runnable. Kept by the claims' own transactions."""
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise InvalidPayload("minutes must be an integer from 1 to 1440")
        return self.engine.store.queue_activity(minutes)

    # ---- schedules -----------------------------------------------------------------
    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | str | None = None,
        name: str | None = None,
        payload: dict[str, JSON] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
    ) -> Callable[[F], F]:
        """Run a registered task on a schedule (put it above `@app.task`). Every worker
        and server runs the scheduler; each tick makes exactly one task."""

        def register(fn: F) -> F:
            target = getattr(fn, "fn", fn)  # a `Task` (typed.py) or the function itself
            spec = next((t for t in self.engine.registry.all() if t.fn is target), None)
            if spec is None:
                raise ValueError("@app.periodic goes above @app.task (on a registered task)")
            schedule = self._checked_schedule(
                name or spec.name, spec, "code", cron=cron, every=every, timezone=timezone,
                payload=payload, queue=queue, priority=priority, catch_up=catch_up,
            )  # fmt: skip
            self.engine.periodic[schedule.name] = schedule
            return fn

        return register

    def schedule(
        self,
        name: str,
        task: str,
        *,
        cron: str | None = None,
        every: timedelta | float | str | None = None,
        payload: dict[str, JSON] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
    ) -> dict[str, JSON]:
        """Store a schedule now (it outlives this process). The same definition again
        changes nothing; another one replaces it (its next tick computed anew)."""
        schedule = self._checked_schedule(
            name, self.engine.registry.get(task), "runtime", cron=cron, every=every,
            timezone=timezone, payload=payload, queue=queue, priority=priority,
            catch_up=catch_up,
        )  # fmt: skip
        self.engine.store_schedule(schedule)
        return next(s for s in self.schedules() if s["name"] == schedule.name)

    def _checked_schedule(
        self, name: str, spec: TaskDef, origin: str, **timing: Any
    ) -> ScheduleDef:
        """A schedule of a registered task, its definition and its payload checked."""
        schedule = ScheduleDef.checked(name, spec.name, origin=origin, **timing)
        spec.validate(schedule.payload, self.engine.data_dir)
        return schedule

    def unschedule(self, name: str) -> bool:
        """Forget a schedule; its tasks already made stay."""
        return self.engine.store.remove_schedule(name)

    def schedules(self) -> builtins.list[dict[str, JSON]]:
        """Every stored schedule with its next tick and last task."""
        return self.engine.store.schedules()


class WaitControls:
    """The durable functions' side of the Python API (SPEC §8); mixed into `TaskApp`."""

    engine: Engine

    def signal(self, task_id: str, name: str, data: JSON = None) -> tuple[JSON, bool]:
        """Send signal `name` to a task: recorded once per (task, name) — a second one
        answers the first's data and False — and a task waiting for it runs again. A
        task that has ended takes none (`TaskTerminal`, HTTP 409 `task_terminal`)."""
        if not isinstance(name, str) or not _SIGNAL.fullmatch(name):
            raise InvalidPayload(f"a signal name must match [A-Za-z0-9_.:-]{{1,100}}, got {name!r}")
        try:
            dumps(data)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"signal data is not JSON: {exc}") from None
        return self.engine.store.signal(known_id(task_id), name, data)

    def signals(self, task_id: str) -> builtins.list[dict[str, JSON]]:
        self.engine.store.get(known_id(task_id))  # TaskNotFound for an unknown id
        return self.engine.store.signals(task_id)

    def children(self, task_id: str, limit: int = 100, cursor: str | None = None) -> Page:
        """The tasks this one spawned, newest first."""
        return self.engine.store.children(known_id(task_id), limit, cursor)

    def journal(self, task_id: str) -> builtins.list[dict[str, JSON]]:
        """The task's steps, waits and effects as its journal holds them."""
        self.engine.store.get(known_id(task_id))
        return self.engine.store.journal(task_id)
