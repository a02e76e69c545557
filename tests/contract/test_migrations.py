"""A store written by the previous schema opens under the current one with nothing
lost: tasks in every state, idempotency keys, events, outbox rows and their event ids.
Then the migrated store keeps its promises (one task per key, claims, one outbox row)."""

from __future__ import annotations

import sqlite3

import pytest

from tasklab.core.models import NewTask, Outcome
from tasklab.core.states import State
from tasklab.errors import IdempotencyConflict, StoreError
from tasklab.store import open_store, postgres, sqlite

NAMES = ["t.echo"]
# the last schema each store had before its tables were slimmed
# the last schema each store had before its tables were slimmed, and the schema just
# before the current one (each release's upgrade is the one users run)
PREVIOUS = {
    "sqlite": [sqlite.MIGRATIONS[:1], sqlite.MIGRATIONS[:-1]],
    "postgres": [postgres.MIGRATIONS[:2], postgres.MIGRATIONS[:-1]],
}


def new(value, key=None):
    return NewTask("t.echo", {"value": value}, 1, False, key)


@pytest.mark.parametrize("which", [0, 1], ids=["before-slimming", "just-before-current"])
def test_previous_schema_migrates_without_loss(store_url, monkeypatch, which):
    kind = "sqlite" if store_url.startswith("sqlite") else "postgres"
    module = sqlite if kind == "sqlite" else postgres
    current = list(module.MIGRATIONS)
    monkeypatch.setattr(module, "MIGRATIONS", PREVIOUS[kind][which])
    old = open_store(store_url)
    try:
        ((keyed, _),) = old.submit([new(1, key="k-1")])
        old.submit([new(2), new(3)])
        # tasks made in the same millisecond claim in any order: name them by claim
        running, done = old.claim(NAMES, 2, "w1", 30.0)
        assert old.finish(done, Outcome.returned({"ok": 2}), [("progress", {"p": 1})])
        event_id = old.outbox_for(done.task_id)["event_id"]
        # a failed delivery as the old schema held it: the current query names its
        # task, a column the oldest schema did not have — there, the row without it
        try:
            old.record_delivery(event_id, "http://x.example/hook", False, 0.0, "HTTP 500")
        except StoreError:
            now = "julianday('now')" if kind == "sqlite" else "clock_timestamp()"
            with old._write() as conn:
                conn.execute(
                    "INSERT INTO deliveries (event_id, url, attempts, next_attempt_at,"
                    f" last_error) VALUES ('{event_id}', 'http://x.example/hook', 1, {now},"
                    " 'HTTP 500')"
                )
        (queued,) = old.page(State.QUEUED, 10, None).items
    finally:
        old.close()

    monkeypatch.setattr(module, "MIGRATIONS", current)
    new_store = open_store(store_url)
    try:
        assert new_store.get(running.task_id).state is State.RUNNING
        finished = new_store.get(done.task_id)
        assert finished.state is State.SUCCEEDED and finished.result == {"ok": 2}
        assert [(e.seq, e.type) for e in new_store.events(done.task_id)] == [(1, "progress")]
        assert new_store.outbox_for(done.task_id)["event_id"] == event_id
        # a delivery row of before learns its task; subscribing queues no second one
        new_store.subscribe(["http://x.example/hook"])
        (due,) = new_store.outbox_pending("http://x.example/hook", 10)
        assert (due["event_id"], due["task_id"], due["attempts"]) == (event_id, done.task_id, 1)
        assert new_store.counts()["queued"] == 1 and new_store.counts()["succeeded"] == 1
        # the key still names its task, and a different payload under it still conflicts
        ((again, created),) = new_store.submit([new(1, key="k-1")])
        assert again.id == keyed.id and not created
        with pytest.raises(IdempotencyConflict):
            new_store.submit([new(99, key="k-1")])
        # the running claim keeps its authority across the migration
        assert new_store.finish(running, Outcome.returned("late"), []) is State.SUCCEEDED
        (next_claim,) = new_store.claim(NAMES, 5, "w2", 30.0)
        assert next_claim.task_id == queued.id
        assert new_store.finish(next_claim, Outcome.returned(3), []) is State.SUCCEEDED
        ids = {running.task_id, queued.id}
        assert {new_store.outbox_for(t)["task_id"] for t in ids} == ids
    finally:
        new_store.close()
    if kind == "sqlite":
        path = store_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            (ddl,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'tasks'").fetchone()
        assert "WITHOUT ROWID" in ddl


def test_a_fresh_store_reaches_the_latest_schema_once(store_url):
    first = open_store(store_url)
    first.close()
    second = open_store(store_url)  # a second open runs no migration again
    try:
        ((snap, created),) = second.submit([new(1, key="once")])
        assert created and second.get(snap.id).state is State.QUEUED
    finally:
        second.close()
