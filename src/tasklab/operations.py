"""The operator's part of the Python API: search, retries, bulk cancel and retry by
filter, pruning. Every interface (HTTP, JSON-lines, CLI, the console) calls these.

Terminal states are final: a retry is a *new* task made of an ended one (the same
name, payload, attempts, queue, priority and keys; `retry_of` says which). A bulk
action walks the tasks matching its filter newest first in batches of `batch`, one
short transaction each (nothing is held across them, and each batch is conditional:
a task that changed meanwhile is left as it is); tasks submitted after it began are
not in it. `dry_run` counts what would be taken and changes nothing.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tasklab.core import timeline
from tasklab.core.filters import TaskFilter
from tasklab.core.models import JSON, Page
from tasklab.core.states import CancelReason, State
from tasklab.errors import IdempotencyConflict, InvalidPayload, TaskLive
from tasklab.store.base import PRUNED
from tasklab.store.ids import known_id

if TYPE_CHECKING:
    from tasklab.engine import Engine

Progress = Callable[[dict[str, int]], None]
CANCELLABLE = (State.QUEUED, State.WAITING, State.RUNNING)
RETRYABLE = (State.FAILED, State.CANCELLED)  # the default; any terminal state may be named
MAX_BATCH = 1000


class TaskOperations:
    """Mixed into `TaskApp` (which provides `engine`)."""

    engine: Engine

    def search(
        self,
        where: TaskFilter | None = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
        **criteria: Any,
    ) -> Page:
        """Tasks matching every criterion (`state, task, queue, parent_id,
        idempotency_key, id_prefix, created_after, created_before`), newest first;
        `cursor` from the previous page. Each criterion walks an index."""
        return self.engine.store.search(_filter(where, criteria), limit, cursor)

    def attempts(self, task_id: str) -> builtins.list[dict[str, JSON]]:
        """The task's timeline: per attempt its epoch, lease owner, lease, start and
        how it ended (core/timeline.py)."""
        store = self.engine.store
        snap = store.get(known_id(task_id))
        return timeline.attempts(store.timeline_events(task_id), snap)

    def retry(self, task_id: str, *, idempotency_key: str | None = None) -> str:
        """A new queued task made of an ended one; returns its id. `TaskLive` if it
        has not ended; with `idempotency_key`, a second call answers the first retry."""
        store = self.engine.store
        snap = store.get(known_id(task_id))
        if not snap.terminal:
            raise TaskLive(f"task {task_id} is {snap.state.value}: only an ended task is retried")
        if idempotency_key is not None:
            TaskFilter.of(idempotency_key=idempotency_key)  # checked like a submit's key
        made = store.retry_many([task_id], [idempotency_key])
        if task_id in made:
            return made[task_id]
        if idempotency_key is not None:
            holder = store.search(TaskFilter(idempotency_key=idempotency_key), 1, None).items
            if holder and holder[0].retry_of == task_id:
                return holder[0].id
            raise IdempotencyConflict(
                f"idempotency key {idempotency_key!r} belongs to another task"
            )
        raise IdempotencyConflict(
            f"task {task_id}'s unique_key {snap.unique_key!r} is held by a live task"
        )

    def cancel_where(
        self,
        where: TaskFilter | None = None,
        *,
        dry_run: bool = False,
        batch: int = 500,
        progress: Progress | None = None,
        **criteria: Any,
    ) -> dict[str, int]:
        """Cancel the live tasks matching (queued and waiting ones at once, running
        ones asked to stop). Answers `matched`, and unless `dry_run`: `cancelled`,
        `cancel_requested`, `unchanged` (ended meanwhile)."""
        f = _bulk_filter(where, criteria)
        states = _states(f, CANCELLABLE, "cancel_where takes live tasks")

        def cancel(ids: list[str]) -> dict[str, int]:
            tally = {"cancelled": 0, "cancel_requested": 0, "unchanged": 0}
            for out in self.engine.cancel_many(ids, CancelReason.USER):
                if out is None or not out.request_accepted:
                    tally["unchanged"] += 1
                elif out.state is State.CANCELLED:
                    tally["cancelled"] += 1
                else:
                    tally["cancel_requested"] += 1
            return tally

        kinds = ("cancelled", "cancel_requested", "unchanged")
        return _bulk(self.engine, f, states, cancel, kinds, dry_run, batch, progress, False)

    def retry_where(
        self,
        where: TaskFilter | None = None,
        *,
        dry_run: bool = False,
        batch: int = 500,
        progress: Progress | None = None,
        **criteria: Any,
    ) -> dict[str, int]:
        """A retry of each ended task matching (failed and cancelled ones unless a
        state is named) that has none yet. Answers `matched`, and unless `dry_run`:
        `retried`, `skipped` (retried meanwhile, or its unique key held by a live
        task). Each retry's idempotency key is `retry:<source id>`: two bulk retries
        at once make one retry of each task."""
        f = _bulk_filter(where, criteria)
        states = _states(f, RETRYABLE, "retry_where takes ended tasks", terminal=True)

        def retry(ids: list[str]) -> dict[str, int]:
            made = self.engine.store.retry_many(ids, [f"retry:{i}" for i in ids])
            return {"retried": len(made), "skipped": len(ids) - len(made)}

        kinds = ("retried", "skipped")
        return _bulk(self.engine, f, states, retry, kinds, dry_run, batch, progress, True)

    def prune(
        self,
        older_than: timedelta | None = None,
        *,
        before: datetime | None = None,
        batch: int = 500,
        progress: Progress | None = None,
    ) -> dict[str, int]:
        """Delete terminal tasks that finished more than `older_than` ago by the
        database's clock (or before `before`), with their events, effect records,
        notifications and delivery records; rows deleted per table. Tasks whose
        notification a subscribed webhook still waits for are kept. In short
        transactions of `batch` tasks; `progress` gets the running totals after each.
        A pruned task's idempotency key is free again."""
        totals = dict.fromkeys(PRUNED, 0)
        for totals in self.prune_batches(older_than, before=before, batch=batch):
            if progress is not None:
                progress(totals)
        return totals

    def prune_batches(
        self,
        older_than: timedelta | None = None,
        *,
        before: datetime | None = None,
        batch: int = 500,
    ) -> Iterator[dict[str, int]]:
        """`prune` one transaction at a time: the running totals after each (the
        caller may stop between them)."""
        return self.engine.prune_batches(older_than, before=before, batch=batch)


