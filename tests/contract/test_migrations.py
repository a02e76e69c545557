"""A store written by the previous schema opens under the current one with nothing
lost: tasks in every state, idempotency keys, events, outbox rows and their event ids.
Then the migrated store keeps its promises (one task per key, claims, one outbox row)."""

from __future__ import annotations

import sqlite3

import pytest

from tasklab.core.models import Claim, NewTask, Outcome
from tasklab.core.states import State
from tasklab.errors import IdempotencyConflict
from tasklab.store import open_store, postgres, sqlite
from tests.contract.test_store import exact_counts

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


def _old_rows(old, kind, with_task_column):
    """Tasks as an old schema held them, written in SQL of the columns every schema
    since the first has (the current queries name columns the old ones lack): a keyed
    queued task, a running one with its lease, a succeeded one with an event and its
    outbox row, a queued one, and one delayed for an hour."""
    if kind == "sqlite":
        now, later = "julianday('now')", "julianday('now') + 30 / 86400.0"
        hour, false = "julianday('now') + 1 / 24.0", 0
    else:
        now, later = "clock_timestamp()", "clock_timestamp() + interval '30 seconds'"
        hour, false = "clock_timestamp() + interval '1 hour'", "false"
    rows = [
        ("k1", "queued", 0, 0, "'k-1'", "NULL", "NULL", now, 1),
        ("r1", "running", 1, 1, "NULL", "'w1'", later, now, 2),
        ("d1", "succeeded", 1, 1, "NULL", "NULL", "NULL", now, 3),
        ("q1", "queued", 0, 0, "NULL", "NULL", "NULL", now, 4),
        ("h1", "queued", 0, 0, "NULL", "NULL", "NULL", hour, 5),
    ]
    with old._write() as conn:
        for tid, state, attempt, epoch, key, owner, until, run_after, value in rows:
            result = "'{\"ok\": 2}'" if state == "succeeded" else "NULL"
            conn.execute(
                "INSERT INTO tasks (id, task, payload, state, attempt, max_attempts,"
                " retry_safe, epoch, event_seq, idempotency_key, result, lease_owner,"
                " lease_until, run_after, created_at, started_at, finished_at) VALUES"
                f" ('{tid}', 't.echo', '{{\"value\": {value}}}', '{state}', {attempt}, 1,"
                f" {false}, {epoch},"
                f" {1 if state == 'succeeded' else 0}, {key}, {result}, {owner}, {until},"
                f" {run_after}, {now}, {now if attempt else 'NULL'},"
                f" {now if state == 'succeeded' else 'NULL'})"
            )
        if with_task_column:  # a schema with delays flags a delayed task as it is made
            true = 1 if kind == "sqlite" else "true"
            conn.execute(f"UPDATE tasks SET delayed = {true} WHERE id = 'h1'")
        conn.execute(
            "INSERT INTO events (task_id, seq, attempt, type, data, at) VALUES"
            f" ('d1', 1, 1, 'progress', '{{\"p\": 1}}', {now})"
        )
        conn.execute(
            f"INSERT INTO outbox (event_id, task_id, created_at) VALUES ('ev-d1', 'd1', {now})"
        )
        # a failed delivery; the oldest schema's rows had no task column
        column, value = (", task_id", ", 'd1'") if with_task_column else ("", "")
        conn.execute(
            f"INSERT INTO deliveries (event_id, url, attempts, next_attempt_at, last_error{column})"
            f" VALUES ('ev-d1', 'http://x.example/hook', 1, {now}, 'HTTP 500'{value})"
        )


@pytest.mark.parametrize("which", [0, 1], ids=["before-slimming", "just-before-current"])
def test_previous_schema_migrates_without_loss(store_url, monkeypatch, which):
    kind = "sqlite" if store_url.startswith("sqlite") else "postgres"
    module = sqlite if kind == "sqlite" else postgres
    current = list(module.MIGRATIONS)
    monkeypatch.setattr(module, "MIGRATIONS", PREVIOUS[kind][which])
    old = open_store(store_url)
    try:
        _old_rows(old, kind, with_task_column=which == 1)
    finally:
        old.close()
    running = Claim("r1", "t.echo", {"value": 2}, 1, 1, 1, "w1")
    event_id = "ev-d1"

    monkeypatch.setattr(module, "MIGRATIONS", current)
    new_store = open_store(store_url)
    try:
        done = new_store.get("d1")
        assert new_store.get(running.task_id).state is State.RUNNING
        finished = new_store.get(done.id)
        assert finished.state is State.SUCCEEDED and finished.result == {"ok": 2}
        assert [(e.seq, e.type) for e in new_store.events(done.id)] == [(1, "progress")]
        assert new_store.outbox_for(done.id)["event_id"] == event_id
        # a delivery row of before learns its task; subscribing queues no second one
        new_store.subscribe(["http://x.example/hook"])
        (due,) = new_store.outbox_pending("http://x.example/hook", 10)
        assert (due["event_id"], due["task_id"], due["attempts"]) == (event_id, done.id, 1)
        assert new_store.counts()["queued"] == 3 and new_store.counts()["succeeded"] == 1
        assert new_store.counts() == exact_counts(new_store)
        # every old task is in the default queue at priority 0
        assert {(q["name"], q["queued"]) for q in new_store.queue_stats()} == {("default", 3)}
        # the key still names its task, and a different payload under it still conflicts
        ((again, created),) = new_store.submit([new(1, key="k-1")])
        assert again.id == "k1" and not created
        with pytest.raises(IdempotencyConflict):
            new_store.submit([new(99, key="k-1")])
        # the running claim keeps its authority across the migration
        assert new_store.finish(running, Outcome.returned("late"), []) is State.SUCCEEDED
        # the queued ones claim (the delayed one is not yet due), in submit order
        claims = new_store.claim(NAMES, 5, "w2", 30.0)
        assert sorted(c.task_id for c in claims) == ["k1", "q1"]
        for claim in claims:
            assert new_store.finish(claim, Outcome.returned(3), []) is State.SUCCEEDED
        assert new_store.get("h1").state is State.QUEUED
        ids = {running.task_id, "q1"}
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
