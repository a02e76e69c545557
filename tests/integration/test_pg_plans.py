"""PostgreSQL: the statements that claim, fence and finish a set of tasks keep sane
plans when the statistics say `tasks` is empty — as they do after a VACUUM or ANALYZE
that ran between two bursts, the normal life of a queue table. Before migration 011
the claim's `UPDATE ... FROM picked WHERE t.id = picked.id` became a nested loop over
the whole primary key (each claim compared every task with every claimed id: a drain
7x slower until the next ANALYZE), and a sort priced at 1e10 by `enable_sort = off`
compiled its plan with JIT (66 ms a claim).

The plans are the ones the server ran, nested statements included (`auto_explain`,
reported to this session)."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tasklab.store.shared.core import SqlCore
from tests.conftest import make_app

N = 3000
BATCH = 32


def _explained(conn: psycopg.Connection[Any]) -> list[str]:
    """Every plan this session runs from now on, as the server ran it."""
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_analyze = on"):
        conn.execute(f"SET auto_explain.{setting}")
    conn.execute("SET client_min_messages = log")
    return plans


def _batch(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch statement's parameters, as the store passes them."""
    return SqlCore._rows_param(rows)


def _reads(conn: psycopg.Connection[Any]) -> int:
    """Rows this transaction has read from `tasks` so far, by any scan but by address."""
    row = conn.execute(
        "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) AS n"
        " FROM pg_stat_xact_user_tables WHERE relname = 'tasks'"
    ).fetchone()
    return int(row["n"]) if row else 0


def _ran(
    conn: psycopg.Connection[Any],
    plans: list[str],
    sql: str,
    params: dict[str, Any],
    most: int | None = None,
) -> Any:
    """Run a statement: no plan node run once per task of the table, no JIT, and when
    `most` is given no more rows of `tasks` read than that."""
    before = _reads(conn)
    del plans[:]
    cur = conn.execute(sql, params)
    rows = cur.fetchall() if cur.description is not None else cur.rowcount
    after = _reads(conn)  # (a query's plan is told when its portal closes: here)
    ran = "\n".join(p for p in plans if "pg_stat_xact" not in p)
    # a node run once per task of the table (a nested loop over all of them), not
    # once per task of the statement
    loops = max(int(n) for n in re.findall(r"loops=(\d+)", ran))
    assert loops <= 4 * BATCH, ran
    assert "JIT:" not in ran, ran
    assert "tasks" in ran, ran  # the plans were seen
    if most is not None:
        assert after - before <= most, ran
    return rows


def test_claim_fence_finish_plans_hold_when_statistics_say_empty(pg_url):
    app = make_app(pg_url)
    app.configure_queue("limited", concurrency=1000)
    # a burst that came and went: its pages stay (a vacuum under load cannot truncate
    # them), the statistics say they hold nothing
    app.submit_many("t.echo", [{"value": i} for i in range(2 * N)])
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DELETE FROM tasks")
        admin.execute("VACUUM (ANALYZE, TRUNCATE false) tasks")
        pages, tuples = admin.execute(
            "SELECT relpages, reltuples FROM pg_class WHERE relname = 'tasks'"
        ).fetchone()
        assert pages > 0 and tuples == 0
    app.submit_many("t.echo", [{"value": i} for i in range(N)])
    app.submit_many("t.echo", [{"value": i} for i in range(N)], queue="limited")
    q = app.store.q
    with psycopg.connect(pg_url, row_factory=dict_row) as conn:
        plans = _explained(conn)
        common = {"names": ["t.echo"], "limit": BATCH, "owner": "w", "lease": 30.0}
        claimed = _ran(conn, plans, q["claim_next"], {**common, "queue": "default"}, most=4 * BATCH)
        assert len(claimed) == BATCH
        limited = _ran(
            conn,
            plans,
            q["claim_limited"],
            {**common, "served": ["limited"], "keys": [], "keyed": False},
            most=4 * BATCH,
        )
        assert len(limited) == BATCH
        rows = claimed + limited
        fenced = _ran(
            conn,
            plans,
            q["fence_many"],
            _batch([{"id": r["id"], "epoch": r["epoch"], "n": 1} for r in rows]),
        )
        assert len(fenced) == len(rows)
        seqs = {r["id"]: r["event_seq"] for r in fenced}
        n = len(rows)
        finished = _ran(
            conn,
            plans,
            q["finish_batch"],
            _batch(
                [
                    {
                        "id": r["id"],
                        "epoch": r["epoch"],
                        "from_state": "running",
                        "state": "succeeded",
                        "result": "1",
                        "error_code": None,
                        "error_message": None,
                        "reason": None,
                        "terminal": True,
                        "delay": 0.0,
                        "event_seq": seqs[r["id"]],
                    }
                    for r in rows
                ]
            ),
        )
        assert finished == n
        conn.rollback()
    app.close()


