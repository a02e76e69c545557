"""A worker cut off from its database stops its task when its local lease deadline
passes — before another worker can claim the task — and serves again afterwards.

Worker A reaches PostgreSQL through a proxy that goes silent (no RST, no FIN), worker B
directly; the task is retry-safe, ticks a ledger every 0.2 s and checkpoints before
each tick, so the ledger shows when each execution ran. Also on SQLite: a worker
paused with SIGSTOP past its lease passes no checkpoint after SIGCONT.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

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
        a.send_signal(signal.SIGSTOP)
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


__all__ = ["json"]
