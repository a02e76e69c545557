"""Retries, bulk cancel and retry by filter, search (SPEC §9), on both stores: terminal
states stay final, a dry run changes nothing, batches are bounded and report progress,
two bulk retries at once retry each task once, and every search filter answers
exactly the matching tasks across pages. Checks read from a new connection."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tasklab import State, ThreadTaskRunner
from tasklab.core.filters import TaskFilter
from tasklab.errors import IdempotencyConflict, InvalidPayload, TaskLive, TaskNotFound
from tests.conftest import make_app
from tests.helpers.sample_tasks import latch, started


@pytest.fixture
def fresh(store_url):  # type: ignore[no-untyped-def]
    """Another app on the same store: what a second process would read."""
    other = make_app(store_url)
    yield other
    other.close()


def test_retry_makes_a_new_task_and_the_ended_one_stays_final(app, fresh):
    failed = app.submit("t.boom", {"message": "kaput"}, max_attempts=1, queue="mail", priority=5)
    assert app.run(failed).state is State.FAILED
    new = app.retry(failed)
    assert new != failed
    old, made = fresh.query(failed), fresh.query(new)
    assert old.state is State.FAILED and "kaput" in old.error.message and old.retry_of is None
    assert (made.state, made.task, made.payload) == (State.QUEUED, "t.boom", {"message": "kaput"})
    assert (made.retry_of, made.queue, made.priority, made.attempt) == (failed, "mail", 5, 0)
    assert made.max_attempts == 1
    ok = app.submit("t.echo", {"value": 3})
    app.run(ok)
    assert fresh.query(app.retry(ok)).payload == {"value": 3}  # any ended state


def test_retry_refuses_a_live_task_and_an_unknown_one(app, fresh):
    queued = app.submit("t.echo", {"value": 1})
    with pytest.raises(TaskLive):
        app.retry(queued)
    with pytest.raises(TaskNotFound):
        app.retry("0" * 24)
    assert sum(fresh.counts().values()) == 1


def test_retry_with_a_key_answers_the_first_retry(app, fresh):
    tid = app.submit("t.boom", {})
    app.run(tid)
    first = app.retry(tid, idempotency_key="op-1")
    assert app.retry(tid, idempotency_key="op-1") == first
    other = app.submit("t.boom", {})
    app.run(other)
    with pytest.raises(IdempotencyConflict):
        app.retry(other, idempotency_key="op-1")  # the key names another retry
    assert fresh.counts()["queued"] == 1


def test_a_retry_waits_its_turn_behind_a_live_unique_key(app):
    tid = app.submit("t.echo", {"value": 1}, unique_key="report")
    app.run(tid)
    app.submit("t.echo", {"value": 2}, unique_key="report")  # live, holds the key
    with pytest.raises(IdempotencyConflict, match="unique_key"):
        app.retry(tid)


def _seed(app) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Tasks in every kind of state: queued (two queues), failed, succeeded, cancelled."""
    ids: dict[str, list[str]] = {"queued": [], "failed": [], "succeeded": [], "cancelled": []}
    ids["failed"] = [app.submit("t.boom", {"message": f"m{i}"}) for i in range(5)]
    ids["succeeded"] = [app.submit("t.echo", {"value": i}) for i in range(3)]
    assert app.run_pending() == 8
    ids["cancelled"] = [app.submit("t.echo", {"value": 9}) for _ in range(2)]
    for tid in ids["cancelled"]:
        app.cancel(tid)
    ids["queued"] = [app.submit("t.echo", {"value": i}, queue="a") for i in range(4)]
    ids["queued"] += [app.submit("t.noop", {}, queue="b") for _ in range(3)]
    return ids


def test_cancel_where_dry_run_counts_and_changes_nothing(app, fresh):
    ids = _seed(app)
    before = fresh.counts()
    assert app.cancel_where(state="queued", dry_run=True) == {"matched": 7}
    assert app.cancel_where(queue="a", dry_run=True) == {"matched": 4}
    assert app.cancel_where(task="t.noop", dry_run=True) == {"matched": 3}
    assert fresh.counts() == before
    assert all(fresh.query(t).state is State.QUEUED for t in ids["queued"])


def test_cancel_where_takes_only_the_matching_live_tasks_in_batches(app, fresh):
    ids = _seed(app)
    seen: list[dict[str, int]] = []
    out = app.cancel_where(task="t.echo", batch=2, progress=seen.append)
    assert out == {"matched": 4, "cancelled": 4, "cancel_requested": 0, "unchanged": 0}
    assert [p["matched"] for p in seen] == [2, 4]  # a transaction per batch, totals so far
    for tid in ids["queued"][:4]:
        snap = fresh.query(tid)
        assert snap.state is State.CANCELLED and snap.cancel_reason.value == "user"
    for tid in ids["queued"][4:]:  # another task name: untouched
        assert fresh.query(tid).state is State.QUEUED
    for kind in ("failed", "succeeded"):  # ended tasks stay as they ended
        assert {fresh.query(t).state.value for t in ids[kind]} == {kind}


def test_cancel_where_asks_a_running_task_to_stop(app, fresh):
    name = uuid.uuid4().hex
    tid = app.submit("t.hold", {"name": name})
    with ThreadTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        assert started(name).wait(5)
        out = app.cancel_where(task="t.hold")
        assert out["cancel_requested"] == 1 and out["matched"] == 1
        assert fresh.query(tid).state is State.CANCEL_REQUESTED
        latch(name).set()
        assert fut.result(timeout=10).state is State.CANCELLED


