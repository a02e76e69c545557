"""PostgreSQL sessions that die under a live process (a server restart, a killed
backend, a dropped connection): killed here for real with `pg_terminate_backend`."""

from __future__ import annotations

import psycopg
import pytest

from tasklab import State
from tasklab.errors import WorkerAlive
from tests.conftest import make_app, wait_for

PRESENCE_KEY = 7411002  # store/sql/postgres.sql: presence_lock


def _presence_holders(admin: psycopg.Connection) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s"
        " AND mode = 'ShareLock' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (PRESENCE_KEY,),
    ).fetchall()
    return [pid for (pid,) in rows]


def _terminate(admin: psycopg.Connection, pids: list[int]) -> None:
    for pid in pids:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.fixture
def admin(pg_url):  # type: ignore[no-untyped-def]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def test_an_executor_takes_its_presence_lock_again_when_its_session_dies(pg_url, admin):
    app, other = make_app(pg_url), make_app(pg_url)
    try:
        with app.store.executor_presence():
            (first,) = _presence_holders(admin)
            _terminate(admin, [first])
            # the killed session lets go, a new one of the same executor holds the lock
            wait_for(lambda: len(h := _presence_holders(admin)) == 1 and h != [first], timeout=10)
            with pytest.raises(WorkerAlive):  # still alive, and recovery knows it
                other.recover_running()
        # unlocked before the hang-up: free at once
        wait_for(lambda: _presence_holders(admin) == [], timeout=10)
        assert other.recover_running() == []
    finally:
        other.close()
        app.close()


def test_a_worker_whose_sessions_are_killed_mid_drain_still_tells_the_truth(pg_url, admin):
    """Every backend of the worker's process is killed, twice, while tasks run: each
    task still ends succeeded (a failed terminal write is retried on a new session)
    or, where a write could not be made, its lease settles it — never a false state,
    never a task left live."""
    app = make_app(pg_url, lease=2.0)
    try:
        ids = app.submit_many("t.mark", [{"n": i, "ms": 5.0} for i in range(300)])
        with app.worker(concurrency=8):
            # watched through the admin session: any call of this process's pool may be
            # in flight when its session is killed, and then fails (that is the fault)
            for done in (50, 150):
                wait_for(lambda: _count(admin, "succeeded") > done, timeout=20)  # noqa: B023
                _terminate(admin, _backends(admin))
            wait_for(lambda: _count(admin, "succeeded") == len(ids), timeout=60)
        # the kills met calls in flight (SessionLost, by store method), not only idle
        # sessions: the failure path ran, and the checks below say it ended truthfully
        lost = dict(app.store.lost_sessions)  # type: ignore[attr-defined]
        assert sum(lost.values()) >= 1, lost
    finally:
        app.close()
    reader = make_app(pg_url)  # a new process's view
    try:
        for t in ids:
            snap = reader.query(t)
            assert snap.state is State.SUCCEEDED
            assert snap.result == snap.attempt  # the result of the attempt that ended it
        # handled on new sessions, not by the lease: the drain is shorter than a lease,
        # and no task was re-run by the reaper
        assert reader.store.counters()["expired_leases"] == 0
        assert all(reader.query(t).attempt == 1 for t in ids)
    finally:
        reader.close()


def _count(admin: psycopg.Connection, state: str) -> int:
    row = admin.execute("SELECT count(*) FROM tasks WHERE state = %s", (state,)).fetchone()
    return int(row[0]) if row else 0


def _backends(admin: psycopg.Connection) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    ).fetchall()
    return [pid for (pid,) in rows]


def test_the_next_operations_after_killed_sessions_do_not_fail(pg_url, admin):
    """As after a server restart: every idle pooled session is gone. The pool's
    checkout notices the hang-up and connects anew instead of failing a call per
    dead session."""
    app = make_app(pg_url, lease=5.0)
    try:
        tids = [app.submit("t.echo", {"value": i}) for i in range(3)]
        with app.store._pool.connection() as c1, app.store._pool.connection() as c2:
            assert c1 is not c2  # at least two sessions in the pool
        _terminate(admin, _backends(admin))
        wait_for(lambda: _backends(admin) == [], timeout=10)
        for i in range(12):  # more calls than the pool has sessions
            assert app.query(tids[i % 3]).state is State.QUEUED
        assert app.submit("t.echo", {"value": 9})
    finally:
        app.close()


def _backend_running(admin: psycopg.Connection, pattern: str) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND query LIKE %s",
        (pattern,),
    ).fetchall()
    return [pid for (pid,) in rows]


