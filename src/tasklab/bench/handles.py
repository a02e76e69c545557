"""`tasklab bench handles`: how soon `TaskHandle.result()` returns after the terminal
commit made by a worker in another process — the default worker in its own process,
one task at a time, the wait on the store's wake-ups (no sleep loop). Latency: the
moment `result()` returned minus the task's stored `finished_at` (the database clock;
the same machine's clock here, so the two compare)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from tasklab.bench.queue import bench_app, require_empty, stop_worker, worker_process


def run(db: str, samples: int, durability: str = "full") -> dict[str, Any]:
    app = bench_app(db, durability)
    try:
        require_empty(app)
        extra = [] if durability == "full" else ["--durability", durability]
        proc = worker_process(app.db, *extra)
        lat: list[float] = []
        try:
            for _ in range(5):  # warm-up: connections, the worker's first claims
                app.handle(app.submit("bench.noop", {})).result(timeout=30)
            for _ in range(samples):
                handle = app.handle(app.submit("bench.noop", {}))
                handle.result(timeout=30)
                returned = time.time()
                finished = handle.snapshot().finished_at
                assert finished is not None
                lat.append((returned - finished.timestamp()) * 1000)
        finally:
            stop_worker(proc)
        lat.sort()
        return {
            "samples": samples,
            "p50_ms": round(statistics.median(lat), 2),
            "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2),
            "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 2),
            "max_ms": round(lat[-1], 2),
        }
    finally:
        app.close()
