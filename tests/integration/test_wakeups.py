"""SQLite wake-ups across processes: the doorbell wakes a waiter at once, the slow
`data_version` check still catches writers that do not ring, and a dead process's
doorbell is forgotten by the first writer that finds it gone."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasklab.store.doorbell import SUPPORTED
from tasklab.store.sqlite import SQLiteStore
from tests.conftest import make_app

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="the doorbell is Linux-only")

SUBMIT = """
import sys
from tests.conftest import make_app
app = make_app(sys.argv[1])
app.submit("t.echo", {"value": 1})
app.close()
"""


def _submit_from_another_process(url: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    subprocess.run([sys.executable, "-c", SUBMIT, url], check=True, env=env, timeout=60)


def test_a_commit_in_another_process_rings_the_waiter(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    # a safety-net poll far longer than the wait: only the doorbell can wake us in time
    store = SQLiteStore(db, watch_interval=60.0)
    try:
        token = store.change_token()  # returns once the watcher has bound its doorbell
        assert len(list((tmp_path / "t.db.bells").iterdir())) == 1
        _submit_from_another_process(f"sqlite:///{db}")
        t0 = time.monotonic()
        assert store.wait_change(token, 20.0) != token
        assert time.monotonic() - t0 < 10.0
    finally:
        store.close()
    assert not list((tmp_path / "t.db.bells").iterdir())  # close() removed its marker


def test_a_writer_that_does_not_ring_is_caught_by_the_slow_check(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(db, watch_interval=0.05)
    try:
        token = store.change_token()
        with sqlite3.connect(db) as conn:  # like the sqlite3 shell: no doorbell
            conn.execute("INSERT INTO counters (name, value) VALUES ('external', 1)")
        assert store.wait_change(token, 10.0) != token
    finally:
        store.close()


def test_an_empty_commit_wakes_nobody(tmp_path: Path) -> None:
    """A claim that finds nothing must not wake the claim loop, or it would spin."""
    app = make_app(f"sqlite:///{tmp_path / 't.db'}")
    try:
        store = app.store
        token = store.change_token()
        assert store.claim(["t.echo"], 4, "me", 30.0) == []
        assert store.wait_change(token, 0.3) == token
        app.submit("t.echo", {"value": 1})
        assert store.wait_change(token, 0.3) != token
    finally:
        app.close()


def test_a_dead_processs_doorbell_is_forgotten(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    bells = tmp_path / "t.db.bells"
    bells.mkdir()
    (bells / "999999-deadbeefdeadbeef").touch()  # a marker nobody listens behind
    app = make_app(f"sqlite:///{db}")
    try:
        app.submit("t.echo", {"value": 1})
    finally:
        app.close()
    assert not (bells / "999999-deadbeefdeadbeef").exists()
