"""How close can a single submit come to PostgreSQL's smallest commit? Bare psycopg,
one autocommit connection, no pool, no tasklab code in the timed loops.

    python experiments/008_pg_insert_vs_probe.py --db postgresql://…/empty_db [--n 1500]

Alternating blocks of n commits each: the commit probe (one counter row updated, as
`bench queue` measures it), tasklab's own insert of a task row (its schema and
statement, time-ordered ids) with the wake-up trigger that NOTIFYs listeners, and the
same insert with the table's triggers disabled. Prints the median µs per commit and
each as a share of the probe's rate: the ceiling for "enqueue one at a time".
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import psycopg
from _shares import print_shares  # experiments/ is on the path when run

from tasklab.store.postgres import PostgresStore
from tasklab.store.sqlstore import new_task_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, help="an empty PostgreSQL database")
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    store = PostgresStore(args.db)  # the schema, as tasklab makes it
    insert_task = store.q["insert_task"]
    store.close()
    conn = psycopg.connect(args.db, autocommit=True)
    conn.execute("INSERT INTO counters (name, value) VALUES ('probe', 0) ON CONFLICT DO NOTHING")
    probe = "UPDATE counters SET value = value + 1 WHERE name = 'probe'"

    def task_row() -> dict[str, Any]:
        return {
            "id": new_task_id(),
            "task": "bench.noop",
            "payload": "{}",
            "max_attempts": 1,
            "retry_safe": False,
            "request_bound": False,
            "timeout": None,
            "idempotency_key": None,
        }

    def timed(sql: str, params: Callable[[], dict[str, Any]]) -> float:
        start = time.perf_counter()
        for _ in range(args.n):
            conn.execute(sql, params()).fetchall() if "RETURNING" in sql else conn.execute(sql)
        return (time.perf_counter() - start) / args.n * 1e6

    timed(probe, dict)  # warm up: caches, prepared statements
    timed(insert_task, task_row)
    results: dict[str, list[float]] = {"probe": [], "task row": [], "task row, no trigger": []}
    try:
        for _ in range(args.rounds):
            results["probe"].append(timed(probe, dict))
            results["task row"].append(timed(insert_task, task_row))
            conn.execute("ALTER TABLE tasks DISABLE TRIGGER USER")
            results["task row, no trigger"].append(timed(insert_task, task_row))
            conn.execute("ALTER TABLE tasks ENABLE TRIGGER USER")
    finally:
        conn.execute("ALTER TABLE tasks ENABLE TRIGGER USER")
        conn.close()
    print_shares(results)


if __name__ == "__main__":
    main()
