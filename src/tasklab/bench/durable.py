"""`tasklab bench queue --durable`: what durable functions cost.

- a step: a task of N steps of nothing against one of N plain calls, run in this
  process (`run_pending`), the difference per step — two fenced writes each;
- a suspend and resume round trip: one task doing K durable sleeps of no time with a
  default worker in its own process; each round trip from the `waiting` event to the
  next `resumed` event (the store's timestamps), p50 and p99;
- 10,000 sleepers: that many tasks sleeping at once — the worker's CPU while they
  wait, and how late each woke (its `resumed` event against its due time).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from datetime import datetime, timedelta
from typing import Any

from tasklab.app import TaskApp
from tasklab.bench.limits import _conditions
from tasklab.bench.queue import bench_app, prune_rate, require_empty, stop_worker, worker_process
from tasklab.redact import redact


def _step_cost(app: TaskApp, n: int) -> float:
    runs: dict[bool, list[float]] = {}
    for journal in (False, True, False, True):
        tid = app.submit("bench.steps", {"n": n, "journal": journal})
        t0 = time.perf_counter()
        app.run_pending()
        runs.setdefault(journal, []).append(time.perf_counter() - t0)
        assert app.query(tid).state.value == "succeeded"
    return (min(runs[True]) - min(runs[False])) / n * 1000


def _at(text: str | None) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def _round_trips(app: TaskApp, k: int, durability: str) -> dict[str, float]:
    extra = [] if durability == "full" else ["--durability", durability]
    proc = worker_process(app.db, *extra)
    try:
        tid = app.submit("bench.naps", {"n": k})
        while not app.query(tid).terminal:
            time.sleep(0.05)
    finally:
        stop_worker(proc)
    events = app.events(tid, limit=10 * k)
    trips = [
        (b.at - a.at).total_seconds() * 1000
        for a, b in itertools.pairwise(events)
        if a.type == "waiting" and b.type == "resumed"
    ]
    q = statistics.quantiles(trips, n=100)
    return {"round_trips": len(trips), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2)}


def _until(data: Any) -> str | None:
    return data.get("until") if isinstance(data, dict) else None


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sleepers(app: TaskApp, n: int, seconds: float, durability: str) -> dict[str, Any]:
    extra = [] if durability == "full" else ["--durability", durability]
    proc = worker_process(app.db, *extra)
    try:
        ids: list[str] = []
        due = app.store.now() + timedelta(seconds=seconds)  # all wake at this instant
        payload = {"until": due.isoformat()}
        for start in range(0, n, 1000):
            ids += app.submit_many("bench.sleeper", [payload] * min(1000, n - start))
        while (c := app.counts())["waiting"] + c["succeeded"] < n:
            time.sleep(0.1)
        cpu0, wall0 = _cpu_of(proc.pid), time.perf_counter()
        time.sleep(max(0.5, (due - app.store.now()).total_seconds() - 1))
        idle_cpu = (_cpu_of(proc.pid) - cpu0) / (time.perf_counter() - wall0)
        while app.counts()["succeeded"] < n:
            time.sleep(0.1)
    finally:
        stop_worker(proc)
    late: list[float] = []
    for tid in ids[:: max(1, n // 500)]:  # a sample of 500
        events = app.events(tid)
        due = next(_at(_until(e.data)) for e in events if e.type == "waiting")
        resumed = next(e.at for e in events if e.type == "resumed")
        late.append((resumed - due).total_seconds())
    late.sort()
    return {
        "sleepers": n,
        "worker_cpu_while_waiting": f"{idle_cpu:.1%} of a core",
        "late_s": {"p50": round(late[len(late) // 2], 3), "max": round(late[-1], 3)},
    }


def run(db: str, durability: str, sleepers: int = 10_000) -> dict[str, Any]:
    app = bench_app(db, durability)
    require_empty(app)
    report = {
        "db": redact(db),
        "conditions": _conditions(db, durability),
        "step_ms": round(_step_cost(app, 300), 3),
        "suspend_resume": _round_trips(app, 200, durability),
        "sleepers": _sleepers(app, sleepers, 40.0, durability),
    }
    prune_rate(app)
    app.close()
    return report