def test_statements_on_one_running_task_look_its_id_up(pg_url):
    """The generic plans (the ones a prepared statement settles on after five runs) of
    the statements that find running tasks by id look the ids up. While their
    live-state check could match tasks_live's predicate, statistics taken while few
    tasks ran made the plans walk the whole of tasks_live — an entry for every task
    that ran since the last vacuum — and filter it by id: ~1,500 entries read for one
    task here, ~12,000 per fenced batch in a 20,000-task drain."""
    app = make_app(pg_url, lease=600.0)
    app.submit_many("t.echo", [{"value": i} for i in range(N)])
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("ANALYZE tasks")  # statistics taken while nothing ran
    q = app.store.q
    common = {"names": ["t.echo"], "limit": BATCH, "owner": "w", "lease": 600.0}
    with psycopg.connect(pg_url, row_factory=dict_row) as conn:
        # tasks that ran: their entries stay in tasks_live until a vacuum
        for _ in range(N // BATCH // 2):
            conn.execute(q["claim_next"], {**common, "queue": "default"})
        conn.commit()
        claimed = conn.execute(q["claim_next"], {**common, "queue": "default"}).fetchall()
        conn.execute("SET plan_cache_mode = force_generic_plan")
        plans = _explained(conn)
        one = {"id": claimed[0]["id"], "epoch": claimed[0]["epoch"]}
        batch = _batch([{"id": r["id"], "epoch": r["epoch"], "n": 0} for r in claimed])
        statements = [
            ("fence_many", batch, BATCH),
            ("fence", {**one, "n": 0}, 1),
            ("heartbeat", {**one, "lease": 600.0}, 1),
            ("cancel_running", {"id": claimed[1]["id"], "reason": "user"}, None),
            ("release", {"id": claimed[2]["id"], "epoch": claimed[2]["epoch"]}, None),
        ]
        for name, params, rows in statements:
            for _ in range(6):
                del plans[:]
                cur = conn.execute(q[name], params, prepare=True)
                if rows is not None:
                    assert len(cur.fetchall()) == rows, name
                conn.execute("SELECT 1")  # (a query's plan is told when its portal closes)
            ran = "\n".join(p for p in plans if "UPDATE tasks" in p or "FOR UPDATE" in p)
            assert "tasks_pkey" in ran and "tasks_live" not in ran, (name, ran)
        conn.rollback()
    app.close()


def test_plans_made_while_tasks_is_empty_walk_indexes_in_the_next_burst(pg_url):
    """A queue table emptied and vacuumed has no pages: a sequential scan of it costs
    nothing, and every plan made then — a prepared statement's generic plan, a PL/pgSQL
    function's — read the whole table for each fence, heartbeat and claim of the next
    burst, until an autovacuum's statistics replaced it. tasklab's sessions run with
    enable_seqscan off, and the promoter, the reaper, the scheduler and the webhook
    sender bound their walks by now (an index condition: clock_timestamp() cannot be
    one)."""
    app = make_app(pg_url, lease=600.0)
    app.submit_many("t.echo", [{"value": i} for i in range(100)])
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DELETE FROM tasks")
        admin.execute("VACUUM tasks")
        pages = admin.execute("SELECT relpages FROM pg_class WHERE relname = 'tasks'")
        assert pages.fetchone()[0] == 0
    q = app.store.q
    fake = {"id": "0" * 24, "epoch": 1}
    statements = [
        ("fence_many", _batch([{**fake, "n": 0}])),
        ("fence", {**fake, "n": 0}),
        ("heartbeat", {**fake, "lease": 600.0}),
        ("states_of", {"ids": [fake["id"]]}),
        ("expired", {"limit": 100}),
        (
            "claim_next",
            {"names": ["t.echo"], "limit": BATCH, "owner": "w", "lease": 600.0, "queue": "default"},
        ),
    ]
    conn = app.store._dedicated()  # a session as the store makes them
    try:
        for name, params in statements:  # plans made while the table is empty
            for _ in range(6):
                conn.execute(q[name], params, prepare=True).fetchall()
        app.submit_many("t.echo", [{"value": i} for i in range(N)])
        plans = _explained(conn)
        with conn.transaction():
            before = _reads(conn)
            claimed = conn.execute(q["claim_next"], statements[-1][1], prepare=True).fetchall()
            ids = [r["id"] for r in claimed]
            params = _batch([{"id": r["id"], "epoch": r["epoch"], "n": 0} for r in claimed])
            assert len(conn.execute(q["fence_many"], params, prepare=True).fetchall()) == BATCH
            one = {"id": ids[0], "epoch": claimed[0]["epoch"]}
            assert conn.execute(q["fence"], {**one, "n": 0}, prepare=True).fetchall()
            assert conn.execute(q["heartbeat"], {**one, "lease": 600.0}, prepare=True).fetchall()
            assert len(conn.execute(q["states_of"], {"ids": ids}, prepare=True).fetchall()) == BATCH
            assert not conn.execute(q["expired"], {"limit": 100}, prepare=True).fetchall()
            conn.execute(q["schedules_due"], {"limit": 10}).fetchall()
            conn.execute(q["outbox_pending"], {"url": "http://127.0.0.1/", "limit": 10}).fetchall()
            read = _reads(conn) - before
        ran = "\n".join(p for p in plans if "pg_stat_xact" not in p)
        assert "Seq Scan on tasks" not in ran, ran
        assert read <= 8 * BATCH, (read, ran)  # not the N tasks of the burst
        for bound in (
            r"run_after <= \$\d+",
            r"wake_at <= \$\d+",
            r"lease_until <= statement_",
            r"next_tick <= statement_",
            r"next_attempt_at <= statement_",
        ):
            assert re.search(r"Index Cond: .*" + bound, ran), (bound, ran)
        conn.rollback()
    finally:
        conn.close()
    app.close()
