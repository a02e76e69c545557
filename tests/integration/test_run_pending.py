"""What users' own tests get: `TaskApp("sqlite:///:memory:")` (a private store that is
gone at close) and `app.run_pending()` (queued work run here, one task at a time)."""

from __future__ import annotations

import os
from pathlib import Path

from tasklab import State, TaskApp


class Flaky(Exception):
    pass


def make() -> TaskApp:
    app = TaskApp("sqlite:///:memory:")

    @app.task(name="shop.total")
    def total(ctx, prices: list) -> int:  # type: ignore[no-untyped-def]
        ctx.emit({"items": len(prices)})
        return sum(prices)

    @app.task(name="shop.flaky", max_attempts=3, retry_on=(Flaky,))
    def flaky(ctx) -> int:  # type: ignore[no-untyped-def]
        if ctx.attempt == 1:
            raise Flaky("first try")
        return ctx.attempt

    @app.task(name="shop.tx", transactional=True)
    def tx(ctx, n: int) -> int:  # type: ignore[no-untyped-def]
        return n * 2

    return app


def test_run_pending_runs_what_is_queued_and_the_memory_store_goes_away():
    app = make()
    ids = [app.submit("shop.total", {"prices": [1, 2, 3]}), app.submit("shop.tx", {"n": 4})]
    assert app.run_pending() == 2
    assert [app.query(t).state for t in ids] == [State.SUCCEEDED, State.SUCCEEDED]
    assert app.query(ids[0]).result == 6 and app.query(ids[1]).result == 8
    assert [e.data for e in app.events(ids[0]) if e.type == "progress"] == [{"items": 3}]
    assert app.run_pending() == 0  # nothing left
    where = Path(app.store.path).parent  # type: ignore[attr-defined]
    assert where.name.startswith("tasklab-memory-") and not os.path.exists("tasklab.db")
    app.close()
    assert not where.exists()


def test_a_retry_waits_for_its_backoff_as_in_a_worker():
    app = make()
    tid = app.submit("shop.flaky", {})
    assert app.run_pending() == 1  # the first attempt fails; its retry is not due yet
    snap = app.query(tid)
    assert snap.state is State.QUEUED and snap.attempt == 1
    app.close()


def test_two_memory_apps_do_not_share_a_store():
    a, b = make(), make()
    a.submit("shop.total", {"prices": [1]})
    assert sum(b.counts().values()) == 0
    a.close()
    b.close()