def _filter(where: TaskFilter | None, criteria: dict[str, Any]) -> TaskFilter:
    if where is not None and criteria:
        raise TypeError("pass a TaskFilter or criteria as keywords, not both")
    return where if where is not None else TaskFilter.of(**criteria)


def _bulk_filter(where: TaskFilter | None, criteria: dict[str, Any]) -> TaskFilter:
    f = _filter(where, criteria)
    if f.empty:
        raise InvalidPayload(
            "an empty filter would take every task: name at least one criterion "
            "(state, task, queue, parent_id, idempotency_key, id_prefix, created_*)"
        )
    return f


def _states(
    f: TaskFilter, default: tuple[State, ...], what: str, *, terminal: bool = False
) -> tuple[State, ...]:
    if f.state is None:
        return default
    allowed = f.state.terminal if terminal else f.state in CANCELLABLE
    if not allowed:
        raise InvalidPayload(f"{what}; state {f.state.value!r} is not one")
    return (f.state,)


def _with(f: TaskFilter, state: State) -> TaskFilter:
    return dataclasses.replace(f, state=state)


def _batch(batch: int) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InvalidPayload(f"batch must be an integer from 1 to {MAX_BATCH}")
    return batch


def _bulk(
    engine: Engine,
    f: TaskFilter,
    states: tuple[State, ...],
    act: Callable[[list[str]], dict[str, int]],
    kinds: tuple[str, ...],
    dry_run: bool,
    batch: int,
    progress: Progress | None,
    not_retried: bool,
) -> dict[str, int]:
    """One bulk action: a dry run's count, or `act` on each batch (its own short
    transaction), the running totals reported after each."""
    size = _batch(batch)
    if dry_run:
        counts = (engine.store.count_matching(_with(f, s), not_retried=not_retried) for s in states)
        return {"matched": sum(counts)}
    totals = dict.fromkeys(("matched", *kinds), 0)
    for ids in _batches(engine, f, states, size, not_retried=not_retried):
        totals["matched"] += len(ids)
        for key, n in act(ids).items():
            totals[key] += n
        if progress is not None:
            progress(dict(totals))
    return totals


def _batches(
    engine: Engine, f: TaskFilter, states: tuple[State, ...], size: int, *, not_retried: bool
) -> Iterator[list[str]]:
    """The matching ids, a batch at a time, one state after another (each walks its
    index in id order), each batch read after the previous one was acted on."""
    for state in states:
        g, before = _with(f, state), None
        while ids := engine.store.matching_ids(g, before, size, not_retried=not_retried):
            yield ids
            before = ids[-1]
