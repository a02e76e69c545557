"""Retention: `app.prune` deletes old terminal tasks with everything they wrote, and
nothing else; checked from a new connection, on both stores."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tasklab import State
from tasklab.errors import InvalidPayload, TaskNotFound
from tasklab.store import open_store

URL = "http://127.0.0.1:9/hook"


def _finished(app, task: str, payload: dict) -> str:  # type: ignore[no-untyped-def]
    tid = app.submit(task, payload)
    app.run(tid)
    assert app.query(tid).terminal
    return tid


def _tick() -> None:
    """Let the database clock (ms on SQLite) pass what just finished: `older_than=0`
    prunes what finished strictly before now."""
    time.sleep(0.01)


def _between(app, older: str, newer: str) -> datetime:  # type: ignore[no-untyped-def]
    """A cutoff strictly between two tasks' finish times."""
    a, b = app.query(older).finished_at, app.query(newer).finished_at
    assert b - a >= timedelta(milliseconds=20)
    return a + (b - a) / 2


def test_prune_deletes_old_terminal_tasks_with_everything_they_wrote(app, store_url):
    succeeded = _finished(app, "t.effect", {})  # an attempt event, an effect record
    failed = _finished(app, "t.boom", {"message": "no"})
    cancelled = app.submit("t.echo", {"value": 1})
    app.cancel(cancelled)
    time.sleep(0.05)
    recent = _finished(app, "t.effect", {})
    queued = app.submit("t.echo", {"value": 2})
    (running,) = app.store.claim(["t.echo"], 1, "w-test", 30.0)
    assert running.task_id == queued
    waiting = app.submit("t.echo", {"value": 3})
    old = [succeeded, failed, cancelled]
    assert app.events(succeeded) and app.store.outbox_for(succeeded) is not None

    gone = app.prune(before=_between(app, cancelled, recent))

    assert gone["tasks"] == 3 and gone["outbox"] == 3 and gone["effects"] == 1
    assert gone["events"] == 2 and gone["deliveries"] == 0  # an attempt event each ran
    reader = open_store(store_url)  # what was committed
    try:
        for tid in old:
            with pytest.raises(TaskNotFound):
                reader.get(tid)
            assert reader.events(tid) == []
            assert reader.outbox_for(tid) is None
        assert reader.effect_get(succeeded, "charge").status == "none"
        assert reader.get(recent).state is State.SUCCEEDED
        assert reader.events(recent) and reader.outbox_for(recent) is not None
        assert reader.effect_get(recent, "charge").status == "done"
        assert reader.get(queued).state is State.RUNNING
        assert reader.get(waiting).state is State.QUEUED
        assert reader.counts() == {
            "queued": 1,
            "running": 1,
            "cancel_requested": 0,
            "waiting": 0,
            "succeeded": 1,
            "failed": 0,
            "cancelled": 0,
        }
    finally:
        reader.close()


def test_nothing_younger_than_the_age_is_pruned(app):
    tid = _finished(app, "t.echo", {"value": 1})
    assert app.prune(timedelta(hours=1))["tasks"] == 0
    assert app.query(tid).state is State.SUCCEEDED
    _tick()
    assert app.prune(timedelta(0))["tasks"] == 1  # finished before the clock's now


def test_a_notification_still_due_keeps_its_task_until_it_is_delivered(app):
    app.store.subscribe([URL])
    tid = _finished(app, "t.echo", {"value": 1})
    later = datetime.now(UTC) + timedelta(hours=1)
    assert app.prune(before=later)["tasks"] == 0
    assert app.query(tid).state is State.SUCCEEDED
    event_id = app.store.outbox_for(tid)["event_id"]
    app.store.record_delivery(event_id, URL, ok=False, delay=0.0, error="refused")
    assert app.prune(before=later)["tasks"] == 0  # attempted is not delivered
    app.store.record_delivery(event_id, URL, ok=True, delay=0.0, error=None)
    gone = app.prune(before=later)
    assert gone["tasks"] == 1 and gone["outbox"] == 1 and gone["deliveries"] == 1
    assert app.store.webhooks() == {URL: 0}


def test_a_pruned_tasks_idempotency_key_is_free_again(app):
    first = app.submit("t.echo", {"value": 1}, idempotency_key="order-7")
    app.run(first)
    assert app.submit("t.echo", {"value": 1}, idempotency_key="order-7") == first
    _tick()
    assert app.prune(timedelta(0))["tasks"] == 1
    second = app.submit("t.echo", {"value": 1}, idempotency_key="order-7")
    assert second != first and app.query(second).state is State.QUEUED


