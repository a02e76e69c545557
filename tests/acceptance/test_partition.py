"""A worker cut off from its database stops its task when its local lease deadline
passes — before another worker can claim the task — and serves again afterwards.

Worker A reaches PostgreSQL through a proxy that goes silent (no RST, no FIN), worker B
directly; the task is retry-safe, ticks a ledger every 0.2 s and checkpoints before
each tick, so the ledger shows when each execution ran. Also on SQLite: a worker
paused with SIGSTOP past its lease passes no checkpoint after SIGCONT.

A worker cut off in the middle of a transaction leaves its backend waiting, with its
row locks, for a next statement that never comes: the other workers' reaping passes
over those rows instead of waiting, and the server ends that session in seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import pytest

from tasklab import State
from tasklab.core.policy import Backoff
from tasklab.errors import TasklabError
from tasklab.store import open_store
from tests.acceptance.test_shutdown import start_worker
from tests.conftest import make_app, wait_for
from tests.helpers.proxy import SilentProxy

LEASE = 3.0
TASKS = {"thread": "t.ledger", "process": "t.ledger", "async": "t.ledger_async"}


def ledger(d: Path) -> list[tuple[int, int, float]]:
    path = d / "ledger"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(a), int(p), float(t)) for a, p, t in rows]


def worker(url: str, runner: str, lease: float) -> subprocess.Popen[str]:
    return start_worker(url, runner, 1.0, "--concurrency", "1", "--lease", str(lease))


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    finally:
        reap(proc)


def reap(proc: subprocess.Popen[str] | None) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def via(url: str, port: int) -> str:
    """The same database URL through another port on the same host."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{userinfo}{parts.hostname}:{port}"))


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["thread", "process", "async"])
def test_a_partitioned_worker_stops_before_another_can_claim(pg_url, tmp_path, runner):
    pg = urlsplit(pg_url)
    proxy = SilentProxy((pg.hostname or "127.0.0.1", pg.port or 5432))
    app = make_app(pg_url)
    a = worker(via(pg_url, proxy.port), runner, LEASE)
    b = None
    try:
        # A's attempt would tick for 20 s: well past the moment B may claim the task
        tid = app.submit(TASKS[runner], {"dir": str(tmp_path), "seconds": 1.0, "first": 20})
        wait_for(lambda: len(ledger(tmp_path)) >= 3, timeout=30)  # A runs it
        b = worker(pg_url, runner, LEASE)
        proxy.pause()
        cut = time.time()
        snap = wait_for(lambda: (s := app.query(tid)).terminal and s, timeout=40)
        rows = ledger(tmp_path)
        a_ticks = [t for att, _, t in rows if att == 1]
        b_ticks = [t for att, _, t in rows if att == 2]
        # A stopped within the lease (+1 s) of the partition, B started only after
        assert a_ticks and max(a_ticks) <= cut + LEASE + 1.0, max(a_ticks) - cut
        assert b_ticks and min(b_ticks) > max(a_ticks), "the two executions overlapped"
        assert {att for att, _, _ in rows} == {1, 2}
        assert snap.state.value == "succeeded" and snap.result["attempt"] == 2
        assert stop(b) == 0
        b = None
        # the link comes back: A counted its loss and serves again
        proxy.resume()
        wait_for(lambda: app.store.counters()["lease_deadline_stops"] == 1, timeout=30)
        (tmp_path / "again").mkdir()
        again = app.submit(TASKS[runner], {"dir": str(tmp_path / "again"), "seconds": 0.1})
        done = wait_for(lambda: (s := app.query(again)).terminal and s, timeout=40)
        assert done.state.value == "succeeded" and done.result["attempt"] == 1
        assert a.poll() is None
        assert stop(a) == 0
    finally:
        proxy.resume()
        reap(a)
        reap(b)
        proxy.close()
        app.close()


