"""`tasklab bench queue`: enqueue and drain rates and enqueue→start latency.

Method (the issue's, for comparison with peers measured the same way): N no-op tasks;
enqueue one at a time and with `submit_many`; drain with one worker at concurrency 1
and at its best concurrency, drain = N / (last end − first start) from the store's own
timestamps; latency = the enqueue call → the task function's first line, with an idle
worker in another process, one task at a time. Last, everything the run made is pruned
(terminal tasks per second), so that each run starts from an empty store.
"""

from __future__ import annotations

import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from tasklab.app import TaskApp
from tasklab.bench.machine import BusyMeter
from tasklab.bench.tasks import app as bench_tasks
from tasklab.config import Settings
from tasklab.redact import redact


@dataclass
class QueueReport:
    db: str
    n: int
    durability: str
    conditions: dict[str, Any] = field(default_factory=dict)
    single_commit_per_s: float = 0.0
    enqueue_one_per_s: float = 0.0
    enqueue_batch_per_s: float = 0.0
    threads_submit_per_s: float = 0.0  # 32 threads calling app.submit at once
    drain_per_s: dict[str, float] = field(default_factory=dict)
    # the machine's CPU busy during each drain (bench/machine.py), None if unknown
    busy_share: dict[str, float | None] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    prune_per_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def bench_app(db: str, durability: str) -> TaskApp:
    app = TaskApp(db, settings=Settings(durability=durability))
    for t in bench_tasks.registry.all():
        app.registry.add(t)
    return app


def require_empty(app: TaskApp) -> None:
    """Benchmarks need an empty store: recover anything left, then check."""
    counts = app.counts()
    if counts["queued"] or counts["running"]:
        raise SystemExit(f"bench needs an empty store, {app.db} has {counts}")


def single_commit_rate(app: TaskApp, n: int) -> float:
    """The store's smallest durable write (one counter row), n times in a row."""
    t0 = time.perf_counter()
    for _ in range(n):
        app.store.bump("bench_commit_probe")
    return n / (time.perf_counter() - t0)


def enqueue_rates(app: TaskApp, n: int) -> tuple[float, float, float]:
    """(single-commit rate, enqueue one at a time, submit_many). The commit probe runs
    right before and right after the single submits and the faster of the two counts,
    after a warm-up: on a new SQLite file the first commits also grow the WAL file and
    are slower, which would flatter the ratio."""
    single_commit_rate(app, 500)
    probes = [single_commit_rate(app, min(n, 2000))]
    t0 = time.perf_counter()
    for _ in range(n):
        app.submit("bench.noop", {})
    one = n / (time.perf_counter() - t0)
    probes.append(single_commit_rate(app, min(n, 2000)))
    batch = 1000
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        app.submit_many("bench.noop", [{}] * min(batch, n - start))
    many = n / (time.perf_counter() - t0)
    return max(probes), one, many


