"""Cancellation is not an error, errors are not cancellations, and what was committed
stays committed."""

from __future__ import annotations

import uuid

import pytest

from tasklab import State, ThreadTaskRunner
from tests.conftest import wait_for
from tests.helpers import sample_tasks
from tests.helpers.sample_tasks import started


def test_exception_is_failed_task_error(app):
    tid = app.submit("t.boom", {"message": "kaput"})
    snap = app.run(tid)
    assert snap.state is State.FAILED
    assert snap.error.code == "task_error" and "kaput" in snap.error.message
    assert app.store.outbox_for(tid) is not None


def test_catching_exception_around_checkpoint_does_not_swallow_cancel(app):
    name = uuid.uuid4().hex
    tid = app.submit("t.swallow", {"name": name})
    with ThreadTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        assert started(name).wait(5)
        assert app.cancel(tid).request_accepted
        snap = fut.result(timeout=10)
    assert snap.state is State.CANCELLED and snap.result is None
    assert snap.cancel_reason.value == "user"
    # the task did not go on: if `except Exception` had caught Cancelled, it would have
    # looped on and returned — and a return under cancel_requested is `cancelled` too
    assert sample_tasks.swallowed.get(name, 0) == 0


def test_cancel_after_success_is_not_accepted(app):
    tid = app.submit("t.echo", {"value": {"x": 1}})
    assert app.run(tid).state is State.SUCCEEDED
    out = app.cancel(tid)
    assert out.request_accepted is False and out.state is State.SUCCEEDED
    assert app.query(tid).result == {"x": 1}


def test_result_that_is_not_json_fails_invalid_result(app):
    snap = app.run(app.submit("t.not_json", {}))
    assert snap.state is State.FAILED and snap.error.code == "invalid_result"


def test_retry_on_listed_exception_with_backoff(store_url):
    from tasklab import Settings
    from tasklab.core.policy import Backoff
    from tests.conftest import make_app

    app = make_app(store_url)
    app.settings = Settings(backoff=Backoff(base=0.05, jitter=0.0))
    tid = app.submit("t.flaky", {"fail_times": 2})
    with app.worker(concurrency=1):
        snap = wait_for(lambda: (s := app.query(tid)).terminal and s)
    assert snap.state is State.SUCCEEDED and snap.result == 3 and snap.attempt == 3
    attempts = [e.data["attempt"] for e in app.events(tid) if e.type == "attempt"]
    assert attempts == [1, 2, 3]
    tid2 = app.submit("t.flaky", {"fail_times": 5})
    with app.worker(concurrency=1):
        snap2 = wait_for(lambda: (s := app.query(tid2)).terminal and s)
    assert snap2.state is State.FAILED and snap2.attempt == 3
    assert snap2.error.code == "task_error"
    app.close()


def test_timeout_becomes_deadline_cancel(app):
    snap = app.run(app.submit("t.slow_deadline", {}))
    assert snap.state is State.CANCELLED
    assert snap.cancel_reason.value == "deadline"


def test_cancel_from_another_process_reaches_a_running_task(app, store_url):
    """A cancel written by another store object (as another process would) reaches the
    task through the change watcher / heartbeat reply."""
    from tasklab.store import open_store

    name = uuid.uuid4().hex
    tid = app.submit("t.hold_checkpoint", {"name": name})
    other = open_store(store_url)
    with ThreadTaskRunner(app, workers=1) as runner:
        fut = runner.submit(tid)
        assert started(name).wait(5)
        other.cancel(tid, __import__("tasklab").CancelReason.USER)
        snap = fut.result(timeout=5)
    assert snap.state is State.CANCELLED
    other.close()


def test_stream_chunks_concatenate_to_the_streamed_text(app):
    parts = [f"tok{i} " for i in range(300)]
    tid = app.submit("t.stream", {"parts": parts, "pause": 0.001})
    snap = app.run(tid)
    chunks = [e for e in app.events(tid) if e.type == "chunk"]
    assert "".join(e.data["text"] for e in chunks) == "".join(parts) == snap.result
    assert 1 < len(chunks) < len(parts)  # coalesced, not one write per token


def test_stream_text_builtin(app):
    text = "one two  three\nfour"
    tid = app.submit("stream_text", {"text": text, "tokens_per_second": 1000})
    snap = app.run(tid)
    streamed = "".join(e.data["text"] for e in app.events(tid) if e.type == "chunk")
    assert streamed == text == snap.result


def test_effects_tell_a_retry_what_happened(store_url):
    from tasklab import Settings
    from tasklab.core.policy import Backoff
    from tests.conftest import make_app

    app = make_app(store_url)
    app.settings = Settings(backoff=Backoff(base=0.01, jitter=0.0))
    tid = app.submit("t.effect", {"fail_after_effect": 1})
    with app.worker(concurrency=1):
        snap = wait_for(lambda: (s := app.query(tid)).terminal and s)
    assert snap.state is State.SUCCEEDED
    assert snap.result == {"charge": {"charged_on_attempt": 1}, "previous": "done", "attempt": 2}
    app.close()


def test_transactional_task_runs_in_one_transaction(app):
    tid = app.submit("t.tx", {"value": 21})
    snap = app.run(tid)
    assert snap.state is State.SUCCEEDED and snap.result == 42
    assert [e.type for e in app.events(tid)] == ["attempt", "progress"]


def test_worker_runs_transactional_tasks(app):
    ids = [app.submit("t.tx", {"value": i}) for i in range(5)]
    with app.worker(concurrency=2):
        wait_for(lambda: all(app.query(t).state is State.SUCCEEDED for t in ids))
    assert [app.query(t).result for t in ids] == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("kind", ["nan", "set", "surrogate"])
def test_progress_data_that_is_not_json_fails_its_task_and_stores_nothing_of_it(app, kind):
    snap = app.run(app.submit("t.bad_emit", {"kind": kind}))
    assert snap.state is State.FAILED and snap.error.code == "task_error"
    progress = [e.data for e in app.events(snap.id) if e.type == "progress"]
    assert progress == [{"good": True}]  # the good one stands, the bad one is not stored
