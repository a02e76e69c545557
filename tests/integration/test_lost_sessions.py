"""A write whose session breaks: before its commit (nothing written) or after it (written,
the answer lost). Injected with the store's fault hook (`lost=True`, `finish_answer`,
`claim_answer`) on both stores; `test_pg_connections.py` kills real sessions."""

from __future__ import annotations

import re
import time

import pytest

from tasklab import State
from tasklab.core.models import NewTask, Outcome
from tasklab.errors import LeaseLost, SessionLost
from tasklab.finisher import Finisher
from tasklab.store import open_store
from tests.conftest import wait_for


@pytest.fixture
def stores(store_url):  # type: ignore[no-untyped-def]
    store, reader = open_store(store_url), open_store(store_url)
    yield store, reader
    store.close()
    reader.close()


def _one_claim(store):  # type: ignore[no-untyped-def]
    store.submit([NewTask("t.echo", {"value": 1}, 1, False)])
    (claim,) = store.claim(["t.echo"], 1, "w1", 30.0)
    return claim


def test_a_terminal_write_whose_session_broke_is_retried_on_new_ones(stores):
    store, reader = stores
    claim = _one_claim(store)
    # broke before the commit, three times in a row (a server coming back): nothing
    # written until the fourth
    store.faults.arm("finish", times=3, lost=True)
    assert Finisher(store).finish(claim, Outcome.returned(1), []) is State.SUCCEEDED
    assert reader.get(claim.task_id).state is State.SUCCEEDED


def test_retrying_a_lost_session_gives_up_in_time(stores):
    store, reader = stores
    claim = _one_claim(store)
    store.faults.arm("finish", times=100, lost=True)  # the database stays away
    started = time.monotonic()
    with pytest.raises(SessionLost):
        Finisher(store, lost_retry_for=0.3).finish(claim, Outcome.returned(1), [])
    assert time.monotonic() - started < 2
    assert reader.get(claim.task_id).state is State.RUNNING  # left to its lease


def test_a_lone_terminal_write_that_fails_otherwise_is_not_retried(stores):
    store, reader = stores
    claim = _one_claim(store)
    store.faults.arm("finish")
    with pytest.raises(Exception, match="injected fault"):
        Finisher(store).finish(claim, Outcome.returned(1), [])
    assert reader.get(claim.task_id).state is State.RUNNING  # left to its lease


def test_a_terminal_write_whose_answer_was_lost_stands_and_is_not_made_twice(stores):
    store, reader = stores
    claim = _one_claim(store)
    store.faults.arm("finish_answer")  # committed; the answer lost with the session
    with pytest.raises(LeaseLost):  # the retry meets its own commit, fenced off
        Finisher(store).finish(claim, Outcome.returned(7), [("progress", {"n": 1})])
    snap = reader.get(claim.task_id)
    assert snap.state is State.SUCCEEDED and snap.result == 7
    assert [e.seq for e in reader.events(claim.task_id)] == [1]
    assert reader.outbox_for(claim.task_id) is not None


@pytest.mark.parametrize("point", ["claim_answer", "finish_answer"])
def test_claims_whose_commit_answer_was_lost_are_given_back(app, point):
    """The claims committed, the worker never learned of them: they go back to the
    queue at once instead of waiting for their leases and ending, never started, as
    `outcome_unknown` (t.mark_unsafe is not retry-safe; its 20 ms let every finish
    claim the next task in the same commit)."""
    ids = [app.submit("t.mark_unsafe", {"n": i, "ms": 20.0}) for i in range(12)]
    app.store.faults.arm(point)
    # no claims ahead: the first terminal transaction is then sure to claim a successor
    with app.worker(concurrency=2, ahead=0):
        # well inside the 5 s lease: nothing here waits for a lease to expire
        wait_for(lambda: all(app.query(t).terminal for t in ids), timeout=4)
    wait_for(lambda: app.store.counters()["lost_claims_released"] >= 1, timeout=4)
    for tid in ids:
        snap = app.query(tid)
        assert snap.state is State.SUCCEEDED and snap.attempt == snap.result == 1, snap
    # exactly the lost call's claims went back: each was claimed once more (epoch 2),
    # and no running claim was given back (its late writes would have been refused)
    reclaimed = sum(epoch - 1 for epoch in epochs(app, ids).values())
    counters = app.store.counters()
    assert counters["lost_claims_released"] == reclaimed >= 1
    # finish_answer: the lost terminal write is retried and meets its own commit, which
    # the fence refuses once (counted; the committed state stands). Nothing else is.
    assert counters["rejected_stale_writes"] == (1 if point == "finish_answer" else 0)
    first, second = app.claim_owner(), app.claim_owner()  # an owner per claim call
    assert first != second and re.fullmatch(rf"{re.escape(app.owner)}#\d+", first)


def epochs(app, ids):  # type: ignore[no-untyped-def]
    """Each task's epoch (not in the snapshot), read with the store's own SQL dialect."""
    mark = "?" if app.db.startswith("sqlite") else "%s"
    with app.store._read() as conn:
        rows = [
            conn.execute(f"SELECT epoch FROM tasks WHERE id = {mark}", (t,)).fetchone() for t in ids
        ]
    return {
        t: int(r["epoch"] if isinstance(r, dict) else r[0]) for t, r in zip(ids, rows, strict=True)
    }


@pytest.mark.parametrize("runner", ["direct", "thread", "process", "async"])
def test_a_claim_by_id_whose_answer_was_lost_is_given_back(app, runner):
    """`app.run` and the runners used directly claim one task by id: a lost answer
    raises, and the claim it may have made goes back to the queue (not to its lease)."""
    from tasklab import AsyncTaskRunner, ProcessTaskRunner, ThreadTaskRunner
    from tasklab.errors import SessionLost

    task = "t.async_echo" if runner == "async" else "t.echo"
    tid = app.submit(task, {"value": 1})
    app.store.faults.arm("claim_answer")
    if runner == "direct":
        with pytest.raises(SessionLost):
            app.run(tid)
    else:
        kind = {"thread": ThreadTaskRunner, "process": ProcessTaskRunner, "async": AsyncTaskRunner}
        with kind[runner](app, workers=1) as pool:
            with pytest.raises(SessionLost):
                pool.submit(tid).result(timeout=10)
    wait_for(lambda: app.query(tid).state is State.QUEUED, timeout=4)  # inside the lease
    assert app.query(tid).attempt == 0
    assert app.run(tid).state is State.SUCCEEDED


@pytest.mark.parametrize(
    ("point", "lost"),
    [
        ("append_events", False),  # refused whole: nothing written
        ("append_events", True),  # the session broke before the commit
        ("append_events_answer", True),  # written, the answer lost
    ],
)
def test_a_failed_event_flush_loses_no_chunk_and_writes_none_twice(app, point, lost):
    """Streamed text is flushed while the task runs; a flush that fails is kept and
    written later, one whose fate is unknown is looked up first: the chunks still
    concatenate exactly to the streamed text, with gapless seqs."""
    parts = [f"w{i} " for i in range(40)]
    tid = app.submit("t.stream", {"parts": parts, "pause": 0.01})
    app.store.faults.arm(point, times=2, lost=lost)
    assert app.run(tid).state is State.SUCCEEDED
    assert app.store.faults.fired.get(point) == 2  # both armed faults bit
    events = app.events(tid)
    assert "".join(e.data["text"] for e in events if e.type == "chunk") == "".join(parts)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("attempt") == 1
