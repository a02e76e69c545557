"""What every runner promises (seed 001's timeline where it applies), and what only
one of them can do: terminate a process, cancel an asyncio task."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tasklab import (
    AsyncTaskRunner,
    ProcessTaskRunner,
    QueueFull,
    Settings,
    State,
    ThreadTaskRunner,
)
from tests.conftest import make_app, wait_for
from tests.helpers.loopcheck import store_calls_on_the_loop

RUNNERS = {"thread": ThreadTaskRunner, "process": ProcessTaskRunner, "async": AsyncTaskRunner}
TEXT = (
    "It was the best of times, it was the worst of times; it was the age of "
    "wisdom, it was the age of foolishness. "
) * 3000


@pytest.fixture(params=list(RUNNERS))
def runner_cls(request):
    return RUNNERS[request.param]


def started(d: Path) -> bool:
    return (d / "started").exists()


def release(d: Path) -> None:
    (d / "release").touch()


def test_wordfreq_is_identical_on_every_runner(app):
    results = {}
    for name, cls in RUNNERS.items():
        tid = app.submit("wordfreq", {"text": TEXT, "top": 5})
        with cls(app, workers=2) as runner:
            snap = runner.submit(tid).result(timeout=60)
        assert snap.state is State.SUCCEEDED, (name, snap.error)
        progress = [e.data for e in app.events(tid) if e.type == "progress"]
        assert progress[-1]["done"] == progress[-1]["total"] == len(TEXT.encode())
        results[name] = snap.result
    assert results["thread"] == results["process"] == results["async"]
    assert results["thread"]["top"][0] == ["it", 12000]


def test_an_async_task_sees_one_context_on_every_runner(app):
    """One context implementation with a thin async adapter: effects, heartbeats,
    progress, text and retries behave alike on the thread runner (asyncio.run in
    the slot's thread), in a process child and on the event loop."""
    seen = {}
    for name, cls in RUNNERS.items():
        tid = app.submit("t.async_effect", {"fail_after_effect": 1})
        with cls(app, workers=1) as runner:
            runner.submit(tid).result(timeout=60)
        deadline = time.monotonic() + 10
        while not (snap := app.query(tid)).terminal and time.monotonic() < deadline:
            app.run_pending()  # the retry, once its backoff (about 1 s) has passed
            time.sleep(0.05)
        assert snap.state is State.SUCCEEDED, (name, snap.error)
        kinds = [e.type for e in app.events(tid)]
        assert kinds.count("progress") == 2 and "chunk" in kinds, (name, kinds)
        seen[name] = snap.result
    expected = {"charge": {"charged_on_attempt": 1}, "previous": "done", "attempt": 2}
    assert seen == dict.fromkeys(RUNNERS, expected)


def test_seed_001_timeline_on_every_runner(app, runner_cls, tmp_path):
    d1, d3 = tmp_path / "1", tmp_path / "3"
    d1.mkdir(), d3.mkdir()
    first = app.submit("t.file_hold", {"dir": str(d1)})
    second = app.submit("t.echo", {"value": 2})
    third = app.submit("t.echo", {"value": 3})
    with runner_cls(app, workers=1, backlog=1) as runner:
        f1 = runner.submit(first)
        wait_for(lambda: started(d1))
        f2 = runner.submit(second)
        with pytest.raises(QueueFull, match="queue is full"):
            runner.submit(third)
        assert app.query(third).state is State.QUEUED
        out2 = runner.cancel(f2)
        assert (out2.future_cancelled, out2.request_accepted) == (True, True)
        assert app.query(second).state is State.CANCELLED
        out1 = runner.cancel(f1)
        assert (out1.future_cancelled, out1.request_accepted) == (False, True)
        assert app.query(first).state is State.CANCEL_REQUESTED
        time.sleep(0.1)
        assert not f1.done()
        release(d1)
        f1.result(timeout=10)
        assert app.query(first).state is State.CANCELLED and app.query(first).result is None
        assert runner.submit(third).result(timeout=10).state is State.SUCCEEDED


def test_shutdown_cancels_unstarted_and_waits_for_running(app, runner_cls, tmp_path):
    first = app.submit("t.file_hold", {"dir": str(tmp_path)})
    second = app.submit("t.echo", {"value": 2})
    runner = runner_cls(app, workers=1, backlog=1).__enter__()
    f1 = runner.submit(first)
    wait_for(lambda: started(tmp_path))
    f2 = runner.submit(second)
    import threading

    closer = threading.Thread(target=runner.__exit__, args=(None, None, None))
    closer.start()
    wait_for(f2.cancelled)
    wait_for(lambda: app.query(second).state is State.CANCELLED)
    assert app.query(second).cancel_reason.value == "shutdown"
    assert not f1.done() and closer.is_alive()
    release(tmp_path)
    closer.join(15)
    assert not closer.is_alive()
    assert app.query(first).state is State.SUCCEEDED


@pytest.mark.parametrize("how", ["unreadable", "huge"])
def test_an_awkward_exception_ends_its_task_failed_on_every_runner(app, runner_cls, how):
    """An exception whose `__str__` raises used to escape the runner and leave its task
    `running` until the lease ran out (then `outcome_unknown`, though the task had
    plainly raised); a megabyte message was stored whole, in every snapshot of it."""
    task = "t.async_awkward" if runner_cls is AsyncTaskRunner else "t.awkward"
    task_id = app.submit(task, {"how": how})
    with runner_cls(app, workers=1) as runner:
        runner.submit(task_id).result(timeout=30)
    fresh = make_app(app.db)  # read from a new connection
    snap = fresh.query(task_id)
    fresh.close()
    assert snap.state is State.FAILED and snap.error.code == "task_error"
    if how == "unreadable":
        assert snap.error.message == "Unreadable (its message could not be read: ZeroDivisionError)"
    else:
        assert snap.error.message.startswith("RuntimeError: mmm")
        assert snap.error.message.endswith("… [983,630 more characters not kept]")
        assert len(snap.error.message) < 17_000


@pytest.mark.parametrize("how", ["exit", "interrupt", "other"])
def test_a_task_raising_an_exit_ends_alone_and_the_runner_goes_on(app, runner_cls, how):
    """`sys.exit()`, `KeyboardInterrupt` or a BaseException of the task's own, raised in
    a task body. On a runner's threads and loop only the task can raise them: its
    task ends `failed/task_error` at once and the next task runs (before, the async
    runner's loop died with every task on it, and the thread runner left the task
    `running` for its lease). A process runner's child runs the body in its main
    thread, where an exit or Ctrl-C (which reaches the whole process group) stops the
    child: the parent cannot tell the two apart, so the task is `outcome_unknown` at once."""
    is_async = runner_cls is AsyncTaskRunner
    task_id = app.submit("t.async_awkward" if is_async else "t.awkward", {"how": how})
    after = app.submit("t.async_echo" if is_async else "t.echo", {"value": "after"})
    with runner_cls(app, workers=1) as runner:
        runner.submit(task_id).result(timeout=30)
        assert runner.submit(after).result(timeout=30).state is State.SUCCEEDED
    fresh = make_app(app.db)  # read from a new connection
    snap = fresh.query(task_id)
    fresh.close()
    assert snap.state is State.FAILED
    if runner_cls is ProcessTaskRunner and how != "other":
        assert snap.error.code == "outcome_unknown"
    else:
        name = {"exit": "SystemExit: 3", "interrupt": "KeyboardInterrupt"}.get(how)
        assert snap.error.code == "task_error"
        assert snap.error.message == (name or "NotAnError: other")


def test_an_exit_in_a_task_run_in_the_main_thread_stops_the_caller(app):
    """`app.run` in the main thread: an exit (or Ctrl-C) is the caller's process
    stopping, not the task ending — raised again, the task is its lease's."""
    task_id = app.submit("t.awkward", {"how": "exit"})
    with pytest.raises(SystemExit):
        app.run(task_id)
    assert app.query(task_id).state is State.RUNNING


# ---- process runner --------------------------------------------------------------------


def test_process_cooperative_cancel_at_next_checkpoint(app, tmp_path):
    tid = app.submit("t.file_hold_checkpoint", {"dir": str(tmp_path)})
    with ProcessTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        wait_for(lambda: started(tmp_path))
        assert app.cancel(tid).request_accepted
        snap = fut.result(timeout=10)
        assert runner.terminated == 0
    assert snap.state is State.CANCELLED and snap.cancel_reason.value == "user"


def test_process_that_never_checkpoints_is_terminated_and_replaced(store_url, tmp_path):
    app = make_app(store_url, process_grace=0.5)
    spin_dir = tmp_path / "spin"
    spin_dir.mkdir()
    tid = app.submit("t.spin", {"dir": str(spin_dir)})
    other = app.submit("t.echo", {"value": "still serving"})
    with ProcessTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        wait_for(lambda: started(spin_dir))
        app.cancel(tid)
        snap = fut.result(timeout=15)
        assert snap.state is State.FAILED and snap.error.code == "terminated"
        assert runner.terminated == 1
        assert runner.submit(other).result(timeout=15).result == "still serving"
    app.close()


def test_process_child_sigkilled_from_outside_is_resolved_honestly(app, tmp_path):
    tid = app.submit("t.pid", {"dir": str(tmp_path)})
    after = app.submit("t.echo", {"value": 1})
    with ProcessTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        pid = int(wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text()))
        os.kill(pid, signal.SIGKILL)
        snap = fut.result(timeout=15)
        assert snap.state is State.FAILED and snap.error.code == "outcome_unknown"
        assert runner.submit(after).result(timeout=15).state is State.SUCCEEDED


