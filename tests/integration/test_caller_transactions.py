"""`submit(..., connection=)`: a task inserted in the caller's own transaction exists if
and only if that transaction commits (SPEC §9), on both stores, with the drivers'
connections and with SQLAlchemy; a connection that is not on the store is refused and
nothing is written. Every check reads from a new connection."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.orm import Session

from tasklab import ForeignConnection, TaskApp
from tasklab.core.states import State
from tests.acceptance.test_limits import spawn, stop
from tests.acceptance.test_sigkill import ROOT, env
from tests.conftest import make_app, wait_for


def _path(url: str) -> str:
    return url.removeprefix("sqlite:///")


@pytest.fixture
def raw(store_url: str) -> Iterator[Any]:
    """The caller's own connection to the store's database, as a web app holds one."""
    conn: Any = (
        sqlite3.connect(_path(store_url))
        if store_url.startswith("sqlite")
        else psycopg.connect(store_url)
    )
    yield conn
    conn.close()


def _engine(url: str) -> sqlalchemy.Engine:
    if url.startswith("sqlite"):
        return sqlalchemy.create_engine(f"sqlite:///{_path(url)}")
    return sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def _fresh_count(url: str) -> int:
    """Tasks in the store, read by a new app (a new connection)."""
    other = make_app(url)
    try:
        counts = other.counts()
        return sum(counts.values())
    finally:
        other.close()


def _fresh_state(url: str, task_id: str) -> State | None:
    other = make_app(url)
    try:
        found = other.store.states_of([task_id])
        return found.get(task_id)
    finally:
        other.close()


def test_rollback_leaves_no_task(app, store_url, raw):
    task_id = app.submit("t.echo", {"value": 1}, connection=raw)
    assert _fresh_state(store_url, task_id) is None  # not visible before the commit
    raw.rollback()
    assert _fresh_state(store_url, task_id) is None
    assert _fresh_count(store_url) == 0


def test_commit_makes_it_claimable(app, store_url, raw):
    ids = [app.submit("t.echo", {"value": 1}, connection=raw)]
    ids += app.submit_many("t.echo", [{"value": 2}, {"value": 3}], connection=raw)
    raw.commit()
    other = make_app(store_url)
    try:
        assert other.run_pending() == 3
        assert [other.query(i).result for i in ids] == [1, 2, 3]
    finally:
        other.close()


def test_the_callers_own_rows_and_the_task_commit_together(app, store_url, raw):
    """The point of it: an order row and its task, one transaction, both or neither."""
    sqlite = isinstance(raw, sqlite3.Connection)
    key = "INTEGER PRIMARY KEY" if sqlite else "SERIAL PRIMARY KEY"
    raw.execute(f"CREATE TABLE orders (id {key}, task_id TEXT)")
    raw.commit()
    for keep in (False, True):
        task_id = app.submit("t.echo", {"value": 7}, connection=raw)
        mark = "?" if sqlite else "%s"
        raw.execute(f"INSERT INTO orders (task_id) VALUES ({mark})", (task_id,))
        raw.commit() if keep else raw.rollback()
        assert (_fresh_state(store_url, task_id) is State.QUEUED) is keep
    rows = raw.execute("SELECT task_id FROM orders").fetchall()
    assert len(rows) == 1 and _fresh_state(store_url, rows[0][0]) is State.QUEUED


def test_an_idempotency_key_answers_the_committed_task(app, store_url, raw):
    first = app.submit("t.echo", {"value": 1}, "order-7")
    again = app.submit("t.echo", {"value": 1}, "order-7", connection=raw)
    raw.commit()
    assert again == first and _fresh_count(store_url) == 1


def test_workers_wake_at_the_commit_and_never_see_it_before(app, store_url, raw):
    waiter = make_app(store_url)
    token = waiter.change_token()
    woke = threading.Event()

    def wait() -> None:
        waiter.wait_change(token, 30.0)
        woke.set()

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        task_id = app.submit("t.echo", {"value": 1}, connection=raw)
        assert not woke.wait(0.5)  # an uncommitted insert wakes nobody
        raw.commit()
        assert woke.wait(5.0)  # well before the 30 s timeout: the commit woke it
    finally:
        thread.join(35)
        waiter.close()
    assert _fresh_state(store_url, task_id) is State.QUEUED


def test_a_worker_process_runs_it_only_after_the_commit(app, store_url, raw):
    worker = spawn(store_url, concurrency=2)
    try:
        task_id = app.submit("t.echo", {"value": 5}, connection=raw)
        time.sleep(1.0)  # the worker is idle and polling meanwhile
        assert _fresh_state(store_url, task_id) is None
        committed_at = app.store.now()
        raw.commit()
        wait_for(lambda: _fresh_state(store_url, task_id) is State.SUCCEEDED, 20)
        snap = app.query(task_id)
        assert snap.result == 5 and snap.started_at is not None
        assert snap.started_at >= committed_at
    finally:
        stop([worker])


CRASH = textwrap.dedent(
    """
    import os, signal, sqlite3, sys
    import psycopg
    from tests.conftest import make_app
    url = sys.argv[1]
    app = make_app(url)
    conn = (sqlite3.connect(url.removeprefix("sqlite:///")) if url.startswith("sqlite")
            else psycopg.connect(url))
    task_id = app.submit("t.echo", {"value": 1}, connection=conn)
    print(task_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # before the commit
    """
)


def test_a_crash_before_the_commit_leaves_nothing(store_url):
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, store_url],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr
    task_id = proc.stdout.strip()
    assert len(task_id) == 24
    assert _fresh_state(store_url, task_id) is None
    assert _fresh_count(store_url) == 0
    other = make_app(store_url)  # and the store is writable: the killed transaction
    try:  # left no lock behind
        assert other.run_pending() == 0
        other.submit("t.echo", {})
    finally:
        other.close()


@pytest.mark.parametrize("style", ["session", "connection"])
def test_sqlalchemy_session_and_connection(app, store_url, style):
    engine = _engine(store_url)
    try:
        for keep in (False, True):
            if style == "session":
                with Session(engine) as session:
                    task_id = app.submit("t.echo", {"value": 1}, connection=session)
                    session.commit() if keep else session.rollback()
            else:
                with engine.connect() as conn:
                    task_id = app.submit("t.echo", {"value": 1}, connection=conn)
                    conn.commit() if keep else conn.rollback()
            assert (_fresh_state(store_url, task_id) is State.QUEUED) is keep
        with engine.connect() as conn:  # closed without a commit: rolled back
            task_id = app.submit("t.echo", {"value": 1}, connection=conn)
        assert _fresh_state(store_url, task_id) is None
    finally:
        engine.dispose()
    assert _fresh_count(store_url) == 1


def test_another_database_is_refused_and_nothing_is_written(
    app, store_url, tmp_path: Path, pg_url: str
):
    if store_url.startswith("sqlite"):
        others: list[Any] = [sqlite3.connect(tmp_path / "other.db"), sqlite3.connect(":memory:")]
        others.append(psycopg.connect(pg_url))  # the other kind of database
    else:
        others = [psycopg.connect(pg_url), sqlite3.connect(tmp_path / "other.db")]
    for conn in [*others, object(), "sqlite:///x.db"]:
        with pytest.raises(ForeignConnection):
            app.submit("t.echo", {"value": 1}, connection=conn)
    for conn in others:
        conn.close()
    assert _fresh_count(store_url) == 0


def test_an_async_connection_is_refused(app, store_url):
    if store_url.startswith("sqlite"):
        pytest.skip("an async psycopg connection is a PostgreSQL driver's")
    import asyncio

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(store_url)
        try:
            with pytest.raises(ForeignConnection, match="sync"):
                app.submit("t.echo", {}, connection=conn)
        finally:
            await conn.close()

    asyncio.run(main())


def test_bad_input_in_the_callers_transaction_changes_nothing(app, store_url, raw):
    from tasklab.errors import InvalidPayload

    with pytest.raises(InvalidPayload):
        app.submit("t.echo", {"nope": 1}, connection=raw)
    raw.commit()
    assert _fresh_count(store_url) == 0


def test_the_readme_example_runs(tmp_path: Path):
    """The README's SQLite example, as written there."""
    app = TaskApp(f"sqlite:///{tmp_path / 'shop.db'}")

    @app.task("shop.send_invoice")
    def send_invoice(ctx: Any, order_id: int) -> str:
        return f"invoice {order_id}"

    app.counts()  # the store opened once first: the file exists, in WAL mode (a worker does it too)
    conn = sqlite3.connect(tmp_path / "shop.db")
    with conn:  # commits at the end of the block, rolls back on an exception
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")
        order_id = conn.execute("INSERT INTO orders DEFAULT VALUES").lastrowid
        app.submit("shop.send_invoice", {"order_id": order_id}, connection=conn)
    conn.close()
    assert app.run_pending() == 1
    app.close()
