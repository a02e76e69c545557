"""A thread worker's claims ahead (runners/thread.py): beyond its slots while its tasks
are short, started while earlier tasks' terminal writes commit. Concurrency still
bounds the task functions running at once; a claim ahead that waits behind a long
task goes back to the queue for any worker; a stopping worker gives back what waits."""

from __future__ import annotations

import sys
import threading
import time
import uuid

import pytest

from tasklab import State
from tasklab.runners import thread as thread_runner
from tests.conftest import make_app, wait_for
from tests.helpers.sample_tasks import latch, started


def _finish_calls(app) -> list[int]:  # type: ignore[no-untyped-def]
    """Counts the terminal transactions (each one commit) and the writes in each."""
    sizes: list[int] = []
    plain = app.store.finish_and_claim

    def counting(batch, request):  # type: ignore[no-untyped-def]
        sizes.append(len(batch))
        return plain(batch, request)

    app.store.finish_and_claim = counting
    return sizes


def test_concurrency_one_runs_one_function_at_a_time_and_commits_fewer_times(
    store_url, monkeypatch
):
    app = make_app(store_url, lease=5.0)
    running = peak = 0
    order: list[int] = []
    guard = threading.Lock()

    @app.task(name="t.peak", retry_safe=True)
    def peak_task(ctx, n: int) -> None:  # type: ignore[no-untyped-def]
        nonlocal running, peak
        with guard:
            running += 1
            peak = max(peak, running)
            order.append(n)
        with guard:
            running -= 1

    try:
        sizes = _finish_calls(app)
        ids = app.submit_many("t.peak", [{"n": n} for n in range(300)])
        with app.worker(concurrency=1) as w:
            wait_for(lambda: app.counts()["succeeded"] == 300, timeout=60)
            assert w.runner.ahead > 0
        assert peak == 1  # one task function at a time, whatever was claimed ahead
        assert sorted(order) == list(range(300))
        assert sum(sizes) == 300 and len(sizes) < 270, sizes  # commits were shared
        assert all(app.query(t).attempt == 1 for t in ids)
        # one batch claimed at once (no claim of a finishing transaction races it): the
        # turns go in claim order, submit order here. A cold worker claims only a few
        # ahead (its prior of 20 ms a task); a long allowed wait makes it all 30.
        monkeypatch.setattr(thread_runner, "AHEAD_WAIT", 10.0)
        order.clear()
        batch = app.submit_many("t.peak", [{"n": n} for n in range(30)])
        with app.worker(concurrency=1):
            wait_for(lambda: all(app.query(t).terminal for t in batch), timeout=30)
        assert order == list(range(30)) and peak == 1
        monkeypatch.undo()
        # without claims ahead, one terminal transaction per task
        sizes.clear()
        more = app.submit_many("t.peak", [{"n": n} for n in range(50)])
        with app.worker(concurrency=1, ahead=0):
            wait_for(lambda: all(app.query(t).terminal for t in more), timeout=30)
        assert sizes == [1] * 50 and peak == 1
    finally:
        app.close()


def test_claims_ahead_behind_a_long_task_go_back_to_the_queue_for_others(store_url):
    app, other = make_app(store_url, lease=5.0), make_app(store_url, lease=5.0)
    name = uuid.uuid4().hex
    try:
        long = app.submit("t.hold", {"name": name})
        marks = [app.submit("t.mark", {"n": i}) for i in range(5)]
        with app.worker(concurrency=1) as w:
            wait_for(lambda: started(name).is_set())
            # some claimed with the long one (nothing had run yet: a cold worker claims
            # a few ahead), then given back unstarted
            wait_for(lambda: w.runner.given_back >= 1, timeout=5)
            wait_for(lambda: app.counts()["running"] == 1, timeout=5)
            for t in marks:
                snap = app.query(t)
                assert snap.state is State.QUEUED and snap.attempt == 0
            given = w.runner.given_back
            time.sleep(0.3)  # the long task runs on: this worker claims none of them again
            assert w.runner.given_back == given and app.counts()["running"] == 1
            with other.worker(concurrency=1):  # another worker runs them meanwhile
                wait_for(lambda: all(app.query(t).terminal for t in marks), timeout=15)
            assert app.query(long).state is State.RUNNING
            latch(name).set()
            wait_for(lambda: app.query(long).terminal)
        assert all(app.query(t).result == 1 for t in marks)  # each ran once
    finally:
        other.close()
        app.close()


def test_a_stopping_worker_gives_back_the_claims_waiting_for_a_turn(store_url, monkeypatch):
    # they would wait on for 30 s (lease/10): a loaded machine's setup cannot outlast it
    monkeypatch.setattr(thread_runner, "AHEAD_WAIT", 30.0)
    app = make_app(store_url, lease=300.0, drain_timeout=0.2, shutdown_grace=0.2)
    name = uuid.uuid4().hex
    try:
        blocker = app.submit("t.hold", {"name": name})
        waiting = [app.submit("t.echo", {"value": i}) for i in range(3)]
        w = app.worker(concurrency=1).start()
        wait_for(lambda: started(name).is_set() and app.counts()["running"] == 4)
        report = w.stop()
        assert report["released"] == 3
        for t in waiting:
            snap = app.query(t)
            assert snap.state is State.QUEUED and snap.attempt == 0
        assert app.query(blocker).state is State.CANCEL_REQUESTED
        latch(name).set()
        wait_for(lambda: app.query(blocker).state is State.CANCELLED)
    finally:
        app.close()