def test_prune_goes_in_batches_until_nothing_is_left(app):
    ids = [app.submit("t.echo", {"value": i}) for i in range(7)]
    for tid in ids:
        app.cancel(tid)
    seen: list[int] = []
    _tick()
    gone = app.prune(timedelta(0), batch=3, progress=lambda t: seen.append(t["tasks"]))
    assert gone["tasks"] == 7 and seen == [3, 6, 7]
    assert app.store.counters()["tasks_pruned"] == 7  # counted in the deleting transactions
    assert app.counts()["cancelled"] == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"older_than": timedelta(seconds=-1)},
        {"older_than": timedelta(0), "before": datetime.now(UTC)},
        {"before": datetime(2030, 1, 1)},  # no time zone: ambiguous
        {"older_than": timedelta(0), "batch": 0},
        {"older_than": timedelta(0), "batch": True},
    ],
)
def test_bad_prune_arguments_are_refused_and_change_nothing(app, kwargs):
    tid = _finished(app, "t.echo", {"value": 1})
    with pytest.raises(InvalidPayload):
        app.prune(**kwargs)
    assert app.query(tid).state is State.SUCCEEDED


def test_an_age_beyond_the_calendar_prunes_nothing(app):
    tid = _finished(app, "t.echo", {"value": 1})
    assert app.prune(timedelta(days=999_999_999))["tasks"] == 0
    assert app.query(tid).state is State.SUCCEEDED


def test_sqlite_finds_what_to_prune_by_index(tmp_path):
    """Not a scan of every task: the terminal states' index, then key lookups."""
    import sqlite3

    from tasklab.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "plan.db")
    try:
        with sqlite3.connect(tmp_path / "plan.db") as conn:
            plan = [
                row[-1]
                for row in conn.execute(
                    "EXPLAIN QUERY PLAN " + store.q["prunable"], {"before": 0.0, "limit": 5}
                )
            ]
    finally:
        store.close()
    assert plan[0] == "SEARCH t USING INDEX tasks_by_state (state=?)"
    assert not any(step.startswith("SCAN") for step in plan)


def _retention_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "tasklab-retention"]


def test_a_worker_with_retention_prunes_what_it_finished_and_nothing_live(store_url):
    from tests.conftest import make_app, wait_for

    app = make_app(store_url, lease=5.0, prune_every=0.05)
    try:
        with app.worker(concurrency=2, retain=timedelta(0)) as w:
            done = [app.submit("t.echo", {"value": i}) for i in range(5)]
            slow = app.submit("t.slow_steps", {"steps": 100})

            def gone(tid: str) -> bool:
                try:
                    app.query(tid)
                except TaskNotFound:
                    return True
                return False

            wait_for(lambda: all(gone(t) for t in done))
            assert app.query(slow).state is State.RUNNING  # live work is never pruned
            app.cancel(slow)
            wait_for(lambda: gone(slow))
        assert w.retention is not None and w.retention.pruned == 6
        assert _retention_threads() == []
    finally:
        app.close()


def test_serve_prunes_with_no_embedded_worker(store_url):
    from tests.conftest import make_app, wait_for
    from tests.helpers.servers import ServiceThread

    app = make_app(store_url, prune_every=0.05)
    try:
        tid = app.submit("t.echo", {"value": 1})
        app.cancel(tid)
        with ServiceThread(app, embed_worker=False, retain=timedelta(0)):
            wait_for(lambda: app.counts()["cancelled"] == 0)
        assert _retention_threads() == []
    finally:
        app.close()


def test_stopping_retention_does_not_wait_for_its_next_round(app):
    from tasklab.service.retention import Retention

    retention = Retention(app, timedelta(days=1)).start()  # next round in a minute
    started = time.monotonic()
    retention.stop()
    assert time.monotonic() - started < 5 and _retention_threads() == []
    with pytest.raises(ValueError):
        Retention(app, timedelta(seconds=-1))


def test_concurrent_prunes_delete_each_task_once(store_url):
    """Several processes may prune one store at once (each with `--retain`)."""
    import threading

    from tests.conftest import make_app

    apps = [make_app(store_url) for _ in range(3)]
    try:
        ids = apps[0].submit_many("t.echo", [{"value": i} for i in range(600)])
        for tid in ids:
            apps[0].cancel(tid)
        _tick()
        results: list[dict[str, int]] = []
        errors: list[BaseException] = []

        def prune(app) -> None:  # type: ignore[no-untyped-def]
            try:
                results.append(app.prune(timedelta(0), batch=50))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=prune, args=(a,)) for a in apps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sum(r["tasks"] for r in results) == 600
        assert sum(r["outbox"] for r in results) == 600
        assert apps[0].counts()["cancelled"] == 0
    finally:
        for a in apps:
            a.close()
