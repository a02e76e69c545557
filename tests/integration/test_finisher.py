"""Group commit of terminal writes: tasks that share a commit share its fate only when
the database fails them all, never because one of them could not be written."""

from __future__ import annotations

import threading
import time

from tasklab.core.models import NewTask, Outcome
from tasklab.core.states import State
from tasklab.errors import StoreError
from tasklab.finisher import Finisher
from tasklab.store import open_store


def test_a_failed_group_commit_is_retried_one_by_one(store_url):
    store, reader = open_store(store_url), open_store(store_url)
    try:
        store.submit([NewTask("t.echo", {"value": i}, 1, False) for i in range(4)])
        claims = store.claim(["t.echo"], 4, "w1", 30.0)
        finisher = Finisher(store)
        # the first write hangs while three more queue up behind it, then both the
        # first write and the group commit of the other three fail once each
        store.faults.arm("finish", times=2, delay=0.4)
        results: dict[str, object] = {}

        def finish(claim):
            try:
                results[claim.task_id] = finisher.finish(claim, Outcome.returned(1), [])
            except StoreError as exc:
                results[claim.task_id] = exc

        first = threading.Thread(target=finish, args=(claims[0],))
        first.start()
        time.sleep(0.1)
        rest = [threading.Thread(target=finish, args=(c,)) for c in claims[1:]]
        for t in rest:
            t.start()
        for t in [first, *rest]:
            t.join(10)
        assert isinstance(results[claims[0].task_id], StoreError)  # alone: nothing to retry
        assert [results[c.task_id] for c in claims[1:]] == [State.SUCCEEDED] * 3
        assert reader.get(claims[0].task_id).state is State.RUNNING  # left to its lease
        assert [reader.get(c.task_id).state for c in claims[1:]] == [State.SUCCEEDED] * 3
        assert all(reader.outbox_for(c.task_id) for c in claims[1:])
    finally:
        store.close()
        reader.close()
