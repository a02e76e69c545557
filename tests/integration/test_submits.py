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
