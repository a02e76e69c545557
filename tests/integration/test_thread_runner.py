"""Seed 001's whole timeline on the thread runner: the bound, the two facts of a
cancel, and a shutdown that leaves no runner thread behind."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tasklab import QueueFull, State, ThreadTaskRunner
from tasklab.runners.thread import THREAD_PREFIX
from tests.conftest import wait_for
from tests.helpers.sample_tasks import latch, started

TEXT = "the quick brown fox jumps over the lazy dog the end"


def runner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def test_seed_001_timeline(app):
    name = uuid.uuid4().hex
    first = app.submit("t.hold", {"name": name})
    second = app.submit("wordfreq", {"text": TEXT})
    third = app.submit("wordfreq", {"text": TEXT})
    with ThreadTaskRunner(app, workers=1, backlog=1) as runner:
        f1 = runner.submit(first)
        assert started(name).wait(5)
        f2 = runner.submit(second)
        with pytest.raises(QueueFull, match="queue is full") as err:
            runner.submit(third)
        assert isinstance(err.value, BufferError)
        assert app.query(third).state is State.QUEUED  # rejected, still queued

        out2 = runner.cancel(f2)
        assert (out2.future_cancelled, out2.request_accepted) == (True, True)
        assert app.query(second).state is State.CANCELLED

        out1 = runner.cancel(f1)
        assert (out1.future_cancelled, out1.request_accepted) == (False, True)
        assert app.query(first).state is State.CANCEL_REQUESTED
        assert not f1.done()  # still running until the latch is released
        latch(name).set()
        f1.result(timeout=5)
        snap = app.query(first)
        assert snap.state is State.CANCELLED and snap.result is None

        # the rejected task, submitted again later, succeeds with the same result
        f3 = runner.submit(third)
        assert f3.result(timeout=5).state is State.SUCCEEDED
    expected = app.submit("wordfreq", {"text": TEXT})
    app.run(expected)
    assert app.query(third).result == app.query(expected).result
    assert app.query(third).result["top"][0] == ["the", 3]
    assert runner_threads() == []


def test_shutdown_from_another_thread_while_a_worker_waits(app):
    name = uuid.uuid4().hex
    running = app.submit("t.hold", {"name": name})
    waiting = app.submit("t.echo", {"value": 1})
    runner = ThreadTaskRunner(app, workers=1, backlog=1).__enter__()
    f_run = runner.submit(running)
    assert started(name).wait(5)
    f_wait = runner.submit(waiting)
    closer = threading.Thread(target=runner.__exit__, args=(None, None, None))
    closer.start()
    wait_for(f_wait.cancelled)
    assert not f_run.done()
    assert closer.is_alive()  # shutdown waits for the running unit of work
    # the done-callback records the task right after the future is cancelled
    wait_for(lambda: app.query(waiting).state is State.CANCELLED)
    assert app.query(waiting).cancel_reason.value == "shutdown"
    latch(name).set()
    closer.join(5)
    assert not closer.is_alive()
    assert f_run.result().state is State.SUCCEEDED
    assert runner_threads() == []


def test_submit_after_shutdown_is_refused(app):
    from tasklab import ShuttingDown

    tid = app.submit("t.echo", {"value": 1})
    with ThreadTaskRunner(app, workers=1) as runner:
        assert runner.free_slots == 1
    with pytest.raises(ShuttingDown):
        runner.submit(tid)
    assert app.query(tid).state is State.QUEUED


def test_a_process_that_never_shuts_its_runner_down_still_exits(tmp_path):
    """The pool's threads are not daemons (a running task finishes, as a
    ThreadPoolExecutor's would): at the interpreter's exit its idle ones end, and
    the process exits once its running task has returned."""
    import subprocess
    import sys

    script = f"""
import time
from tasklab import TaskApp, ThreadTaskRunner
app = TaskApp("sqlite:///{tmp_path / "exit.db"}")

@app.task(name="t.nap")
def nap(ctx):
    time.sleep(0.5)
    open("{tmp_path / "done"}", "w").write("yes")

runner = ThreadTaskRunner(app, workers=2).__enter__()
runner.submit(app.submit("t.nap", {{}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], timeout=30, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "done").read_text() == "yes"  # it ran to its end before the exit


def test_claims_ahead_wait_in_line_without_a_thread_each(app):
    """A default worker claims up to CLAIMS_AHEAD (128) beyond its slots while tasks are
    short, but its pool starts at most AHEAD_THREADS (32) threads beyond them: claims
    ahead wait in the pool's line, not in threads of their own (a pool starts a thread
    only for a turn no idle thread takes, so a drain of short tasks needs few)."""
    from tasklab.runners.thread import AHEAD_THREADS
    from tasklab.service.worker import CLAIMS_AHEAD

    assert CLAIMS_AHEAD > AHEAD_THREADS  # else this test proves nothing
    ids = app.submit_many("t.echo", [{"value": i} for i in range(3000)])
    seen = 0
    w = app.worker(concurrency=2).start()
    try:
        assert w.runner.ahead == CLAIMS_AHEAD
        assert w.runner._pool._max_threads == 2 + AHEAD_THREADS
        while app.counts()["succeeded"] < len(ids):
            seen = max(seen, len(runner_threads()))
            time.sleep(0.002)  # a look, not a second busy thread beside the worker's
    finally:
        w.stop()
    assert 2 <= seen <= 2 + AHEAD_THREADS, seen
    assert all(app.query(i).state is State.SUCCEEDED for i in ids[-10:])