def threads_submit_rate(app: TaskApp, n: int, threads: int = 32) -> float:
    """`threads` threads (a web app's request threads) calling `app.submit` at once,
    n tasks in all; each call returns after its task's commit."""
    start = threading.Barrier(threads + 1)
    each = max(1, n // threads)

    def submit_some() -> None:
        start.wait()
        for _ in range(each):
            app.submit("bench.noop", {})

    pool = [threading.Thread(target=submit_some) for _ in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in pool:
        thread.join()
    return each * threads / (time.perf_counter() - t0)


DEFAULT_WORKER = "default worker"
TWO_WORKERS = "two default workers"


def worker_process(db: str, *options: str) -> subprocess.Popen[str]:
    """`tasklab worker` in a process of its own, with the bench's tasks and these
    options only; returns once it says it is ready."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "tasklab.edges.cli", "worker", "--db", db),
            *("--app", "tasklab.bench.tasks:app", *options),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stderr.readline() if proc.stderr else ""
    if "ready" not in line:
        proc.kill()
        raise SystemExit(f"the worker did not start: {line.strip()}")
    return proc


def stop_worker(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    if proc.stderr:
        proc.stderr.close()


@dataclass(frozen=True)
class Drained:
    per_s: float
    busy_share: float | None  # of the machine's CPU time, while it drained


def default_worker_drain(app: TaskApp, n: int, durability: str, workers: int = 1) -> Drained:
    """n tasks drained by `workers` processes each started exactly as `tasklab worker`
    starts (no options but where the tasks are; `--durability` only when the bench's
    is not the default)."""
    extra = [] if durability == "full" else ["--durability", durability]
    procs = [worker_process(app.db, *extra) for _ in range(workers)]
    try:
        # every worker is ready and idle first, then all n arrive in one commit: no
        # worker starts ahead of another
        ids = app.submit_many("bench.noop", [{}] * n)
        with BusyMeter() as busy:
            _wait_drained(app, ids)
    finally:
        for proc in procs:
            stop_worker(proc)
    return Drained(store_rate(app, ids), busy.share)


def _wait_drained(app: TaskApp, ids: list[str]) -> None:
    # poll gently: the drain figure comes from the store's timestamps, and the
    # observer must not compete with the worker for the GIL and the database (a
    # key lookup of the last tasks, then the kept counters)
    tail = ids[-64:]
    while not all(s.terminal for s in app.store.states_of(tail).values()):
        time.sleep(0.05)
    while not all_done(app, ids):
        time.sleep(0.05)


def store_rate(app: TaskApp, ids: list[str]) -> float:
    first_start = min(app.query(i).started_at for i in ids[:50])  # type: ignore[type-var]
    last_end = max(app.query(i).finished_at for i in ids[-50:])  # type: ignore[type-var]
    return len(ids) / (last_end - first_start).total_seconds()  # type: ignore[operator]


def drain_rate(
    app: TaskApp, n: int, concurrency: int, batch: int = 1000, pin_cpu: int | None = None
) -> Drained:
    ids: list[str] = []
    for start in range(0, n, batch):
        ids += app.submit_many("bench.noop", [{}] * min(batch, n - start))
    with app.worker(concurrency=concurrency, pin_cpu=pin_cpu), BusyMeter() as busy:
        _wait_drained(app, ids)
    return Drained(store_rate(app, ids), busy.share)


def all_done(app: TaskApp, ids: list[str]) -> bool:
    counts = app.counts()
    return counts["queued"] + counts["running"] == 0


def latency(app: TaskApp, samples: int, pin_cpu: int | None = None) -> dict[str, float]:
    worker = worker_process(
        app.db, "--concurrency", "1", *([] if pin_cpu is None else ["--pin-cpu", str(pin_cpu)])
    )
    try:
        time.sleep(0.3)
        lat: list[float] = []
        for _ in range(samples):
            t0 = time.time()
            tid = app.submit("bench.stamp", {})
            token = app.store.change_token()
            while not (snap := app.query(tid)).terminal:
                token = app.store.wait_change(token, 1.0)
            lat.append((snap.result - t0) * 1000)
            time.sleep(0.005)  # the worker is idle again before the next one
    finally:
        stop_worker(worker)
    lat.sort()
    q = statistics.quantiles(lat, n=100)
    return {"p50": round(q[49], 2), "p95": round(q[94], 2), "p99": round(q[98], 2)}


def run(
    db: str,
    n: int,
    durability: str,
    concurrencies: list[int],
    latency_samples: int,
    pin_cpu: int | None = None,
) -> QueueReport:
    app = bench_app(db, durability)
    require_empty(app)
    report = QueueReport(
        db=redact(db),
        n=n,
        durability=durability,
        conditions={
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "worker": "one process, thread runner"
            + ("" if pin_cpu is None else f", its threads pinned to CPU {pin_cpu}"),
            "sqlite_synchronous": durability.upper() if db.startswith("sqlite") else None,
        },
    )
    commit, one, many = enqueue_rates(app, n)
    report.single_commit_per_s = round(commit)
    report.enqueue_one_per_s, report.enqueue_batch_per_s = round(one), round(many)
    report.threads_submit_per_s = round(threads_submit_rate(app, n))
    # drain the 2n tasks just enqueued first, so that every drain starts from empty
    _drain_all(app)
    drains = {
        DEFAULT_WORKER: default_worker_drain(app, n, durability),
        TWO_WORKERS: default_worker_drain(app, n, durability, 2),
    }
    for c in concurrencies:
        drains[str(c)] = drain_rate(app, n, c, pin_cpu=pin_cpu)
    for label, drained in drains.items():
        report.drain_per_s[label] = round(drained.per_s)
        report.busy_share[label] = drained.busy_share
    report.latency_ms = latency(app, latency_samples, pin_cpu)
    report.prune_per_s = round(prune_rate(app))
    app.close()
    return report


def prune_rate(app: TaskApp) -> float:
    """Every task this run made, pruned with its event and notification (terminal
    tasks per second; batches of 500). Also leaves the next run an empty store."""
    time.sleep(0.01)  # past the last finish on SQLite's millisecond clock
    t0 = time.perf_counter()
    pruned = app.prune(timedelta(0))["tasks"]
    return pruned / (time.perf_counter() - t0)


def _drain_all(app: TaskApp) -> None:
    with app.worker(concurrency=32):
        while not all_done(app, []):
            time.sleep(0.05)