def test_process_runner_heartbeats_while_the_child_runs(store_url, tmp_path):
    app = make_app(store_url, lease=1.0)
    tid = app.submit("t.file_hold", {"dir": str(tmp_path)})
    with ProcessTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        wait_for(lambda: started(tmp_path))
        time.sleep(2.5)  # longer than the lease: only heartbeats keep it
        release(tmp_path)
        assert fut.result(timeout=10).state is State.SUCCEEDED
    assert app.store.counters()["expired_leases"] == 0
    app.close()


def test_process_runner_in_a_worker(app):
    ids = [app.submit("wordfreq", {"text": f"w{i} x"}) for i in range(6)]
    with app.worker(runner="process", concurrency=2):
        wait_for(lambda: all(app.query(t).state is State.SUCCEEDED for t in ids), timeout=30)


# ---- asyncio runner --------------------------------------------------------------------


def test_async_cancel_ends_cancelled_not_failed(app, tmp_path):
    tid = app.submit("t.async_swallow", {"dir": str(tmp_path)})
    with store_calls_on_the_loop(app) as on_loop, AsyncTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        wait_for(lambda: started(tmp_path))
        assert runner.cancel(fut).request_accepted
        snap = fut.result(timeout=10)
        assert not on_loop, on_loop[0]  # every store call of the flow went to a thread
        assert runner.max_loop_lag < 2.0  # nor did anything else hold the loop for long
    assert snap.state is State.CANCELLED and snap.error is None
    # `except Exception` in the task did not catch the cancellation (it would have
    # returned, and a return under cancel_requested is recorded `cancelled` too)
    assert not (tmp_path / "swallowed").exists()


