"""Typed task handles (issue 17) on both stores and all three runners: submit by
calling the task, `result()` for a success, a failure, a cancel and a timeout (sync and
async), `follow()` live to the end, `app.handle()` for an existing id, and
`tasklab.testing.run` in-process on the memory store."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import tasklab.testing
from tasklab import TaskApp, TaskCancelled, TaskFailed
from tests.conftest import make_app
from tests.helpers.sample_tasks import latch, started

RUNNERS = ["thread", "process", "async"]


def _typed(app: TaskApp) -> Any:
    @app.task(name="h.double")
    def double(ctx: Any, n: int, label: str = "x") -> dict[str, Any]:
        if ctx is not None:  # called as the plain function in a test: no context
            ctx.emit({"step": "half"})
        return {"n": n * 2, "label": label}

    @app.task(name="h.fail")
    def fail(ctx: Any) -> None:
        raise ValueError("nope")

    return double, fail


def test_submit_by_calling_the_task_and_wait_for_the_result(app):
    double, fail = _typed(app)
    handle = double.submit(21, label="y")
    assert handle.snapshot().payload == {"n": 21, "label": "y"}
    with app.worker(concurrency=2):
        assert handle.result(timeout=20) == {"n": 42, "label": "y"}
        failed = fail.submit()
        with pytest.raises(TaskFailed) as err:
            failed.result(timeout=20)
        assert err.value.snapshot.error.code == "task_error"
        assert "nope" in str(err.value)
    assert app.handle(handle.id).result(timeout=0) == {"n": 42, "label": "y"}
    assert double(None, 2) == {"n": 4, "label": "x"}  # still the plain function


def test_options_keep_apart_from_the_functions_parameters(app):
    double, _ = _typed(app)
    handle = double.options(queue="mail", priority=5, idempotency_key="k1").submit(1)
    again = double.options(idempotency_key="k1").submit(1)
    assert again.id == handle.id
    snap = handle.snapshot()
    assert (snap.queue, snap.priority, snap.idempotency_key) == ("mail", 5, "k1")
    many = double.submit_many([double.call(1), double.call(2, label="z")])
    assert [h.snapshot().payload for h in many] == [{"n": 1}, {"n": 2, "label": "z"}]
    with pytest.raises(TypeError):
        double.submit(1, 2, 3)  # does not fit the function: nothing stored
    assert app.counts()["queued"] == 3


def test_a_timeout_leaves_the_task_going_and_cancel_is_told(app):
    name = uuid.uuid4().hex
    handle = app.handle(app.submit("t.hold", {"name": name}))
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.2)  # nothing runs it yet
    with app.worker(concurrency=1):
        assert started(name).wait(10)
        assert handle.cancel() is True
        latch(name).set()
        with pytest.raises(TaskCancelled):
            handle.result(timeout=20)


@pytest.mark.parametrize("runner", RUNNERS)
def test_result_and_follow_on_every_runner(store_url, runner):
    app = make_app(store_url)
    try:
        handle = app.handle(app.submit("t.stream", {"parts": ["a", "b", "c"]}))
        failed = app.handle(app.submit("t.boom", {"message": "kaput"}))
        with app.worker(runner=runner, concurrency=2):
            events = list(handle.follow())
            assert handle.result(timeout=30) == "abc"
            with pytest.raises(TaskFailed, match="kaput"):
                failed.result(timeout=30)
        chunks = "".join(e.data["text"] for e in events if e.type == "chunk")
        assert chunks == "abc"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gapless
        assert [e.seq for e in handle.follow(after=2)] == [e.seq for e in events[2:]]
    finally:
        app.close()


def test_async_variants(app):
    double, fail = _typed(app)

    async def main() -> tuple[Any, list[str], str]:
        handle = double.submit(5)
        seen = [e.type async for e in handle.follow_async()]
        value = await handle.result_async(timeout=20)
        try:
            await fail.submit().result_async(timeout=20)
        except TaskFailed as exc:
            return value, seen, str(exc)
        return value, seen, ""

    with app.worker(concurrency=2):
        value, seen, error = asyncio.run(main())
    assert value == {"n": 10, "label": "x"}
    assert seen[0] == "attempt" and "progress" in seen
    assert "nope" in error


def test_testing_run_on_the_memory_store():
    app = TaskApp("sqlite:///:memory:")
    try:
        double, fail = _typed(app)
        assert tasklab.testing.run(double.submit(4)) == {"n": 8, "label": "x"}
        with pytest.raises(TaskFailed):
            tasklab.testing.run(fail.submit())
        later = double.options(delay=3600).submit(1)
        with pytest.raises(TimeoutError):
            tasklab.testing.run(later)  # not runnable yet: it says so, it does not hang
    finally:
        app.close()


def test_follow_across_a_workers_sigkill_and_the_retry(store_url, tmp_path):
    """A real worker process runs attempt 1 and is SIGKILLed; another worker reaps the
    lease and runs attempt 2. One follow() sees it all: gapless, both attempts' events
    in order, the lease's expiry between them, to the end."""
    import signal
    import threading

    from tests.acceptance.test_limits import spawn, stop
    from tests.conftest import wait_for

    app = make_app(store_url)
    handle = app.handle(app.submit("t.progress_then_hold", {"dir": str(tmp_path)}))
    seen: list[Any] = []
    follower = threading.Thread(target=lambda: seen.extend(handle.follow()))
    follower.start()
    first = spawn(store_url, concurrency=1, lease=1.0)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), 20)
        wait_for(lambda: len([e for e in handle.events() if e.type == "progress"]) == 3, 10)
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -9
        first.stderr.close()  # type: ignore[union-attr]
        second = spawn(store_url, concurrency=1, lease=1.0)
        try:
            assert handle.result(timeout=30) == "done"
        finally:
            assert stop([second]) == [0]
        follower.join(30)
        assert not follower.is_alive()
    finally:
        app.close()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))  # gapless
    kinds = [(e.type, e.attempt) for e in seen]
    assert kinds[0] == ("attempt", 1) and ("lease_expired", 1) in kinds
    assert kinds.index(("lease_expired", 1)) < kinds.index(("attempt", 2))
    progress = [(e.data["attempt"], e.data["i"]) for e in seen if e.type == "progress"]
    assert progress == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
