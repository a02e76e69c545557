"""Time, queues and limits through the Python API, on both stores (SPEC §7): delays
by the database clock, priorities then submit order over a 100,000-task backlog (with
the claim's plan: an index walk, no sort), unique-while-live keys, pause, queue
settings, and bad input that stores nothing."""

from __future__ import annotations

import re
import sqlite3
import time
from datetime import UTC, datetime, timedelta

import pytest

from tasklab import State
from tasklab.errors import InvalidPayload
from tests.conftest import make_app, wait_for

NAMES = ["t.echo"]


def claim(app, limit=1, **kw):  # type: ignore[no-untyped-def]
    return app.store.claim(NAMES, limit, "w", 30.0, **kw)


def test_a_delayed_task_is_not_claimed_before_its_time(app):
    later = app.submit("t.echo", {"value": 1}, delay=0.6)
    at = app.submit("t.echo", {"value": 2}, run_at=datetime.now(UTC) + timedelta(seconds=0.6))
    past = app.submit("t.echo", {"value": 3}, run_at=datetime.now(UTC) - timedelta(hours=1))
    snap = app.query(later)
    assert snap.state is State.QUEUED and snap.run_after > snap.created_at + timedelta(seconds=0.5)
    assert snap.to_json()["run_after"] is not None
    assert [c.task_id for c in claim(app, 10)] == [past]  # due at once (an hour ago)
    assert claim(app, 10) == []
    time.sleep(0.7)
    assert {c.task_id for c in claim(app, 10)} == {later, at}


def test_the_worker_sleeps_until_the_earliest_delayed_task(app):
    """An idle worker with a delayed task sleeps until that task is due, not until its
    claim loop's 1 s safety timer. Three tasks of 0.3 s, one after another, each lag
    (created → started) read off the store's clock: never early, and at least two of
    three well before the timer (which alone would start each at ~1 s)."""
    tid = app.submit("t.echo", {"value": 1}, delay=0.4)
    wait = app.store.seconds_until_runnable(NAMES)
    assert wait is not None and 0.2 < wait <= 0.4
    lags = []
    with app.worker(concurrency=1, scheduler=False):
        wait_for(lambda: app.query(tid).terminal, timeout=5)
        for _ in range(3):
            later = app.submit("t.echo", {"value": 2}, delay=0.3)
            snap = wait_for(lambda t=later: (s := app.query(t)).terminal and s, timeout=5)
            assert snap.state is State.SUCCEEDED
            lags.append((snap.started_at - snap.created_at).total_seconds())
    assert app.query(tid).state is State.SUCCEEDED
    assert all(lag >= 0.29 for lag in lags) and sum(lag < 0.75 for lag in lags) >= 2, lags


def test_priorities_then_submit_order_over_a_backlog_of_100000(store_url, capsys):
    app = make_app(store_url)
    n = 100_000
    # priorities -1, 0, 2 interleaved; within one, submit order (ids sort by time)
    levels = [0, 2, -1, 0, 2]
    ids: list[tuple[int, int, str]] = []
    for chunk in range(0, n, 5000):
        for level in levels:
            batch = app.submit_many(
                "t.echo", [{"value": i} for i in range(chunk, chunk + 1000)], priority=level
            )
            ids += [(-level, len(ids) + j, tid) for j, tid in enumerate(batch)]
    expected = [tid for *_, tid in sorted(ids)]
    got: list[str] = []
    times = []
    while True:
        started = time.perf_counter()
        batch = claim(app, 1000)
        times.append(time.perf_counter() - started)
        if not batch:
            break
        by_id = {c.task_id for c in batch}
        assert by_id == set(expected[len(got) : len(got) + len(batch)])
        got += [t for t in expected[len(got) : len(got) + len(batch)]]
    assert got == expected
    times.sort()
    with capsys.disabled():
        print(
            f"\n  claim of 1,000 from a {n:,} backlog ({store_url.split(':')[0]}): "
            f"median {times[len(times) // 2] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms"
        )
    app.close()


def _plan(app, sql: str, params: dict[str, object]) -> str:
    with app.store._read() as conn:
        if app.db.startswith("sqlite"):
            rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            return "\n".join(r["detail"] for r in rows)
        conn.execute("SET enable_sort = off")
        rows = conn.execute("EXPLAIN " + sql, params).fetchall()
        conn.execute("RESET enable_sort")
        return "\n".join(next(iter(r.values())) for r in rows)