def test_async_cancel_closes_the_upstream_generator_first(app, tmp_path):
    tid = app.submit("t.async_upstream", {"dir": str(tmp_path)})
    with store_calls_on_the_loop(app) as on_loop, AsyncTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        wait_for(lambda: started(tmp_path))
        app.cancel(tid)
        snap = fut.result(timeout=10)
        # the terminal state is committed after the task's frames unwound: by then the
        # upstream's finally has run (aclosing), not at some later garbage collection
        assert (tmp_path / "log").read_text() == "upstream closed\n"
        assert not on_loop, on_loop[0]
        assert runner.max_loop_lag < 2.0
    assert snap.state is State.CANCELLED
    assert "".join(e.data["text"] for e in app.events(tid) if e.type == "chunk") == "first chunk"


def test_async_terminal_write_past_its_deadline_leaves_the_task_recoverable(store_url, tmp_path):
    app = make_app(store_url, lease=1.0, finalization=0.3)
    tid = app.submit("t.async_sleep", {"dir": str(tmp_path)})
    with AsyncTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        wait_for(lambda: started(tmp_path))
        app.store.faults.arm("finish", delay=2.5)  # the write hangs, then fails
        app.cancel(tid)
        t0 = time.monotonic()
        snap = fut.result(timeout=10)
        # bounded by the finalization deadline (0.3 s), not by the write (2.5 s); the
        # margin between the two is a loaded machine's, not the deadline's
        assert time.monotonic() - t0 < 1.8
    assert snap.state is State.CANCEL_REQUESTED  # no fake state
    # heartbeats stopped: the lease runs out and the reaper settles it
    wait_for(lambda: app.store.expire(app.settings.backoff) == [tid], timeout=10)
    final = app.query(tid)
    assert final.state is State.FAILED and final.error.code == "outcome_unknown"
    assert app.store.counters()["terminal_write_failures"] >= 1
    app.close()


def test_async_tasks_run_on_the_async_runner_in_a_worker(app):
    ids = [app.submit("t.async_echo", {"value": i}) for i in range(5)]
    with app.worker(runner="async", concurrency=3):
        wait_for(lambda: all(app.query(t).state is State.SUCCEEDED for t in ids))
    assert [app.query(t).result for t in ids] == list(range(5))


def test_async_task_runs_through_app_run_too(app):
    snap = app.run(app.submit("t.async_echo", {"value": "x"}))
    assert snap.state is State.SUCCEEDED and snap.result == "x"


def test_settings_grace_defaults():
    assert Settings().process_grace == 5.0 and Settings().finalization == 5.0
