"""The scheduler: every worker and server runs one; none leads. Each pass reads the
schedules whose next tick has come (one indexed query, by the database clock), submits
their ticks with the idempotency key `schedule:<name>:<tick>` — so N schedulers on N
machines make exactly one task per tick — and moves each schedule on with a write
conditional on the tick it read (a scheduler that lost the race changes nothing).
A crash between the submit and the move only makes the next pass submit the same keys
again, which answers the tasks already made.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

from tasklab.core.models import NewTask
from tasklab.core.queueing import SubmitOptions
from tasklab.core.schedules import Advance, ScheduleDef, tick_key
from tasklab.core.submitting import prepare
from tasklab.engine import EngineLike, as_engine
from tasklab.errors import TasklabError

log = logging.getLogger("tasklab.scheduler")

PAGE = 1000  # due schedules read per query


class Scheduler:
    def __init__(self, app: EngineLike, interval: float = 0.25) -> None:
        self.engine = as_engine(app)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.submitted = 0

    def start(self) -> Scheduler:
        for spec in self.engine.periodic.values():
            self.engine.store_schedule(spec)
        self._thread = threading.Thread(target=self._loop, name="tasklab-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except TasklabError as exc:
                log.warning("scheduler pass: %s", exc)
            self._stop.wait(self.interval)

    def run_once(self) -> int:
        """One pass: submit every due tick; answers how many tasks were made or found."""
        done = 0
        while True:
            due = self.engine.store.due_schedules(PAGE)
            mine = [(s, p) for s, p in due if s.task in self.engine.registry]
            done += self._submit(mine)
            if len(due) < PAGE or not mine:  # a full page of others' schedules: next pass
                return done

    def _submit(self, due: list[tuple[ScheduleDef, dict[str, Any]]]) -> int:
        plans: list[tuple[ScheduleDef, dict[str, Any], list[datetime], datetime]] = []
        items: list[NewTask] = []
        for spec, progress in due:
            ticks, following = spec.due(progress["next_tick"], progress["now"])
            try:
                items += [self._item(spec, tick) for tick in ticks]
            except TasklabError as exc:  # its task no longer takes its payload
                log.warning("schedule %s: %s; skipping its ticks", spec.name, exc)
                ticks = []
            plans.append((spec, progress, ticks, following))
        written = iter(self.engine.submitter.write(items) if items else [])
        made = 0
        moves: list[Advance] = []
        for spec, progress, ticks, following in plans:
            last_id = None
            for _ in ticks:
                result = next(written)
                if isinstance(result, BaseException):
                    log.warning("schedule %s: a tick was not submitted: %s", spec.name, result)
                    following = progress["next_tick"]  # try again at the next pass
                    continue
                last_id = result[0].id
                made += 1
            if following != progress["next_tick"]:
                last = ticks[-1] if ticks else None
                moves.append(Advance(spec.name, progress["raw_next"], following, last, last_id))
        if moves:
            self.engine.store.advance_schedules(moves)
        self.submitted += made
        return made

    def _item(self, spec: ScheduleDef, tick: datetime) -> NewTask:
        return prepare(
            self.engine.registry,
            spec.task,
            spec.payload,
            tick_key(spec.name, tick),
            None,
            SubmitOptions(queue=spec.queue, priority=spec.priority),
            data_dir=self.engine.data_dir,
        )