def test_a_stopping_worker_never_claims_again_what_it_gives_back(store_url, monkeypatch):
    """The claims waiting for a turn are given back only once the claim loop has
    stopped: a stop slowed down between its steps (a loaded machine) must not let the
    loop claim a given-back task again and give it back twice (`released` 4, not 3)."""
    monkeypatch.setattr(thread_runner, "AHEAD_WAIT", 30.0)
    app = make_app(store_url, lease=300.0, drain_timeout=0.2, shutdown_grace=0.2)
    name = uuid.uuid4().hex
    claimed: list[str] = []
    plain = app.store.claim

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        got = plain(*args, **kwargs)
        claimed.extend(c.task_id for c in got)
        return got

    app.store.claim = recording
    try:
        blocker = app.submit("t.hold", {"name": name})
        waiting = [app.submit("t.echo", {"value": i}) for i in range(3)]
        w = app.worker(concurrency=1).start()
        wait_for(lambda: started(name).is_set() and app.counts()["running"] == 4)
        give_back = w.runner.stop_starting

        def slowly() -> None:
            give_back()  # the waiting claims are given back now ...
            time.sleep(0.3)  # ... and the stop goes on only later

        monkeypatch.setattr(w.runner, "stop_starting", slowly)
        report = w.stop()
        assert report["released"] == 3
        assert sorted(claimed) == sorted([blocker, *waiting])  # each claimed once
        for t in waiting:
            snap = app.query(t)
            assert snap.state is State.QUEUED and snap.attempt == 0
        latch(name).set()
        wait_for(lambda: app.query(blocker).state is State.CANCELLED)
    finally:
        app.close()


def test_claims_ahead_are_a_thread_workers_and_never_negative(app):
    with pytest.raises(ValueError, match="ahead"):
        thread_runner.ThreadTaskRunner(app, 1, 0, None, -1)
    with pytest.raises(ValueError, match="one"):
        app.worker(concurrency=1, backlog=2, ahead=4)
    assert app.worker(concurrency=1, backlog=2).runner.ahead == 0  # a backlog waits on
    for kind in ("process", "async"):
        w = app.worker(runner=kind, concurrency=1)
        assert not hasattr(w.runner, "ahead") or w.runner.ahead == 0


def _in_group_commit(ident: int) -> bool:
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code.co_filename.endswith("groupcommit.py"):
            return True
        frame = frame.f_back
    return False


def test_a_slots_thread_is_free_while_its_tasks_terminal_write_commits(store_url):
    """The terminal write is handed over, not waited for: while the first write is held
    back by the store, the second task runs and its thread goes back to the pool
    with its write pending. A claim's future (its slot) stays taken until its own write
    has committed, so a worker still holds no more claims than slots + ahead."""
    app = make_app(store_url, lease=10.0)
    observer = make_app(store_url)  # reads from connections of its own
    ran: list[tuple[int, int]] = []

    @app.task(name="t.ident", retry_safe=True)
    def ident_task(ctx, n: int) -> None:  # type: ignore[no-untyped-def]
        ran.append((n, threading.get_ident()))

    held = threading.Event()
    release = threading.Event()
    plain = app.store.finish_and_claim

    def holding(batch, request):  # type: ignore[no-untyped-def]
        if not held.is_set():
            held.set()
            release.wait(20)
        return plain(batch, request)

    app.store.finish_and_claim = holding
    try:
        ids = app.submit_many("t.ident", [{"n": n} for n in range(4)])
        with app.worker(concurrency=1, ahead=1) as w:
            wait_for(lambda: held.is_set() and len(ran) >= 2, timeout=20)
            second_thread = ran[1][1]
            # the second task's thread is not waiting for its commit
            wait_for(lambda: not _in_group_commit(second_thread), timeout=5)
            in_flight = w.runner.in_flight()
            assert len(in_flight) == 2  # neither slot freed before its write commits
            assert all(not f.done() for f, _ in in_flight)
            time.sleep(0.2)
            assert len(ran) == 2  # one slot + one ahead: no third claim meanwhile
            states = observer.store.states_of(ids[:2])
            assert set(states.values()) == {State.RUNNING}
            release.set()
            assert [f.result(10) for f, _ in in_flight] == [State.SUCCEEDED] * 2
            wait_for(lambda: observer.counts()["succeeded"] == 4, timeout=20)
        assert sorted(n for n, _ in ran) == [0, 1, 2, 3]
    finally:
        release.set()
        observer.close()
        app.close()


def test_an_answered_execution_leaves_the_monitor_though_its_thread_writes_on(app):
    """A handed-over write's answer takes the execution out of the monitor at once: the
    thread that ran it may go on leading other tasks' writes, and no heartbeat or local
    deadline of a task already written may come due meanwhile."""
    tid = app.submit("t.echo", {"value": 1})
    claim = app.engine.claim_task(tid)
    assert claim is not None
    heard: list[tuple[object, object]] = []

    def answered(state: object) -> None:
        heard.append((state, app.engine.monitor.get(tid)))

    # a lone sender leads: this thread writes its own batch, inside `execute`
    assert app.engine.execute(claim, answered=answered) is None
    assert heard == [(State.SUCCEEDED, None)]
    assert app.query(tid).state is State.SUCCEEDED
