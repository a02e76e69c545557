"""The servers' group commit of submits: concurrent submits share a transaction, each
caller gets its own answer, and one bad submit never fails the others."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tasklab.edges.submits import SubmitBatcher
from tasklab.errors import IdempotencyConflict, UnknownTask
from tests.conftest import make_app


def _batcher(app: Any, sizes: list[int]) -> SubmitBatcher:
    async def db(fn: Any, *args: Any) -> Any:
        sizes.append(len(args[0]))
        return await asyncio.to_thread(fn, *args)

    return SubmitBatcher(app, db)


def test_concurrent_submits_share_one_commit(app, store_url):
    sizes: list[int] = []
    batcher = _batcher(app, sizes)

    async def main() -> list[Any]:
        return await asyncio.gather(*[batcher.submit("t.echo", {"value": i}) for i in range(40)])

    results = asyncio.run(main())
    assert sizes == [40]
    assert [created for _, created in results] == [True] * 40
    ids = [snap.id for snap, _ in results]
    assert len(set(ids)) == 40
    other = make_app(store_url)  # verified from a new connection
    try:
        for i, task_id in enumerate(ids):
            snap = other.query(task_id)
            assert (snap.state.value, snap.payload) == ("queued", {"value": i})
    finally:
        other.close()


def test_one_bad_submit_does_not_fail_the_batch(app, store_url):
    sizes: list[int] = []
    batcher = _batcher(app, sizes)

    async def main() -> list[Any]:
        return await asyncio.gather(
            batcher.submit("t.echo", {"value": 1}, "k"),
            batcher.submit("t.echo", {"value": 1}, "k"),  # the same key, same payload
            batcher.submit("t.echo", {"value": 2}, "k"),  # the same key, another payload
            batcher.submit("no.such.task", {}),
            batcher.submit("t.echo", {"value": 3}),
            return_exceptions=True,
        )

    first, again, conflict, unknown, plain = asyncio.run(main())
    assert first[1] is True and again[1] is False and again[0].id == first[0].id
    assert isinstance(conflict, IdempotencyConflict)
    assert isinstance(unknown, UnknownTask)
    assert plain[0].payload == {"value": 3}
    assert app.counts()["queued"] == 2  # one per key, one plain: nothing else stored


def test_a_caller_that_goes_away_leaves_its_task_committed(app):
    batcher = _batcher(app, [])

    async def main() -> None:
        waiter = asyncio.create_task(batcher.submit("t.echo", {"value": 1}))
        await asyncio.sleep(0)  # queued for the writer
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        while batcher._writer is not None:
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert app.counts()["queued"] == 1  # answered or not, a started submit is committed


def test_a_batch_whose_answer_was_lost_is_not_inserted_again(app, store_url):
    """The batch committed and its answer was lost: retrying its submits one at a time
    would insert every task twice. Each caller hears the loss instead."""
    from tasklab.errors import SessionLost

    sizes: list[int] = []
    batcher = _batcher(app, sizes)
    app.store.faults.arm("submit_answer")

    async def main() -> list[Any]:
        return await asyncio.gather(
            *[batcher.submit("t.echo", {"value": i}) for i in range(10)], return_exceptions=True
        )

    results = asyncio.run(main())
    assert sizes == [10]
    assert all(isinstance(r, SessionLost) for r in results)
    other = make_app(store_url)  # verified from a new connection
    try:
        assert other.counts()["queued"] == 10
    finally:
        other.close()


# ---- threads calling app.submit at once (tasklab/submitter.py) ----------------------


def _threads_submitting(app: Any, n: int, payload_of: Any) -> list[Any]:
    """n threads call `app.submit_ex` at the same moment; each one's answer or error."""
    import threading

    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        try:
            out[i] = app.submit_ex("t.echo", *payload_of(i))
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def _slow_first_submit(app: Any, monkeypatch: Any, sizes: list[int]) -> None:
    """The first transaction takes 100 ms: the other callers arrive meanwhile (the
    group commit writes through `submissions`, `submit` whose snapshots are lazy)."""
    import time

    store, real = app.store, app.store.submissions

    def counted(items: Any) -> Any:
        sizes.append(len(items))
        if len(sizes) == 1:
            time.sleep(0.1)
        return real(items)

    monkeypatch.setattr(store, "submissions", counted)


def test_threads_calling_submit_at_once_share_commits(app, store_url, monkeypatch):
    """32 request threads: a handful of transactions, not 32; each caller hears of
    its task only after the commit that holds it (read back from a new connection
    the moment submit returns)."""
    sizes: list[int] = []
    _slow_first_submit(app, monkeypatch, sizes)
    other = make_app(store_url)
    seen: list[str] = []
    try:
        real_submit_ex = app.submit_ex

        def submit_and_check(*args: Any, **kw: Any) -> Any:
            snap, created = real_submit_ex(*args, **kw)
            seen.append(other.query(snap.id).state.value)  # committed already
            return snap, created

        monkeypatch.setattr(app, "submit_ex", submit_and_check)
        results = _threads_submitting(app, 32, lambda i: ({"value": i},))
    finally:
        other.close()
    assert all(isinstance(r, tuple) and r[1] for r in results), results
    assert len({snap.id for snap, _ in results}) == 32
    assert sum(sizes) == 32 and len(sizes) < 8 and max(sizes) > 1, sizes
    assert seen == ["queued"] * 32


def test_one_bad_submit_among_threads_fails_alone(app, monkeypatch):
    """A batch with an idempotency conflict in it is written again one by one: only
    the conflicting caller gets the error, the others their tasks, the key's owner
    its own task back."""
    owner = app.submit("t.echo", {"value": "mine"}, idempotency_key="k")
    sizes: list[int] = []
    _slow_first_submit(app, monkeypatch, sizes)

    def payload_of(i: int) -> tuple[Any, ...]:
        if i == 5:
            return ({"value": "other"}, "k")  # same key, different payload
        if i == 6:
            return ({"value": "mine"}, "k")  # same key, same payload: the owner's task
        return ({"value": i},)

    results = _threads_submitting(app, 16, payload_of)
    assert isinstance(results[5], IdempotencyConflict)
    assert results[6][0].id == owner and results[6][1] is False
    rest = [r for i, r in enumerate(results) if i not in (5, 6)]
    assert all(isinstance(r, tuple) and r[1] for r in rest)
    assert max(sizes) > 1  # it was a shared batch before it was split
