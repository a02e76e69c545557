"""What a worker's store says after every one of its PostgreSQL sessions is killed,
again and again, mid-drain.

    python experiments/007_killed_sessions.py --db postgresql://…/empty_db [--n 600] [--kills 5]

One worker (8 thread slots, lease 2 s) drains N tasks that are *not* retry-safe (so a
task whose claim or terminal write got lost ends `failed/outcome_unknown` instead of
running again). Whenever another N/(kills+1) have ended, an admin session kills every
other backend of the database with `pg_terminate_backend` — the worker's pool, its
listener, its presence lock — as a server restart would. Prints the tasks by (state,
error code, attempt). Honest stores print only succeeded/attempt 1 here, or
`outcome_unknown` for tasks whose outcome really is unknown.
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import psycopg

from tasklab import Settings, TaskApp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, help="an empty PostgreSQL database")
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    app = TaskApp(args.db, settings=Settings(lease=2.0))

    @app.task(name="exp.unsafe", max_attempts=50)
    def unsafe(ctx: Any, n: int) -> int:
        ctx.emit({"n": n})
        time.sleep(0.005)
        return int(ctx.attempt)

    admin = psycopg.connect(args.db, autocommit=True)

    def ended() -> int:
        row = admin.execute(
            "SELECT count(*) FROM tasks WHERE state IN ('succeeded', 'failed', 'cancelled')"
        ).fetchone()
        return int(row[0]) if row else 0

    def kill_all() -> int:
        pids = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
        for (pid,) in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return len(pids)

    ids = app.submit_many("exp.unsafe", [{"n": i} for i in range(args.n)])
    step = args.n // (args.kills + 1)
    with app.worker(concurrency=8):
        for k in range(1, args.kills + 1):
            while ended() < k * step:
                time.sleep(0.005)
            print(f"kill {k}: {kill_all()} sessions at {ended()} ended", flush=True)
        deadline = time.monotonic() + 60
        while ended() < len(ids) and time.monotonic() < deadline:
            time.sleep(0.05)
    app.close()
    rows = admin.execute("SELECT state, error_code, attempt FROM tasks").fetchall()
    for (state, code, attempt), count in sorted(collections.Counter(rows).items(), key=str):
        print(f"{count:6d}  {state:10s} {code or '':16s} attempt {attempt}")
    admin.close()


if __name__ == "__main__":
    main()
