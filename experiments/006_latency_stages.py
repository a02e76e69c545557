"""Where does enqueue→start latency go? Each stage timed, with an idle worker.

    python experiments/006_latency_stages.py --db postgresql://…/db [--samples 300]

The submitter and the worker are two apps in this process, each with its own store, so
the worker learns of a task only the way another process would (NOTIFY on PostgreSQL,
the doorbell on SQLite). Stages: the submit call (its durable commit), commit → the
worker's wake-up, wake-up → claim start, the claim (its durable commit), claim → the
task's first line. Prints median and 90th percentile of each.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from tasklab.bench.queue import _app

STAGES = ["submit", "commit → wake", "wake → claim", "claim", "claim → start", "total"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    submitter, worker_app = _app(args.db, "full"), _app(args.db, "full")
    marks: dict[str, float] = {}
    store: Any = worker_app.store
    bump, claim = store._signal.bump, store.claim

    def timed_bump() -> None:
        marks.setdefault("wake", time.time())
        bump()

    def timed_claim(*a: Any, **k: Any) -> Any:
        start = time.time()
        claims = claim(*a, **k)
        if claims:
            marks["claim0"], marks["claim1"] = start, time.time()
        return claims

    store._signal.bump, store.claim = timed_bump, timed_claim
    rows: list[tuple[float, ...]] = []
    with worker_app.worker(concurrency=1):
        time.sleep(0.5)
        for _ in range(args.samples):
            marks.clear()
            t0 = time.time()
            tid = submitter.submit("bench.stamp", {})
            t1 = time.time()
            token = submitter.store.change_token()
            while not (snap := submitter.query(tid)).terminal:
                token = submitter.store.wait_change(token, 1.0)
            started = float(snap.result)  # type: ignore[arg-type]
            if "claim0" in marks and "wake" in marks:
                rows.append(
                    (
                        t1 - t0,
                        marks["wake"] - t1,
                        marks["claim0"] - marks["wake"],
                        marks["claim1"] - marks["claim0"],
                        started - marks["claim1"],
                        started - t0,
                    )
                )
            time.sleep(0.005)  # idle again before the next one
    submitter.close()
    worker_app.close()
    print(f"{len(rows)} samples on {args.db.split('@')[-1]} (ms; a negative wake: before the")
    print("submit call returned — the notification overtook the reply)")
    for i, name in enumerate(STAGES):
        values = sorted(r[i] * 1000 for r in rows)
        p50, p90 = values[len(values) // 2], values[int(len(values) * 0.9)]
        print(f"  {name:14s} p50 {p50:6.3f}  p90 {p90:6.3f}")


if __name__ == "__main__":
    main()