def test_claims_are_index_walks_with_priorities_and_limits(store_url):
    """The claim's walk (open and limited) reads the ready index in order and stops:
    no sort of the backlog; a limited claim reads counters, not running tasks."""
    app = make_app(store_url)
    for level in (0, 5, -5):
        app.submit_many("t.echo", [{"value": i} for i in range(3000)], priority=level)
    sqlite = app.db.startswith("sqlite")
    if sqlite:
        sql = app.store.q["claim_candidates"]
        params = {"queue": "default", "names": '["t.echo"]', "limit": 10}
    else:
        with app.store._read() as conn:
            conn.execute("ANALYZE tasks")
        sql = (
            "SELECT id FROM tasks q WHERE q.queue = %(queue)s AND q.state = 'queued'"
            " AND NOT q.delayed AND NOT q.request_bound AND q.task = ANY(%(names)s)"
            " ORDER BY q.priority DESC, q.run_after, q.id LIMIT 10"
        )
        params = {"queue": "default", "names": ["t.echo"]}
    plan = _plan(app, sql, params)
    assert "tasks_ready" in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan
    if sqlite:
        limits = _plan(app, app.store.q["queue_limits"], {"names": '["default"]'})
    else:  # tasklab_claim_limited's read of a queue's running tasks
        limits = _plan(
            app,
            "SELECT COALESCE((SELECT SUM(c.n) FROM task_counts c WHERE c.queue = u.name"
            " AND c.state IN ('running', 'cancel_requested')), 0) AS running"
            " FROM unnest(%(names)s::text[]) AS u(name) LEFT JOIN queues q ON q.name = u.name",
            {"names": ["default"]},
        )
    # the counters by their key; never the tasks table (no scan of running tasks)
    assert "PRIMARY KEY" in limits or "task_counts_pkey" in limits, limits
    assert not re.search(r"\btasks\b", limits), limits
    if sqlite:  # and the open claim's UPDATE walks the same index
        claim_plan = _plan(
            app,
            app.store.q["claim_next"],
            {"names": '["t.echo"]', "queue": "default", "limit": 5, "owner": "o", "lease": 1.0},
        )
        assert "tasks_ready" in claim_plan and "TEMP B-TREE" not in claim_plan, claim_plan
    app.close()


def test_unique_while_live(app):
    first = app.submit("t.echo", {"value": 1}, unique_key="refresh:42")
    assert app.submit("t.echo", {"value": 2}, unique_key="refresh:42") == first
    (c,) = claim(app)
    assert app.submit("t.echo", {"value": 3}, unique_key="refresh:42") == first  # running
    from tasklab.core.models import Outcome

    app.store.finish(c, Outcome.returned(1), [])
    again = app.submit("t.echo", {"value": 4}, unique_key="refresh:42")
    assert again != first and app.query(again).unique_key == "refresh:42"
    assert app.counts()["queued"] == 1


def test_queues_pause_and_settings(app):
    app.submit("t.echo", {"value": 1}, queue="mail")
    app.submit("t.echo", {"value": 2})
    app.pause("mail")
    assert [c.task for c in claim(app, 10)] == ["t.echo"]  # only the default queue
    assert claim(app, 10) == []
    mail = next(q for q in app.queues() if q["name"] == "mail")
    assert mail["paused"] is True and mail["queued"] == 1
    app.resume("mail")
    (c,) = claim(app, 10)
    assert app.query(c.task_id).queue == "mail"
    app.configure_queue("mail", concurrency=3, rate="600/m")
    mail = next(q for q in app.queues() if q["name"] == "mail")
    assert (mail["concurrency"], mail["rate"], mail["running"]) == (3, "600/m", 1)
    app.configure_queue("mail", rate=None)  # the concurrency stays
    mail = next(q for q in app.queues() if q["name"] == "mail")
    assert (mail["concurrency"], mail["rate"]) == (3, None)


def test_a_worker_serves_only_its_queues(app):
    mail = app.submit("t.echo", {"value": 1}, queue="mail")
    other = app.submit("t.echo", {"value": 2}, queue="other")
    with app.worker(concurrency=2, queues=["mail"], scheduler=False):
        deadline = time.monotonic() + 5
        while not app.query(mail).terminal and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
    assert app.query(mail).state is State.SUCCEEDED
    assert app.query(other).state is State.QUEUED


@pytest.mark.parametrize(
    "options",
    [
        {"priority": 101},
        {"queue": "no spaces"},
        {"delay": -1},
        {"run_at": datetime(2030, 1, 1)},
        {"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 1},
        {"concurrency_key": "k"},  # t.echo has no concurrency_limit
    ],
)
def test_bad_submit_options_store_nothing(app, options):
    with pytest.raises(InvalidPayload):
        app.submit("t.echo", {"value": 1}, **options)
    assert app.counts()["queued"] == 0


@pytest.mark.parametrize(
    "settings",
    [{"concurrency": 0}, {"concurrency": "5"}, {"rate": "fast"}, {"rate": "0/s"}],
)
def test_bad_queue_settings_change_nothing(app, settings):
    with pytest.raises(InvalidPayload):
        app.configure_queue("mail", **settings)
    with pytest.raises(InvalidPayload):
        app.pause("bad name")
    assert app.queues() == []


def test_the_counters_agree_with_the_table_through_delays_and_queues(store_url):
    app = make_app(store_url)
    app.submit_many("t.echo", [{"value": i} for i in range(5)], queue="a", delay=0.2)
    app.submit("t.echo", {"value": 9}, queue="b", priority=3)
    time.sleep(0.3)
    for c in claim(app, 10, queues=["a", "b"]):
        app.store.release(c)
    from tests.contract.test_store import exact_counts

    assert app.counts() == exact_counts(app.store)
    assert {q["name"]: q["queued"] for q in app.queues()} == {"a": 5, "b": 1}
    if store_url.startswith("sqlite"):  # the file is readable by the standard tools
        path = store_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT COUNT(*) FROM tasks WHERE delayed = 0").fetchone()[0] == 6
    app.close()