def pause_between_writes(proc: subprocess.Popen[str], db: Path) -> None:
    """SIGSTOP `proc` at a moment it holds no write transaction: a process frozen in
    the middle of one holds SQLite's write lock, and every other writer waits until
    it resumes or dies (SQLite's file lock: nothing another process can undo)."""
    import sqlite3

    for _ in range(100):
        proc.send_signal(signal.SIGSTOP)
        probe = sqlite3.connect(db, timeout=0.5, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")  # the write lock is free: not mid-write
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            proc.send_signal(signal.SIGCONT)  # frozen mid-write: let it finish, again
            time.sleep(0.05)
        finally:
            probe.close()
    pytest.fail("the worker was mid-write at every try")


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["thread", "process", "async"])
def test_a_paused_worker_passes_no_checkpoint_after_it_resumes(tmp_path, runner):
    url = f"sqlite:///{tmp_path / 'tasklab.db'}"
    lease = 2.0
    app = make_app(url)
    a = worker(url, runner, lease)
    b = None
    try:
        tid = app.submit(TASKS[runner], {"dir": str(tmp_path), "seconds": 1.0, "first": 20})
        wait_for(lambda: len(ledger(tmp_path)) >= 2, timeout=30)
        b = worker(url, runner, lease)
        pause_between_writes(a, tmp_path / "tasklab.db")
        if runner == "process":  # its child is paused too, as a frozen machine would be
            for pid in {p for _, p, _ in ledger(tmp_path)}:
                subprocess.run(["kill", "-STOP", str(pid)], check=False)
        stopped = time.time()
        # B takes over once A's lease has expired (reaper, then the retry's backoff)
        wait_for(lambda: any(att == 2 for att, _, _ in ledger(tmp_path)), timeout=30)
        resumed = time.time()
        if runner == "process":
            for pid in {p for att, p, _ in ledger(tmp_path) if att == 1}:
                subprocess.run(["kill", "-CONT", str(pid)], check=False)
        a.send_signal(signal.SIGCONT)
        snap = wait_for(lambda: (s := app.query(tid)).terminal and s, timeout=30)
        time.sleep(0.5)  # A had every chance to tick again
        late = [t for att, _, t in ledger(tmp_path) if att == 1 and t > stopped]
        assert late == [], f"A passed {len(late)} checkpoint(s) after it resumed at {resumed}"
        assert snap.state.value == "succeeded" and snap.result["attempt"] == 2
        assert stop(b) == 0
        b = None
        assert stop(a) == 0
    finally:
        reap(a)
        reap(b)
        app.close()


class CutOffTransaction:
    """A session of `store` that runs `statements` in one transaction and is cut off
    (the proxy goes silent) before its COMMIT: its backend is left idle in the
    transaction, holding what the statements locked."""

    def __init__(self, store, proxy: SilentProxy, statements: list[tuple[str, tuple]]) -> None:  # type: ignore[no-untyped-def]
        self.backend_pid = 0
        self._locked, self._cut = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(store, statements))
        self._thread.start()
        CutOffTransaction._threads.append(self._thread)
        assert self._locked.wait(10), "the transaction did not take its locks"
        proxy.pause()
        self._cut.set()

    def _run(self, store, statements) -> None:  # type: ignore[no-untyped-def]
        try:
            with store._write() as conn:
                self.backend_pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
                for sql, params in statements:
                    conn.execute(sql, params)
                self._locked.set()
                self._cut.wait(10)
        except TasklabError:
            pass  # its COMMIT met the silent network (tcp_user_timeout)

    _threads: ClassVar[list[threading.Thread]] = []

    @classmethod
    def join_all(cls) -> None:
        while cls._threads:
            cls._threads.pop().join(30)


def backend_state(admin_url: str, pid: int) -> str | None:
    """The backend's state, read from a new session (None: it has ended)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return None if row is None else str(row[0])


@contextmanager
def cut_off_setup(pg_url: str, idle_ms: int, lease: float) -> Iterator[tuple[Any, Any, Any]]:
    """(a store reached through a silent-able proxy, that proxy, an app reached
    directly), closed in the right order: the proxy forwards again first, so that a
    cut-off transaction's thread ends."""
    pg = urlsplit(pg_url)
    proxy = SilentProxy((pg.hostname or "127.0.0.1", pg.port or 5432))
    cut_off = open_store(via(pg_url, proxy.port), idle_in_transaction_timeout_ms=idle_ms)
    app = make_app(pg_url, lease=lease)
    try:
        yield cut_off, proxy, app
    finally:
        proxy.resume()
        CutOffTransaction.join_all()
        cut_off.close()
        app.close()
        proxy.close()


