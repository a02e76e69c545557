"""`tasklab bench queue --limits`: what limits cost a drain, and `--schedules N`: what
the scheduler costs.

Limits: N no-op tasks drained by one default worker (`tasklab worker` with no options,
in its own process) — plainly, in a queue whose concurrency limit is far above the
worker's slots, with a per-key limit of one over 1,000 keys, and in a queue whose rate
limit is far above the drain rate — in alternating rounds (this VM is noisy), each
drain from the store's own timestamps; each row reports its range and its ratio to
the plain drain of the same round.

Schedules: N interval schedules, every one due at the same second (a worst case), and
one scheduler pass per second for a few ticks: the pass's CPU time and wall time, and
how late each tick's task was committed after its tick (> 1 s counts as late).
"""

from __future__ import annotations

import os
import platform
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tasklab.app import TaskApp
from tasklab.bench.queue import (
    _wait_drained,
    bench_app,
    prune_rate,
    require_empty,
    stop_worker,
    store_rate,
    worker_process,
)
from tasklab.core.models import NewTask
from tasklab.core.queueing import SubmitOptions
from tasklab.core.schedules import Advance, ScheduleDef
from tasklab.redact import redact
from tasklab.service.scheduler import Scheduler

MODES = ("plain", "queue limit", "per-key limit", "rate limit")
KEYS = 1000


def _items(app: TaskApp, mode: str, n: int) -> list[NewTask]:
    if mode == "per-key limit":
        return [
            app.prepare(
                "bench.keyed", {}, None, None, options=SubmitOptions(concurrency_key=f"k{i % KEYS}")
            )
            for i in range(n)
        ]
    queue = {"queue limit": "limited", "rate limit": "rated"}.get(mode)
    options = SubmitOptions(queue=queue)
    return [app.prepare("bench.noop", {}, None, None, options=options) for _ in range(n)]


def _drain(app: TaskApp, mode: str, n: int, durability: str) -> float:
    extra = [] if durability == "full" else ["--durability", durability]
    items = _items(app, mode, n)
    proc = worker_process(app.db, *extra)
    try:
        ids: list[str] = []
        for start in range(0, n, 1000):
            ids += [snap.id for snap, _ in app.store.submit(items[start : start + 1000])]
        _wait_drained(app, ids)
    finally:
        stop_worker(proc)
    rate = store_rate(app, ids)
    prune_rate(app)  # every round starts from an empty store
    return rate


def run_limits(db: str, n: int, durability: str, rounds: int) -> dict[str, Any]:
    app = bench_app(db, durability)
    require_empty(app)
    # far above: 10,000 slots (the worker has 32); a million claims a second
    app.configure_queue("limited", concurrency=10_000)
    app.configure_queue("rated", rate="1000000/s")
    found: dict[str, list[float]] = {m: [] for m in MODES}
    ratios: dict[str, list[float]] = {m: [] for m in MODES[1:]}
    for r in range(rounds):
        order = MODES if r % 2 == 0 else (MODES[0], *reversed(MODES[1:]))
        plain = 0.0
        for mode in order:
            rate = _drain(app, mode, n, durability)
            found[mode].append(rate)
            if mode == "plain":
                plain = rate
            else:
                ratios[mode].append(rate / plain)
    app.close()
    return {
        "db": redact(db),
        "n": n,
        "rounds": rounds,
        "conditions": _conditions(db, durability),
        "drain_per_s": {m: [round(min(v)), round(max(v))] for m, v in found.items()},
        "of_plain": {m: [round(min(v), 2), round(max(v), 2)] for m, v in ratios.items()},
    }


def run_schedules(db: str, n: int, durability: str, ticks: int = 3) -> dict[str, Any]:
    app = bench_app(db, durability)
    require_empty(app)
    every = 5.0  # all n schedules tick at the same instants, 5 s apart
    probe = ScheduleDef.checked("probe", "bench.noop", every=every)
    parked = probe.next_after(app.store.now() + timedelta(hours=1))
    for i in range(n):
        spec = ScheduleDef.checked(f"s{i}", "bench.noop", every=every)
        app.store.put_schedule(spec, parked, keep=False)
    # all stored: now make them due at the next tick but one, in one transaction
    first = probe.next_after(app.store.now() + timedelta(seconds=1))
    raw = app.store._time_param(parked)  # type: ignore[attr-defined]
    app.store.advance_schedules([Advance(f"s{i}", raw, first, None, None) for i in range(n)])
    scheduler = Scheduler(app)
    passes: list[dict[str, float]] = []
    lateness: list[float] = []
    for k in range(ticks):
        tick = first + timedelta(seconds=every * k)
        _sleep_until(app, tick)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        made = scheduler.run_once()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        passes.append({"tasks": made, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)})
        lateness += [(s.created_at - tick).total_seconds() for s in _made_at(app, tick)]
    lateness.sort()
    for i in range(n):
        app.store.remove_schedule(f"s{i}")
    _drain_made(app)
    app.close()
    return {
        "db": redact(db),
        "schedules": n,
        "conditions": _conditions(db, durability),
        "passes": passes,
        "cpu_ms_per_tick": round(1000 * sum(p["cpu_s"] for p in passes) / (n * len(passes)), 4),
        "ticks_made": len(lateness),
        "late_over_1s": sum(1 for d in lateness if d > 1.0),
        "lateness_s": {
            "p50": round(lateness[len(lateness) // 2], 3) if lateness else None,
            "max": round(lateness[-1], 3) if lateness else None,
        },
    }


def _drain_made(app: TaskApp) -> None:
    """The tasks the passes made, run and pruned: the next run starts empty."""
    with app.worker(concurrency=32, scheduler=False):
        while app.counts()["queued"] + app.counts()["running"]:
            time.sleep(0.05)
    prune_rate(app)


def _sleep_until(app: TaskApp, at: datetime) -> None:
    while (wait := (at - app.store.now()).total_seconds()) > 0:
        time.sleep(min(wait, 1.0))


def _made_at(app: TaskApp, tick: datetime) -> list[Any]:
    key = tick.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = []
    cursor = None
    while True:
        page = app.list(limit=1000, cursor=cursor)
        out += [s for s in page.items if (s.idempotency_key or "").endswith(key)]
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def _conditions(db: str, durability: str) -> dict[str, Any]:
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "sqlite_synchronous": durability.upper() if db.startswith("sqlite") else None,
    }
