"""Durable functions on both stores (SPEC §8): steps answered from the journal, durable
sleeps that hold no lease and no slot, signals (before the wait, twice, to an ended
task, a timeout), children (spawned once, joined, a failing one, cancel cascading), a
stale execution fenced out of steps, waits and spawns, and the three runners."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tasklab import State
from tasklab.core.durable import WaitTimeout
from tasklab.core.models import Outcome
from tasklab.core.policy import Backoff
from tasklab.errors import InvalidPayload, LeaseLost, TaskTerminal
from tests.conftest import make_app, wait_for

CALLS: dict[str, int] = {}


def counted(name: str, value: Any = None) -> Any:
    CALLS[name] = CALLS.get(name, 0) + 1
    return value if value is not None else name


def register(app) -> None:  # type: ignore[no-untyped-def]
    @app.task(name="d.sleepy")
    def sleepy(ctx, seconds: float, tag: str) -> str:  # type: ignore[no-untyped-def]
        ctx.step("before", counted, f"{tag}:before")
        ctx.sleep_for(seconds)
        ctx.step("after", counted, f"{tag}:after")
        return "woke"

    @app.task(name="d.quick")
    def quick(ctx) -> str:  # type: ignore[no-untyped-def]
        return "quick"

    @app.task(name="d.signal")
    def on_signal(ctx, timeout: float | None = None) -> Any:  # type: ignore[no-untyped-def]
        try:
            return {"got": ctx.wait_signal("approve", timeout=timeout)}
        except WaitTimeout:
            return {"timed_out": True}

    @app.task(name="d.child")
    def child(ctx, i: int) -> int:  # type: ignore[no-untyped-def]
        if i < 0:
            raise ValueError("a child that fails")
        return i * 10

    @app.task(name="d.parent")
    def parent(ctx, values: list, tag: str = "p") -> Any:  # type: ignore[no-untyped-def]
        kids = [ctx.spawn("d.child", {"i": v}, key=f"k{n}") for n, v in enumerate(values)]
        counted(f"{tag}:spawned")
        snaps = ctx.join(kids)
        return [[s["state"], s["result"]] for s in snaps]

    @app.task(name="d.far")
    def far(ctx, how: str) -> str:  # type: ignore[no-untyped-def]
        end = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-14)))
        if how == "until":
            ctx.sleep_until(end)
        elif how == "for":
            ctx.sleep_for(1e12)
        else:
            ctx.wait_signal("never", timeout=timedelta.max)
        return "woke"

    @app.task(name="d.holder")
    def holder(ctx, tag: str) -> str:  # type: ignore[no-untyped-def]
        ctx.spawn("d.child", {"i": 1}, key="only")
        ctx.wait_signal("never")
        return "never"


@pytest.fixture
def dapp(store_url):  # type: ignore[no-untyped-def]
    app = make_app(store_url, lease=5.0)
    register(app)
    CALLS.clear()
    yield app
    app.close()


def test_a_sleeping_task_holds_no_lease_and_no_slot_and_wakes_on_time(dapp):
    # 3 s: long enough for three quick tasks to run in its slot on a loaded machine
    # before it is due (at 1 s, a suite run slowed by a gc after every test once woke
    # it before the check that it still waits)
    tid = dapp.submit("d.sleepy", {"seconds": 3.0, "tag": "s"})
    with dapp.worker(concurrency=1, scheduler=False):
        wait_for(lambda: dapp.query(tid).state is State.WAITING)
        waited_at = time.monotonic()
        snap = dapp.query(tid)
        assert snap.lease_owner is None and snap.lease_until is None
        assert snap.wait["kind"] == "sleep" and snap.attempt == 0
        # the one slot is free: other tasks run meanwhile
        quick = [dapp.submit("d.quick", {}) for _ in range(3)]
        wait_for(lambda: all(dapp.query(q).state is State.SUCCEEDED for q in quick), 3)
        assert dapp.query(tid).state is State.WAITING
        due = waited_at + 3.0  # (approximately: the sleep began a moment before)
        wait_for(lambda: dapp.query(tid).terminal, 5)
        woke = time.monotonic()
    snap = dapp.query(tid)
    assert snap.state is State.SUCCEEDED and snap.attempt == 1  # a resume is no attempt
    assert woke - due < 1.0, woke - due
    assert CALLS == {"s:before": 1, "s:after": 1}  # each step once across two runs
    kinds = [e.type for e in dapp.events(tid)]
    assert kinds == ["attempt", "waiting", "resumed"]
    assert [e.seq for e in dapp.events(tid)] == [1, 2, 3]


def test_signals_before_the_wait_twice_after_the_end_and_timeouts(dapp):
    early = dapp.submit("d.signal", {})
    assert dapp.signal(early, "approve", {"by": "ann"}) == ({"by": "ann"}, True)
    assert dapp.signal(early, "approve", {"by": "bob"}) == ({"by": "ann"}, False)  # the first
    assert dapp.run_pending() == 1
    assert dapp.query(early).result == {"got": {"by": "ann"}}  # kept from before the wait
    with pytest.raises(TaskTerminal):
        dapp.signal(early, "approve", {"late": True})
    late = dapp.submit("d.signal", {})
    timed = dapp.submit("d.signal", {"timeout": 0.3})
    with dapp.worker(concurrency=2, scheduler=False):
        wait_for(lambda: dapp.query(late).state is State.WAITING)
        assert dapp.query(late).wait == {
            "kind": "signal",
            "signal": "approve",
            "children": [],
            "until": None,
        }
        dapp.signal(late, "approve", 42)
        wait_for(lambda: dapp.query(late).terminal and dapp.query(timed).terminal, 5)
    assert dapp.query(late).result == {"got": 42}
    assert dapp.query(timed).result == {"timed_out": True}
    assert [s["name"] for s in dapp.signals(late)] == ["approve"]


def test_join_sees_a_failed_child_and_each_child_is_spawned_once(dapp):
    tid = dapp.submit("d.parent", {"values": [1, -1, 3]})
    with dapp.worker(concurrency=4, scheduler=False):
        wait_for(lambda: dapp.query(tid).terminal, 10)
    snap = dapp.query(tid)
    assert snap.state is State.SUCCEEDED
    assert snap.result == [["succeeded", 10], ["failed", None], ["succeeded", 30]]
    children = dapp.children(tid).items
    assert len(children) == 3 and {c.parent_id for c in children} == {tid}
    assert {c.idempotency_key for c in children} == {f"{tid}:k0", f"{tid}:k1", f"{tid}:k2"}
    # the function ran twice (spawn, then after the join): the children were made once
    assert CALLS["p:spawned"] == 2


def test_cancelling_a_parent_cancels_its_live_children_and_a_waiting_task_at_once(dapp):
    tid = dapp.submit("d.holder", {"tag": "h"})
    assert dapp.run_pending() == 2  # the holder (now waiting) and its child
    kid = dapp.submit("d.quick", {})  # not its child: untouched
    (child,) = dapp.children(tid).items
    child_ended = dapp.query(child.id).terminal
    assert dapp.query(tid).state is State.WAITING
    out = dapp.cancel(tid)
    assert out.request_accepted and out.state is State.CANCELLED  # no code was running
    assert dapp.query(tid).cancel_reason.value == "user"
    assert child_ended  # the child had already ended: nothing to cancel
    live = dapp.submit("d.holder", {"tag": "h2"})
    dapp.run(live)  # the holder waits; its child is still queued
    (queued_child,) = dapp.children(live).items
    assert dapp.query(queued_child.id).state is State.QUEUED
    dapp.cancel(live)
    snap = dapp.query(queued_child.id)
    assert snap.state is State.CANCELLED and snap.cancel_reason.value == "parent_cancelled"
    assert dapp.query(kid).state is State.QUEUED


def test_a_started_step_is_never_called_twice_unless_retry_safe(dapp, store_url):
    @dapp.task(name="d.steps", retry_safe=True, max_attempts=3)
    def steps(ctx, safe: bool) -> str:  # type: ignore[no-untyped-def]
        ctx.step("charge", counted, "charge", retry_safe=safe)
        return "done"

    for safe in (False, True):
        tid = dapp.submit("d.steps", {"safe": safe})
        # an earlier execution started the step and died inside it: its record says so
        claim = dapp.store.claim(["d.steps"], 1, "old", 30.0)[0]
        dapp.store.effect_start(claim, "step:charge")
        dapp.store.release(claim)
        dapp.run_pending()
        snap = dapp.query(tid)
        if safe:
            assert snap.state is State.SUCCEEDED and CALLS.get("charge") == 1
        else:
            assert snap.state is State.FAILED and snap.error.code == "outcome_unknown"
            assert "'charge'" in snap.error.message and CALLS.get("charge") is None


def test_a_stale_execution_cannot_record_a_step_a_wait_or_a_spawn(store_url):
    app = make_app(store_url)
    register(app)
    store = app.store
    tid = app.submit("d.quick", {})
    old = store.claim(["d.quick"], 1, "old", 1.0)[0]
    time.sleep(1.1)
    store.expire(Backoff(base=0.0, jitter=0.0))  # retry-safe? no: it fails outcome_unknown
    assert store.get(tid).terminal
    with pytest.raises(LeaseLost):
        store.effect_start(old, "step:x")
    wait = {
        "kind": "sleep",
        "key": "wait:1:sleep",
        "wake_at": None,
        "name": None,
        "children": [],
        "record": {},
    }
    with pytest.raises(LeaseLost):
        store.finish(old, Outcome.suspended(wait), [])
    child = app.engine.prepare_child(tid, "d.child", {"i": 1}, "k")
    with pytest.raises(LeaseLost):
        store.spawn(old, child)
    assert store.journal(tid) == [] and app.children(tid).items == []
    assert store.get(tid).state is State.FAILED
    app.close()


@pytest.mark.parametrize("runner", ["thread", "process", "async"])
def test_the_durable_flow_on_every_runner(dapp, runner):
    if runner == "async":

        @dapp.task(name="d.flow_async")
        async def flow_async(ctx, n: int) -> Any:  # type: ignore[no-untyped-def]
            first = await ctx.step("first", counted, "a:first")
            await ctx.sleep_for(0.2)
            sig = await ctx.wait_signal("go")
            kids = [await ctx.spawn("t.flow_child", {"i": i}, key=str(i)) for i in range(n)]
            snaps = await ctx.join(kids)
            return [first, sig, [s["result"] for s in snaps]]

        name = "d.flow_async"
    else:
        name = "t.flow"
    tid = dapp.submit(name, {"n": 2})
    with dapp.worker(runner=runner, concurrency=2, scheduler=False):
        wait_for(lambda: (dapp.query(tid).wait or {}).get("kind") == "signal", 10)
        dapp.signal(tid, "go", "yes")
        wait_for(lambda: dapp.query(tid).terminal, 15)
    snap = dapp.query(tid)
    assert snap.state is State.SUCCEEDED, snap.error
    assert snap.result[1:] == ["yes", [0, 10]]
    types = [e.type for e in dapp.events(tid)]
    assert types.count("waiting") == 3 and types.count("resumed") == 3
    assert [e.seq for e in dapp.events(tid)] == list(range(1, len(types) + 1))


def test_waiting_tasks_cost_no_polling(dapp):
    """1,000 tasks waiting for signals are in no index a claim or the stager reads:
    the wake-up query walks `tasks_waking`, which holds only timed waits."""
    ids = [dapp.submit("d.signal", {}) for _ in range(1000)]
    sqlite = dapp.db.startswith("sqlite")
    with dapp.worker(concurrency=32, scheduler=False):
        wait_for(lambda: dapp.counts()["waiting"] == 1000, 60)
        with dapp.store._read() as conn:
            q = dapp.store.q["next_run_after"]
            names = '["d.signal"]' if sqlite else ["d.signal"]
            prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
            rows = conn.execute(prefix + q, {"names": names}).fetchall()
            plan = " ".join(str(r["detail"] if sqlite else list(r.values())[-1]) for r in rows)
            assert "tasks_waking" in plan, plan
            (row,) = conn.execute(q, {"names": names}).fetchall()
            assert row["wait"] is None  # nothing timed: no wake-up to schedule
        dapp.signal(ids[0], "approve", 1)
        wait_for(lambda: dapp.query(ids[0]).terminal, 5)
    assert dapp.counts()["waiting"] == 999


def test_no_time_beyond_what_a_read_can_load_is_stored(dapp):
    """A time past the year 9999 in UTC — `datetime.max`, or a time near it with a
    negative offset — was stored as given, and then every read of its task (the
    snapshot, the list the dashboard shows) failed with OverflowError: a run_at at
    submit, a durable sleep's end. Now the submit is refused and the sleep fails its
    task with the reason; every task still reads."""
    end = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-14)))
    for at in (end, datetime.max.replace(tzinfo=UTC)):
        with pytest.raises(InvalidPayload, match="within ten years"):
            dapp.submit("d.quick", {}, run_at=at)
    ids = [dapp.submit("d.far", {"how": how}) for how in ("until", "for", "timeout")]
    assert dapp.run_pending() == 3
    reasons = ("sleep_until must be within", "sleep_for must", "timeout must")
    fresh = make_app(dapp.db)  # read from a new connection
    try:
        for task_id, reason in zip(ids, reasons, strict=True):
            snap = fresh.query(task_id)
            assert snap.state is State.FAILED and reason in snap.error.message, snap.error
        assert len(fresh.list().items) == 3
    finally:
        fresh.close()