def test_bulk_filters_are_checked_and_bad_ones_change_nothing(app, fresh):
    _seed(app)
    before = fresh.counts()
    bad: list[dict[str, object]] = [
        {},  # an empty filter would take everything
        {"state": "succeeded"},  # cancel takes live tasks only
        {"state": "bogus"},
        {"queue": "no spaces allowed"},
        {"id_prefix": "xyz"},
        {"created_after": "yesterday"},
        {"created_after": "2030-01-01T00:00:00"},  # naive
        {"colour": "red"},
    ]
    for criteria in bad:
        with pytest.raises(InvalidPayload):
            app.cancel_where(**criteria)
    with pytest.raises(InvalidPayload):
        app.retry_where(state="queued")  # retry takes ended tasks only
    with pytest.raises(InvalidPayload):
        app.cancel_where(task="t.echo", batch=0)
    assert fresh.counts() == before


def test_retry_where_retries_each_failed_task_once(app, fresh):
    ids = _seed(app)
    assert app.retry_where(task="t.boom", dry_run=True) == {"matched": 5}
    out = app.retry_where(task="t.boom", batch=2)
    assert out == {"matched": 5, "retried": 5, "skipped": 0}
    retries = fresh.search(task="t.boom", state="queued", limit=100).items
    assert sorted(r.retry_of for r in retries) == sorted(ids["failed"])  # type: ignore[type-var]
    assert app.retry_where(task="t.boom") == {"matched": 0, "retried": 0, "skipped": 0}
    assert app.retry_where(task="t.boom", dry_run=True) == {"matched": 0}
    # no state named: failed and cancelled tasks, not succeeded ones
    assert app.retry_where(task="t.echo") == {"matched": 2, "retried": 2, "skipped": 0}
    assert {fresh.query(t).state for t in ids["succeeded"]} == {State.SUCCEEDED}


def test_two_bulk_retries_at_once_make_one_retry_of_each(app, store_url, fresh):
    failed = [app.submit("t.boom", {"message": str(i)}) for i in range(40)]
    app.run_pending()
    others = [make_app(store_url) for _ in range(2)]
    results: list[dict[str, int]] = []
    go = threading.Barrier(2)

    def bulk(a) -> None:  # type: ignore[no-untyped-def]
        go.wait()
        results.append(a.retry_where(task="t.boom", batch=5))

    threads = [threading.Thread(target=bulk, args=(a,)) for a in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for a in others:
        a.close()
    assert sum(r["retried"] for r in results) == 40
    made = fresh.search(task="t.boom", state="queued", limit=1000).items
    assert sorted(m.retry_of for m in made) == sorted(failed)  # type: ignore[type-var]


def test_search_answers_exactly_the_matching_tasks_across_pages(app, fresh):
    ids = _seed(app)
    parent = app.submit("t.echo", {"value": "parent"})
    child_ids = [
        app.submit_prepared([_child(app, parent, i)])[0][0].id  # type: ignore[index]
        for i in range(3)
    ]
    keyed = app.submit("t.echo", {"value": 1}, "the-key")
    everything = {s.id: s for s in _all(fresh, TaskFilter())}
    assert len(everything) == sum(fresh.counts().values())

    def check(**criteria: object) -> None:
        f = TaskFilter.of(**criteria)
        expected = [
            s.id
            for s in sorted(everything.values(), key=lambda s: s.id, reverse=True)
            if _matches(s, f)
        ]
        got = [s.id for s in _all(fresh, f, limit=2)]
        assert got == expected, criteria
        assert expected, f"{criteria} should match something"

    check(state="queued")
    check(state="failed")
    check(state="cancelled")
    check(task="t.boom")
    check(queue="b")
    check(queue="a", state="queued")
    check(parent_id=parent)
    check(idempotency_key="the-key")
    check(id_prefix=ids["failed"][0][:14])
    check(id_prefix=keyed)
    middle = fresh.query(ids["succeeded"][0]).created_at
    check(created_after=middle)
    check(created_before=middle + timedelta(milliseconds=1), task="t.boom")
    assert {s.id for s in _all(fresh, TaskFilter.of(parent_id=parent))} == set(child_ids)


def _child(app, parent: str, i: int):  # type: ignore[no-untyped-def]
    import dataclasses

    item = app.prepare("t.echo", {"value": i}, None, None)
    return dataclasses.replace(item, parent_id=parent)


def _all(app, f: TaskFilter, limit: int = 1000) -> list:  # type: ignore[no-untyped-def]
    out, cursor = [], None
    while True:
        page = app.search(f, limit=limit, cursor=cursor)
        out += page.items
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def _matches(s, f: TaskFilter) -> bool:  # type: ignore[no-untyped-def]
    low, high = f.id_range()
    return (
        (f.state is None or s.state is f.state)
        and (f.task is None or s.task == f.task)
        and (f.queue is None or s.queue == f.queue)
        and (f.parent_id is None or s.parent_id == f.parent_id)
        and (f.idempotency_key is None or s.idempotency_key == f.idempotency_key)
        and (low is None or s.id >= low)
        and (high is None or s.id < high)
    )


def test_the_created_range_is_read_off_the_ids(app):
    before = datetime.now(UTC)
    time.sleep(0.01)
    tid = app.submit("t.echo", {})
    time.sleep(0.01)
    after = datetime.now(UTC)
    assert [s.id for s in app.search(created_after=before, created_before=after).items] == [tid]
    assert app.search(created_after=after).items == []
    assert app.search(created_before=before).items == []
