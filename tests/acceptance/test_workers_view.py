"""Workers you can see (SPEC §9), with real worker processes on both stores: each
row says what the worker is and what it runs now; a stopped worker is marked stopped,
a SIGKILLed one dead once its heartbeat is a lease old, and ended rows are pruned."""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path

import httpx

from tests.acceptance.test_limits import spawn, stop
from tests.acceptance.test_sigkill import cli
from tests.conftest import make_app, wait_for
from tests.helpers.servers import ServiceThread


def _row(app, pid: int) -> dict:  # type: ignore[no-untyped-def]
    return next(w for w in app.workers() if w["pid"] == pid)


def test_rows_show_what_runs_and_how_workers_ended(store_url, tmp_path: Path):
    app = make_app(store_url)
    ready = tmp_path / "go"
    ready.mkdir()
    tid = app.submit("t.file_hold", {"dir": str(ready)}, queue="mail")
    steady = spawn(store_url, "--queue", "mail", concurrency=3, lease=1.0)
    victim = spawn(store_url, "--queue", "other", concurrency=2, lease=1.0)
    try:
        row = wait_for(
            lambda: (
                [t["id"] for t in _row(app, steady.pid)["running"]] == [tid]
                and _row(app, steady.pid)
            )
        )
        assert (row["state"], row["runner"], row["slots"], row["queues"]) == (
            "live",
            "thread",
            3,
            ["mail"],
        )
        assert row["heartbeat_at"] >= row["started_at"]
        beat = row["heartbeat_at"]
        wait_for(lambda: _row(app, steady.pid)["heartbeat_at"] > beat, 5)  # it beats
        assert _row(app, victim.pid)["running"] == []
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(10) == -9
        victim.stderr.close()  # type: ignore[union-attr]
        # its heartbeat grows a lease old (1 s): the live worker marks it dead
        dead = wait_for(
            lambda: _row(app, victim.pid)["state"] == "dead" and _row(app, victim.pid), 10
        )
        assert dead["ended_at"] is not None and _row(app, steady.pid)["state"] == "live"
        (ready / "release").write_text("")
        wait_for(lambda: app.query(tid).terminal, 10)
        wait_for(lambda: _row(app, steady.pid)["running"] == [], 5)
    finally:
        assert stop([steady]) == [0]
    assert _row(app, steady.pid)["state"] == "stopped"
    app.close()


def test_ended_rows_are_pruned_after_a_while(store_url):
    app = make_app(store_url)
    try:
        store = app.store
        store.register_worker("gone")
        store.unregister_worker("gone")
        store.register_worker("alive")
        store.worker_heartbeat("alive", dead_after=60.0, keep=3600.0)
        assert {w["id"] for w in app.workers()} == {"gone", "alive"}
        # past the millisecond "gone" ended in (SQLite's clock has millisecond steps,
        # and a row that ended this very millisecond has not ended before now)
        time.sleep(0.01)
        store.worker_heartbeat("alive", dead_after=60.0, keep=0.0)  # kept no time at all
        assert [(w["id"], w["state"]) for w in app.workers()] == [("alive", "live")]
        # exclusive recovery runs only with no executor alive: every live row is stale
        app.recover_running()
        assert [(w["id"], w["state"]) for w in app.workers()] == [("alive", "dead")]
    finally:
        app.close()


def test_workers_over_http_and_the_cli(store_url):
    app = make_app(store_url)
    name = f"w-{uuid.uuid4().hex[:6]}"
    app.store.register_worker(name)
    with ServiceThread(app, embed_worker=False) as server:
        items = httpx.get(f"{server.url}/workers", timeout=10).json()["items"]
    assert [w["id"] for w in items] == [name] and items[0]["state"] == "live"
    rows = json.loads(cli("workers", "--db", store_url, "--json").stdout)
    assert [w["id"] for w in rows] == [name]
    assert name in cli("workers", "--db", store_url).stdout
    app.close()
