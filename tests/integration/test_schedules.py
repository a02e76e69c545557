"""Schedules on both stores (SPEC §7): stored, one task per tick whoever submits it,
each catch-up policy after downtime, `@app.periodic` written at a scheduler's start
without losing progress, bad definitions refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tasklab.core.schedules import ScheduleDef
from tasklab.errors import InvalidPayload, UnknownTask
from tasklab.service.scheduler import Scheduler
from tests.conftest import make_app


def made_by(app, name):  # type: ignore[no-untyped-def]
    """The tasks a schedule made, by their idempotency keys."""
    items, cursor = [], None
    while True:
        page = app.list(limit=1000, cursor=cursor)
        items += [
            s for s in page.items if (s.idempotency_key or "").startswith(f"schedule:{name}:")
        ]
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


def backdate(app, name: str, by: timedelta) -> ScheduleDef:
    """Pretend no scheduler ran for `by`: move the stored next tick back."""
    spec = _spec(app, name)
    first = spec.latest_until(app.store.now() - by)
    app.store.put_schedule(spec, first, keep=False)
    return spec


def _spec(app, name: str) -> ScheduleDef:
    doc = next(s for s in app.schedules() if s["name"] == name)
    return ScheduleDef.checked(
        name,
        doc["task"],
        cron=doc["cron"],
        every=doc["every"],
        timezone=doc["timezone"],
        payload=doc["payload"],
        catch_up=doc["catch_up"],
        origin=doc["origin"],
    )


def test_three_schedulers_make_one_task_per_tick(store_url):
    apps = [make_app(store_url) for _ in range(3)]
    apps[0].schedule("tick", "t.echo", every=3600, payload={"value": 1}, catch_up="all")
    backdate(apps[0], "tick", timedelta(hours=5))
    schedulers = [Scheduler(a) for a in apps]
    made = [s.run_once() for s in schedulers for _ in range(2)]
    tasks = made_by(apps[0], "tick")
    assert len(tasks) == len({t.idempotency_key for t in tasks}) in (5, 6)
    assert sum(made) >= len(tasks)  # the others were answered the existing tasks
    doc = next(s for s in apps[0].schedules() if s["name"] == "tick")
    assert doc["last_task_id"] in {t.id for t in tasks}
    assert doc["next_tick"] > doc["last_tick"]
    for a in apps:
        a.close()


@pytest.mark.parametrize(("policy", "expect"), [("latest", {1}), ("all", {5, 6}), ("skip", {0, 1})])
def test_catch_up_after_downtime(app, policy, expect):
    app.schedule("hourly", "t.echo", every="1h", payload={"value": 2}, catch_up=policy)
    spec = backdate(app, "hourly", timedelta(hours=5))
    Scheduler(app).run_once()
    made = made_by(app, "hourly")
    if policy == "skip":  # the latest tick counts as on time only within the grace
        late = (app.store.now() - spec.latest_until(app.store.now())).total_seconds()
        expect = {0} if late > 60 else {1}
    assert len(made) in expect
    assert Scheduler(app).run_once() == 0  # moved on: nothing due until the next tick


def test_a_schedule_outlives_the_app_that_made_it(store_url):
    first = make_app(store_url)
    first.schedule("nightly", "t.echo", cron="0 3 * * *", timezone="Europe/Paris")
    first.close()
    second = make_app(store_url)
    (doc,) = second.schedules()
    assert (doc["name"], doc["expression"], doc["origin"]) == ("nightly", "0 3 * * *", "runtime")
    assert doc["next_tick"] is not None and doc["last_task_id"] is None
    # the same definition again changes nothing; another one replaces it
    before = doc["next_tick"]
    second.schedule("nightly", "t.echo", cron="0 3 * * *", timezone="Europe/Paris")
    assert second.schedules()[0]["next_tick"] == before
    second.schedule("nightly", "t.echo", cron="0 4 * * *", timezone="Europe/Paris")
    assert second.schedules()[0]["next_tick"] != before
    assert second.unschedule("nightly") and second.schedules() == []
    assert not second.unschedule("nightly")
    second.close()


def test_periodic_in_code_is_stored_at_start_keeping_its_progress(store_url):
    app = make_app(store_url)

    @app.periodic(every=timedelta(hours=1), name="sweep", payload={"value": 3})
    @app.task(name="t.sweep")
    def sweep(ctx, value: int) -> int:  # type: ignore[no-untyped-def]
        return value

    Scheduler(app).start().stop()
    (doc,) = app.schedules()
    assert (doc["origin"], doc["task"], doc["expression"]) == ("code", "t.sweep", "every 1h")
    backdate(app, "sweep", timedelta(hours=2))
    moved = app.schedules()[0]["next_tick"]
    Scheduler(app).start().stop()  # a restart keeps the stored progress
    assert app.schedules()[0]["next_tick"] in (moved, doc["next_tick"])
    app.close()


def test_bad_schedules_are_refused_and_nothing_is_stored(app):
    with pytest.raises(InvalidPayload):
        app.schedule("bad", "t.echo", cron="61 * * * *")
    with pytest.raises(InvalidPayload):
        app.schedule("bad", "t.echo", every=60, payload={"nope": 1})  # not t.echo's
    with pytest.raises(UnknownTask):
        app.schedule("bad", "no.such.task", every=60)
    with pytest.raises(InvalidPayload):
        app.schedule("bad name", "t.echo", every=60)
    with pytest.raises(InvalidPayload):

        @app.periodic(cron="* * *")
        @app.task(name="t.never")
        def never(ctx):  # type: ignore[no-untyped-def]
            return None

    assert app.schedules() == []