def test_a_worker_cut_off_mid_heartbeat_holds_up_no_other_workers_reaping(pg_url):
    """Its executor row stays locked (the server would end the session only after a
    minute here): a live worker's rounds pass over that row, expire the cut-off
    worker's lease and run its task again while the backend still waits."""
    with cut_off_setup(pg_url, idle_ms=60_000, lease=2.0) as (cut_off, proxy, app):
        cut_off.register_worker("cut-off")
        tid = app.submit("t.mark", {"n": 1})
        assert cut_off.claim(["t.mark"], 1, "cut-off#1", 2.0)
        # the first statement of its heartbeat: the row is locked, its beat not moved
        beat = "UPDATE workers SET heartbeat_at = heartbeat_at WHERE id = %s"
        held = CutOffTransaction(cut_off, proxy, [(beat, ("cut-off",))])
        with app.worker(concurrency=1):
            snap = wait_for(lambda: (s := app.query(tid)).terminal and s, timeout=20)
            assert backend_state(pg_url, held.backend_pid) == "idle in transaction"
        assert snap.state is State.SUCCEEDED and snap.result == 2


def test_the_server_ends_a_cut_off_transaction_and_its_locks_go_with_it(pg_url):
    with cut_off_setup(pg_url, idle_ms=1000, lease=1.0) as (cut_off, proxy, app):
        tid = app.submit("t.mark", {"n": 1})
        assert cut_off.claim(["t.mark"], 1, "cut-off#1", 1.0)
        # cut off in the middle of a write to its task: the row is locked
        lock = "SELECT id FROM tasks WHERE id = %s FOR UPDATE"
        held = CutOffTransaction(cut_off, proxy, [(lock, (tid,))])
        cut = time.monotonic()
        wait_for(lambda: backend_state(pg_url, held.backend_pid) is None, timeout=10)
        assert time.monotonic() - cut < 5.0  # the 1 s limit, not TCP's hours
        # the lease has run out and the row is free: the reaper settles the task
        resolved = wait_for(lambda: app.store.expire(Backoff()), timeout=10)
        assert resolved == [tid]
        assert app.query(tid).state is State.QUEUED  # retry-safe: queued again


def test_tasklab_sessions_carry_their_limits_and_a_transactional_run_lifts_its_own(pg_url):
    """The store's sessions carry the idle-in-transaction limit and server-side
    keepalives; a transactional task idles in its transaction (its body is user code)
    past that limit and still commits."""
    import psycopg

    store = open_store(pg_url, idle_in_transaction_timeout_ms=300)
    app = make_app(pg_url)
    try:
        with store._read() as conn:
            shown = {
                name: conn.execute(f"SHOW {name}").fetchone()[name]
                for name in ("idle_in_transaction_session_timeout", "tcp_keepalives_idle")
            }
        assert shown == {
            "idle_in_transaction_session_timeout": "300ms",
            "tcp_keepalives_idle": "10",
        }
        with app.store._read() as conn:  # type: ignore[attr-defined]  # the default
            assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == {
                "idle_in_transaction_session_timeout": "5s"
            }
        # an ordinary transaction idle past the limit is ended by the server
        with pytest.raises(TasklabError):
            with store._write() as conn:
                conn.execute("SELECT 1")
                time.sleep(1.0)
                conn.execute("SELECT 1")
        # a transactional run idles 1 s in its transaction (t.tx_sleep) and commits
        runner = make_app(pg_url, store=store)
        tid = runner.submit("t.tx_sleep", {"seconds": 1.0})
        assert runner.run_pending() >= 1
        with psycopg.connect(pg_url) as check:
            (state,) = check.execute("SELECT state FROM tasks WHERE id = %s", (tid,)).fetchone()
        assert state == "succeeded"
        # its body's own queries may scan sequentially (tasklab's statements may not)
        tid = runner.submit("t.tx_settings", {})
        assert runner.run_pending() >= 1
        assert runner.query(tid).result == {"enable_seqscan": "on", "jit": "off"}
        with store._read() as conn:  # and the session is tasklab's again afterwards
            assert conn.execute("SHOW enable_seqscan").fetchone() == {"enable_seqscan": "off"}
    finally:
        store.close()  # the runner's too
        app.close()


__all__ = ["json"]
