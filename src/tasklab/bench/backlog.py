"""`tasklab bench queue --backlog N`: does the drain slow down as history grows?

Method: on an empty store, the default worker (`tasklab worker` with no options but
where the tasks are, in a process of its own) first drains one window of tasks: the
empty-store rate. Then N tasks are queued at once (`submit_many`) and the same worker
drains them; the rate of each window of consecutive tasks (by id: claims are
oldest-first) comes from the store's own timestamps (first start → last end of the
window). `counts()` — what the dashboard and `/metrics` poll — is timed with the
backlog queued and again with it all finished. Everything is pruned at the end.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from tasklab.app import TaskApp
from tasklab.bench.queue import (
    all_done,
    bench_app,
    require_empty,
    stop_worker,
    store_rate,
    worker_process,
)
from tasklab.redact import redact


@dataclass
class BacklogReport:
    db: str
    n: int
    window: int
    durability: str
    conditions: dict[str, Any] = field(default_factory=dict)
    empty_store_per_s: float = 0.0
    windows_per_s: list[float] = field(default_factory=list)
    counts_ms: dict[str, float] = field(default_factory=dict)
    enqueue_per_s: float = 0.0

    @property
    def worst_vs_empty(self) -> float:
        """The slowest window's shortfall against the empty-store rate (0.08 = 8 %)."""
        if not self.windows_per_s or not self.empty_store_per_s:
            return 0.0
        return max(0.0, 1 - min(self.windows_per_s) / self.empty_store_per_s)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"worst_vs_empty": round(self.worst_vs_empty, 3)}


def _counts_ms(app: TaskApp, times: int = 21) -> float:
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        app.counts()
        took.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(took), 2)


def _queue(app: TaskApp, n: int, tick: Callable[[int], None]) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 5000):
        ids += app.submit_many("bench.noop", [{}] * min(5000, n - start))
        tick(len(ids))
    return ids


def _drain(app: TaskApp, ids: list[str], tick: Callable[[int], None]) -> None:
    proc = worker_process(app.db)
    try:
        while not all_done(app, ids):
            tick(app.counts()["succeeded"])
            time.sleep(0.25)
    finally:
        stop_worker(proc)


def run(
    db: str,
    n: int,
    window: int,
    durability: str = "full",
    progress: Callable[[str, int, int], None] = lambda what, done, total: None,
) -> BacklogReport:
    app = bench_app(db, durability)
    require_empty(app)
    report = BacklogReport(redact(db), n, window, durability)
    report.conditions = {
        "worker": "`tasklab worker` with no options, a process of its own",
        "windows": f"{window:,} consecutive tasks each, rate from the store's timestamps",
    }
    first = _queue(app, window, lambda done: progress("empty store: queue", done, window))
    _drain(app, first, lambda done: progress("empty store: drain", done, window))
    report.empty_store_per_s = round(store_rate(app, first))
    app.prune(timedelta(0))
    t0 = time.perf_counter()
    ids = _queue(app, n, lambda done: progress("backlog: queue", done, n))
    report.enqueue_per_s = round(n / (time.perf_counter() - t0))
    report.counts_ms["queued"] = _counts_ms(app)
    _drain(app, ids, lambda done: progress("backlog: drain", done, n))
    report.counts_ms["finished"] = _counts_ms(app)
    for start in range(0, n - window + 1, window):
        report.windows_per_s.append(round(store_rate(app, ids[start : start + window])))
    time.sleep(0.01)  # past the last finish on SQLite's millisecond clock
    app.prune(timedelta(0))
    app.close()
    return report
