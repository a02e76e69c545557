"""`tasklab bench search`: every search filter on a store of N tasks — the plan the
database chose for the first page and how long pages take (first page, and the page
after 10 pages of keyset paging). The store is filled through the public API: tasks of
three names over four queues, a quarter cancelled by a bulk action, some run to
success, a parent with children, tasks with idempotency keys."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tasklab.app import TaskApp
from tasklab.core.filters import TaskFilter

NAMES = ("bench.noop", "bench.stamp", "bench.wait")
QUEUES = ("default", "mail", "reports", "billing")
BATCH = 5000


def fill(app: TaskApp, n: int, tick: Callable[[int], None] | None = None) -> dict[str, Any]:
    """N tasks (plus a parent, 100 children and 100 keyed ones); what the shapes name."""
    parent = app.submit("bench.noop", {}, queue="reports")
    children = [
        dataclasses.replace(app.prepare("bench.noop", {}, None, None), parent_id=parent)
        for _ in range(100)
    ]
    app.submit_prepared(children)
    for i in range(100):
        app.submit("bench.noop", {}, f"search-key-{i}")
    made, first, middle = 0, None, None
    while made < n:
        size = min(BATCH, n - made)
        k = made // BATCH
        ids = app.submit_many(NAMES[k % 3], [{}] * size, queue=QUEUES[k % 4])
        first = first or ids[0]
        if middle is None and made + size >= n // 2:
            middle = ids[0]
        made += size
        if tick is not None:
            tick(made)
    app.cancel_where(queue="billing", batch=1000)
    app.run_pending(limit=200)  # a rare state: a few hundred succeeded
    assert first is not None and middle is not None
    # the created range is read off the ids (the submitter's clock, README), not off
    # the database's created_at: on a slow machine a batch's insert can commit more
    # than the range's second after its ids were minted
    at = datetime.fromtimestamp(int(middle[:12], 16) / 1000, UTC)
    return {
        "parent": parent,
        "prefix": middle[:12],
        "after": at,
        "before": at + timedelta(seconds=1),
    }


def shapes(seen: dict[str, Any]) -> dict[str, TaskFilter]:
    return {
        "newest, no filter": TaskFilter(),
        "state queued": TaskFilter.of(state="queued"),
        "state succeeded (rare)": TaskFilter.of(state="succeeded"),
        "state cancelled": TaskFilter.of(state="cancelled"),
        "task": TaskFilter.of(task="bench.stamp"),
        "queue": TaskFilter.of(queue="mail"),
        "queue + state": TaskFilter.of(queue="billing", state="cancelled"),
        "task + state": TaskFilter.of(task="bench.wait", state="queued"),
        "parent_id": TaskFilter.of(parent_id=seen["parent"]),
        "idempotency_key": TaskFilter.of(idempotency_key="search-key-7"),
        "id prefix": TaskFilter.of(id_prefix=seen["prefix"]),
        "created range": TaskFilter.of(created_after=seen["after"], created_before=seen["before"]),
    }


def measure(app: TaskApp, f: TaskFilter, rounds: int = 5) -> dict[str, Any]:
    """The plan, and the median ms of the first page and of the 11th (keyset)."""
    firsts, deeps = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        page = app.search(f, limit=50)
        firsts.append((time.perf_counter() - t0) * 1000)
        cursor = page.next_cursor
        for _ in range(10):
            if cursor is None:
                break
            t0 = time.perf_counter()
            page = app.search(f, limit=50, cursor=cursor)
            deeps.append((time.perf_counter() - t0) * 1000)
            cursor = page.next_cursor
    return {
        "plan": app.store.search_plan(f),
        "first_page_ms": round(statistics.median(firsts), 2),
        "deep_page_ms": round(statistics.median(deeps), 2) if deeps else None,
    }


def run(db: str, n: int, tick: Callable[[int], None] | None = None) -> dict[str, Any]:
    from tasklab.bench.queue import bench_app, require_empty

    app = bench_app(db, "normal")
    try:
        require_empty(app)
        seen = fill(app, n, tick)
        return {name: measure(app, f) for name, f in shapes(seen).items()}
    finally:
        app.close()
