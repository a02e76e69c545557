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


def finish_behind_a_held_first(store, claims, faults: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Finish every claim, each from a thread of its own: the first write hangs in an
    armed fault (0.4 s, `faults` fire in all) until the others have queued behind it,
    so that they go to the database as one group commit. What each got, by task id."""
    finisher = Finisher(store)
    store.faults.arm("finish", times=faults, delay=0.4)
    results: dict[str, object] = {}

    def finish(claim):  # type: ignore[no-untyped-def]
        try:
            results[claim.task_id] = finisher.finish(claim, Outcome.returned(1), [])
        except StoreError as exc:
            results[claim.task_id] = exc

    first = threading.Thread(target=finish, args=(claims[0],))
    first.start()
    # the first write is inside its (hanging) fault before the others come
    deadline = time.monotonic() + 10
    while store.faults.fired.get("finish") != 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    rest = [threading.Thread(target=finish, args=(c,)) for c in claims[1:]]
    for t in rest:
        t.start()
    for t in [first, *rest]:
        t.join(10)
    return results


def test_a_failed_group_commit_is_retried_one_by_one(store_url):
    store, reader = open_store(store_url), open_store(store_url)
    try:
        store.submit([NewTask("t.echo", {"value": i}, 1, False) for i in range(4)])
        claims = store.claim(["t.echo"], 4, "w1", 30.0)
        # the first write hangs while three more queue up behind it, then both the
        # first write and the group commit of the other three fail once each
        results = finish_behind_a_held_first(store, claims, faults=2)
        assert isinstance(results[claims[0].task_id], StoreError)  # alone: nothing to retry
        assert [results[c.task_id] for c in claims[1:]] == [State.SUCCEEDED] * 3
        assert reader.get(claims[0].task_id).state is State.RUNNING  # left to its lease
        assert [reader.get(c.task_id).state for c in claims[1:]] == [State.SUCCEEDED] * 3
        assert all(reader.outbox_for(c.task_id) for c in claims[1:])
    finally:
        store.close()
        reader.close()


def _refuse_success_of(store, task_id: str) -> None:  # type: ignore[no-untyped-def]
    """A write that can never commit: the database itself refuses this task's success
    (a trigger), on every try — not a transient fault."""
    if store.url.startswith("sqlite"):
        ddl = [
            "CREATE TRIGGER never_succeeds BEFORE UPDATE OF state ON tasks "
            f"WHEN NEW.id = '{task_id}' AND NEW.state = 'succeeded' "
            "BEGIN SELECT RAISE(ABORT, 'this task cannot succeed'); END"
        ]
    else:
        ddl = [
            "CREATE FUNCTION never_succeeds() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'this task cannot succeed'; END $$",
            "CREATE TRIGGER never_succeeds BEFORE UPDATE OF state ON tasks FOR EACH ROW "
            f"WHEN (NEW.id = '{task_id}' AND NEW.state = 'succeeded') "
            "EXECUTE FUNCTION never_succeeds()",
        ]
    with store._write() as conn:
        for stmt in ddl:
            conn.execute(stmt)


def test_a_write_that_can_never_commit_fails_only_itself(store_url):
    store, reader = open_store(store_url), open_store(store_url)
    try:
        store.submit([NewTask("t.echo", {"value": i}, 1, False) for i in range(4)])
        claims = store.claim(["t.echo"], 4, "w1", 30.0)
        doomed = claims[1]
        _refuse_success_of(store, doomed.task_id)
        # the first write is held (and fails once) so that the other three share one
        # group commit
        results = finish_behind_a_held_first(store, claims, faults=1)
        assert isinstance(results[doomed.task_id], StoreError)
        others = [c for c in claims[1:] if c is not doomed]
        assert [results[c.task_id] for c in others] == [State.SUCCEEDED] * 2
        # read from a new connection: the doomed task is left live for its lease, the
        # others that shared its group commit are written
        assert reader.get(doomed.task_id).state is State.RUNNING
        assert [reader.get(c.task_id).state for c in others] == [State.SUCCEEDED] * 2
    finally:
        store.close()
        reader.close()
