"""A running task whose authority is taken over (its lease ended early by the
database's clock, reaped and claimed by another worker) stops: its function sees the
stop at its next checkpoint, it writes no further event and no terminal state, and
exactly one rejected stale write is counted — on both stores, checked from a new
connection."""

from __future__ import annotations

import time
import uuid

from tasklab import ThreadTaskRunner
from tasklab.core.policy import Backoff
from tasklab.core.states import State
from tests.conftest import make_app, wait_for
from tests.helpers import sample_tasks


def end_lease_now(app, task_id: str) -> None:  # type: ignore[no-untyped-def]
    """As if the lease had run out by the database's clock (a slow heartbeat, a clock
    that jumped): what the reaper and another worker then see."""
    sqlite = app.db.startswith("sqlite")
    sql = (
        "UPDATE tasks SET lease_until = julianday('now') - 1 WHERE id = ?"
        if sqlite
        else "UPDATE tasks SET lease_until = clock_timestamp() - interval '1 day' WHERE id = %s"
    )
    with app.store._write() as conn:
        conn.execute(sql, (task_id,))


def test_a_running_task_that_loses_its_authority_stops_and_writes_nothing_more(store_url):
    # a 30 s lease: no heartbeat (every 10 s) comes before the next event flush (50 ms),
    # so it is the refused flush that must stop the task
    app = make_app(store_url, lease=30.0)
    name = uuid.uuid4().hex
    tid = app.submit("t.emitter", {"name": name})
    other = make_app(store_url)  # another worker, its own connections
    try:
        with ThreadTaskRunner(app, workers=1) as runner:
            fut = runner.submit(tid)
            wait_for(lambda: len(other.events(tid)) >= 3)
            before = other.store.counters()["rejected_stale_writes"]
            end_lease_now(other, tid)
            assert other.store.expire(Backoff(base=0.0, jitter=0.0)) == [tid]
            (taken,) = other.store.claim(["t.emitter"], 1, "B", 30.0)
            assert taken.task_id == tid and taken.attempt == 2
            # A's next flush is refused: it stops (generous: the flush is every 50 ms)
            fut.result(timeout=3.0)
        # its function saw the stop at a checkpoint (Cancelled), not an error
        assert sample_tasks.emitter_end[name] == "Cancelled"
        seen = [e.seq for e in other.events(tid)]
        time.sleep(0.3)
        assert [e.seq for e in other.events(tid)] == seen  # no further event by A
        assert all(e.attempt == 1 for e in other.events(tid))
        snap = other.query(tid)  # no terminal write by A: B's claim stands
        assert snap.state is State.RUNNING and snap.attempt == 2 and snap.result is None
        assert other.store.counters()["rejected_stale_writes"] == before + 1
    finally:
        other.close()
        app.close()