def test_a_call_whose_session_is_killed_raises_session_lost(pg_url, admin):
    """The psycopg → SessionLost mapping, hit by a real kill (not the fault hook)."""
    import threading

    from tasklab.errors import SessionLost

    app = make_app(pg_url)
    got: list[BaseException] = []

    def call() -> None:
        try:
            with app.store._read() as conn:
                conn.execute("SELECT pg_sleep(20)")
        except BaseException as exc:
            got.append(exc)

    try:
        t = threading.Thread(target=call)
        t.start()
        pids = wait_for(lambda: _backend_running(admin, "SELECT pg_sleep(20)%"), timeout=10)
        _terminate(admin, pids)
        t.join(10)
        assert len(got) == 1 and isinstance(got[0], SessionLost), got
        assert app.query(app.submit("t.echo", {"value": 1})).state is State.QUEUED  # next call fine
    finally:
        app.close()


def test_the_listener_reconnects_and_wakes_waiters_again(pg_url, admin):
    """Killing the LISTEN session must not leave waiters to their timeouts: the listener
    reconnects and a commit elsewhere wakes a waiter at once again."""
    import time

    app, other = make_app(pg_url), make_app(pg_url)
    try:
        store = app.store
        store.change_token()  # starts the listener
        (first,) = wait_for(lambda: _backend_running(admin, "LISTEN%"), timeout=10)
        _terminate(admin, [first])
        wait_for(lambda: (p := _backend_running(admin, "LISTEN%")) and p != [first], timeout=10)
        token = store.change_token()
        time.sleep(0.1)  # let the reconnect's own wake-up pass
        token = store.change_token()
        t0 = time.monotonic()
        other.submit("t.echo", {"value": 1})
        assert store.wait_change(token, 10.0) != token
        # a dead listener would leave this waiter to its 10 s timeout
        assert time.monotonic() - t0 < 2.0
    finally:
        other.close()
        app.close()


def test_short_statements_are_never_jit_compiled(pg_url):
    """JIT compiling a statement costs tens of milliseconds; tasklab's take a fraction
    of one. Its sessions turn JIT off, and the state-counting trigger pins its own
    planner settings: planned first inside the claim function (enable_sort off), its
    statement once cost 10^10 and was compiled on every state change — a drain at
    concurrency 1 fell from ~650/s to 16/s. In a session with JIT on (a user's own
    connection), a claim and then fenced writes must not trip it either."""
    from tasklab.core.models import NewTask
    from tasklab.store import open_store

    store = open_store(pg_url)
    try:
        with store._read() as conn:
            assert conn.execute("SHOW jit").fetchone()["jit"] == "off"
        store.submit([NewTask("t.echo", {"value": i}, 1, False, None) for i in range(3)])
        with psycopg.connect(pg_url, autocommit=True) as user:
            assert user.execute("SHOW jit").fetchone()[0] == "on"
            user.execute("LOAD 'auto_explain'")
            user.execute("SET auto_explain.log_min_duration = 0")
            user.execute("SET auto_explain.log_nested_statements = on")
            user.execute("SET client_min_messages = log")
            plans: list[str] = []
            user.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
            claimed = user.execute(
                "SELECT * FROM tasklab_claim(%s, %s, %s, %s, %s)",
                (["t.echo"], "default", 3, "o", 30.0),
            ).fetchall()
            for row in claimed:
                user.execute(store.q["fence"], {"id": row[0], "epoch": row[3], "n": 0})
        counted = [p for p in plans if "task_counts" in p]
        assert len(counted) >= 3 and not any("JIT:" in p for p in counted), counted[-1:]
    finally:
        store.close()


def _vacuums_of(pg_url: str, table: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:  # a new session's statistics
        row = conn.execute(
            "SELECT vacuum_count + autovacuum_count FROM pg_stat_user_tables WHERE relname = %s",
            (table,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_worker_vacuums_the_queue_when_autovacuum_does_not(pg_url):
    """Dead row versions of claimed and finished tasks slow every later claim (a 1M
    drain slowed by half with autovacuum off). The worker's reaper asks the store to
    vacuum the tables past a threshold of dead rows — here 1, so that a few tasks do."""
    from tests.conftest import make_app

    app = make_app(pg_url, lease=1.0)  # the reaper runs every lease/4
    try:
        app.store.vacuumer.threshold, app.store.vacuumer.every = 1, 0.0
        before = _vacuums_of(pg_url, "tasks")
        ids = [app.submit("t.echo", {"value": i}) for i in range(20)]
        with app.worker(concurrency=4):
            wait_for(lambda: all(app.query(i).state is State.SUCCEEDED for i in ids), 20)
            wait_for(lambda: "tasks" in app.store.vacuumer.vacuumed, 20)
        wait_for(lambda: _vacuums_of(pg_url, "tasks") > before, 10)
    finally:
        app.close()
