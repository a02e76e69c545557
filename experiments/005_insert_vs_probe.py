"""How close can a single submit come to the store's smallest commit? Bare sqlite3, no
tasklab code in the timed loops.

    python experiments/005_insert_vs_probe.py [--rounds 6] [--n 1000]

On one warm WAL file with `synchronous=FULL`, alternating blocks of n commits each:
the commit probe (one counter row updated), tasklab's own insert of a task row (its
schema, built by opening a store), the same table and indexes keyed by a 63-bit integer
(a rowid table: appends fill fresh pages instead of splitting), and huey's queue table
(an integer-keyed row plus one index) for comparison. Prints the median µs per commit
and each as a share of the probe's rate: the ceiling for `bench queue`'s "enqueue one
at a time".
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _shares import print_shares  # experiments/ is on the path when run

from tasklab.store.sqlite import SQLiteStore

HUEY = """
CREATE TABLE huey_task (id INTEGER NOT NULL PRIMARY KEY, queue TEXT NOT NULL,
                        data BLOB NOT NULL, priority REAL NOT NULL DEFAULT 0.0);
CREATE INDEX huey_task_priority_id ON huey_task (priority DESC, id ASC);
"""


def integer_keyed(conn: sqlite3.Connection, insert_task: str) -> str:
    """tasklab's tasks table and indexes as `tasks_int`, keyed by an integer; its insert."""
    for (sql,) in conn.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'tasks' ORDER BY type DESC"
    ).fetchall():
        sql = sql.replace('"tasks"', "tasks_int").replace(" ON tasks ", " ON tasks_int ")
        sql = sql.replace("INDEX tasks_", "INDEX tasks_int_")
        sql = sql.replace("id              TEXT NOT NULL PRIMARY KEY", "id INTEGER PRIMARY KEY")
        conn.execute(sql.replace(") WITHOUT ROWID", ")"))
    return insert_task.replace("INSERT INTO tasks ", "INSERT INTO tasks_int ", 1)


def timed(conn: sqlite3.Connection, n: int, statement: Callable[[], tuple[str, object]]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        sql, params = statement()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, params).fetchall()
        conn.execute("COMMIT")
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "ratio.db"
        store = SQLiteStore(db)  # the schema, as tasklab makes it
        insert_task = store.q["insert_task"]
        store.close()
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(HUEY)
        insert_int = integer_keyed(conn, insert_task)
        next_int = iter(range(int(time.time() * 1000) << 20, 1 << 63))  # ms, then a count
        conn.execute("INSERT INTO counters (name, value) VALUES ('probe', 0)")

        def probe() -> tuple[str, object]:
            return "UPDATE counters SET value = value + 1 WHERE name = 'probe'", ()

        def row(key: object) -> dict[str, object]:
            return {
                "id": key,
                "task": "bench.noop",
                "payload": "{}",
                "max_attempts": 1,
                "retry_safe": 0,
                "request_bound": 0,
                "timeout": None,
                "idempotency_key": None,
            }

        def task_row() -> tuple[str, object]:
            return insert_task, row(f"{int(time.time() * 1000):012x}{os.urandom(6).hex()}")

        def int_row() -> tuple[str, object]:
            return insert_int, row(next(next_int))

        def huey_row() -> tuple[str, object]:
            return "INSERT INTO huey_task (queue, data, priority) VALUES ('q', ?, 0.0)", (
                b"x" * 200,
            )

        kinds = {
            "probe": probe,
            "tasklab task row": task_row,
            "same, integer key": int_row,
            "huey task row": huey_row,
        }
        for fn in kinds.values():  # warm up: grow the WAL file once, fill the caches
            timed(conn, args.n, fn)
        results: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for name, fn in kinds.items():
                results[name].append(timed(conn, args.n, fn))
        conn.close()
    print_shares(results)


if __name__ == "__main__":
    main()
