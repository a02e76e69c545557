"""The store contract, run unchanged on SQLite and PostgreSQL. Every check of a write
reads back through a *new* store object (a new connection), never the writer's."""

from __future__ import annotations

import threading
import time

import pytest

from tasklab.core.models import ClaimRequest, NewTask, Outcome
from tasklab.core.policy import Backoff
from tasklab.core.states import CancelReason, ErrorCode, State
from tasklab.errors import (
    IdempotencyConflict,
    InvalidPayload,
    LeaseLost,
    StoreError,
    TaskNotFound,
    WorkerAlive,
)
from tasklab.store import open_store

NAMES = ["t.echo"]


def new(payload=None, key=None, retry_safe=False, max_attempts=1):
    return NewTask("t.echo", payload or {"value": 1}, max_attempts, retry_safe, key)


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def reader(store_url):
    """A second store object: its own connections, as another process would have."""
    s = open_store(store_url)
    yield s
    s.close()


def claim_one(store, lease=5.0, owner="w1"):
    claims = store.claim(NAMES, 1, owner, lease)
    assert len(claims) == 1
    return claims[0]


def test_submit_and_get(store, reader):
    ((snap, created),) = store.submit([new({"value": 42})])
    assert created
    got = reader.get(snap.id)
    assert got.state is State.QUEUED and got.attempt == 0 and got.payload == {"value": 42}
    assert got.created_at.tzinfo is not None
    assert got.to_json()["created_at"].endswith("Z")


def test_unknown_id(store):
    with pytest.raises(TaskNotFound):
        store.get("nope")
    with pytest.raises(TaskNotFound):
        store.cancel("nope", CancelReason.USER)


def test_idempotency_same_returns_existing_different_conflicts(store, reader):
    ((a, created_a),) = store.submit([new({"value": 1}, key="k")])
    ((b, created_b),) = store.submit([new({"value": 1}, key="k")])
    assert created_a and not created_b and a.id == b.id
    with pytest.raises(IdempotencyConflict):
        store.submit([new({"value": 2}, key="k")])
    assert reader.counts()["queued"] == 1


def test_concurrent_submits_with_one_key_make_one_task(store_url):
    stores = [open_store(store_url) for _ in range(4)]
    ids: list[str] = []
    barrier = threading.Barrier(4)

    def go(s):
        barrier.wait()
        ids.append(s.submit([new({"value": 7}, key="same")])[0][0].id)

    threads = [threading.Thread(target=go, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    assert stores[0].counts()["queued"] == 1
    for s in stores:
        s.close()


def test_submit_many_is_one_transaction(store, reader):
    store.submit([new(key="dup", payload={"value": 1})])
    with pytest.raises(IdempotencyConflict):
        store.submit([new({"value": 5}), new(key="dup", payload={"value": 2})])
    assert reader.counts()["queued"] == 1  # the first item of the failed batch is gone too


def test_list_newest_first_with_keyset_cursor(store):
    ids = [s.id for s, _ in store.submit([new({"value": i}) for i in range(7)])]
    seen: list[str] = []
    cursor = None
    while True:
        page = store.page(None, 3, cursor)
        seen += [s.id for s in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == sorted(ids, reverse=True)
    claim_one(store)
    assert [s.state for s in store.page(State.RUNNING, 10, None).items] == [State.RUNNING]
    with pytest.raises(InvalidPayload):
        store.page(None, 3, "!!not-a-cursor!!")


def test_counts_has_every_state(store):
    counts = store.counts()
    assert set(counts) == {s.value for s in State}
    assert all(v == 0 for v in counts.values())


def exact_counts(store):
    """Tasks per state counted from the table itself, not from the kept counters."""
    with store._read() as conn:
        rows = store._all(conn, "count_states_exact")
    return {s.value: 0 for s in State} | {r["state"]: int(r["n"]) for r in rows}


def test_counts_are_kept_by_every_kind_of_state_change(store, reader, store_url):
    """counts() reads counters the state-changing transactions keep (not a scan):
    they agree with the table after submits one by one and in batches, claims, group
    commits with claims in them, retries, cancels of both kinds, releases, expiry,
    exclusive recovery and pruning, on a connection of another store object."""
    store.submit([new({"value": i}) for i in range(7)])  # one batch
    store.submit([new(key="k")])
    store.submit([new(key="k")])  # the idempotent answer inserts nothing
    assert reader.counts() == exact_counts(reader) and reader.counts()["queued"] == 8
    a, b, c, d = store.claim(NAMES, 4, "w1", 30.0)
    request = ClaimRequest(NAMES, 1, "w1", 30.0)
    _, more = store.finish_and_claim(
        [(a, Outcome.returned(1), []), (b, Outcome.retry(ErrorCode.TASK_ERROR, "x", 0), [])],
        request,
    )
    store.finish(c, Outcome.failed(ErrorCode.TASK_ERROR, "no"), [])
    store.cancel(d.task_id, CancelReason.USER)  # running: cancel_requested
    queued = store.queued_ids(NAMES, 1)[0]
    store.cancel(queued, CancelReason.USER)  # queued: cancelled
    store.release(more[0])
    short = store.claim(NAMES, 1, "w1", 0.05)
    time.sleep(0.1)
    store.expire(Backoff(base=0.0, jitter=0.0))
    assert reader.counts() == exact_counts(reader)
    store.recover_running(Backoff(base=0.0, jitter=0.0))
    assert short and reader.counts() == exact_counts(reader)
    time.sleep(0.01)  # past the last finish on SQLite's millisecond clock
    pruned = store.prune(store.now(), 1000)["tasks"]
    after = reader.counts()
    assert pruned > 0 and after == exact_counts(reader)
    assert after["succeeded"] + after["failed"] + after["cancelled"] == 0


def test_claim_sets_epoch_attempt_and_lease_from_db_clock(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store)
    assert (c.task_id, c.epoch, c.attempt) == (snap.id, 1, 1)
    got = reader.get(snap.id)
    assert got.state is State.RUNNING and got.lease_owner == "w1"
    assert got.lease_until > got.started_at
    assert store.claim(NAMES, 5, "w2", 5.0) == []  # nothing left to claim
    assert store.claim(["other.name"], 5, "w2", 5.0) == []


def test_claim_respects_limit_and_names(store):
    store.submit([new() for _ in range(5)])
    assert len(store.claim(NAMES, 3, "w", 5.0)) == 3
    assert len(store.claim(["t.other"], 3, "w", 5.0)) == 0
    assert len(store.claim(NAMES, 3, "w", 5.0)) == 2


def test_tasks_submitted_one_after_another_are_claimed_in_that_order(store):
    """FIFO for one submitter, also within one millisecond (ids count up there)."""
    singles = [store.submit([new({"value": i})])[0][0].id for i in range(30)]
    batch = [snap.id for snap, _ in store.submit([new({"value": i}) for i in range(30)])]
    claimed = [c.task_id for _ in range(60) for c in store.claim(NAMES, 1, "w", 5.0)]
    assert claimed == singles + batch


def test_cancel_queued_running_terminal(store, reader):
    (a, _), (b, _) = store.submit([new(), new()])
    out = store.cancel(a.id, CancelReason.USER)
    assert (out.request_accepted, out.state) == (True, State.CANCELLED)
    assert reader.get(a.id).cancel_reason is CancelReason.USER
    assert reader.outbox_for(a.id) is not None  # terminal → one notification
    c = claim_one(store)
    assert c.task_id == b.id
    out = store.cancel(b.id, CancelReason.USER)
    assert (out.request_accepted, out.state) == (True, State.CANCEL_REQUESTED)
    again = store.cancel(b.id, CancelReason.USER)  # accepted, changes nothing
    assert (again.request_accepted, again.state) == (True, State.CANCEL_REQUESTED)
    assert store.cancel(a.id, CancelReason.USER).request_accepted is False


def test_finish_success_stores_result_and_one_outbox_row(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store)
    assert (
        store.finish(
            c, Outcome.returned({"ok": 1}), [("progress", {"p": 1}), ("chunk", {"text": "hi"})]
        )
        is State.SUCCEEDED
    )
    got = reader.get(snap.id)
    assert got.state is State.SUCCEEDED and got.result == {"ok": 1}
    assert got.finished_at is not None and got.lease_owner is None
    assert [(e.seq, e.type, e.attempt) for e in reader.events(snap.id)] == [
        (1, "progress", 1),
        (2, "chunk", 1),
    ]
    assert reader.outbox_for(snap.id)["task_id"] == snap.id
    with pytest.raises(LeaseLost):  # a second terminal write has no authority
        store.finish(c, Outcome.returned({"ok": 2}), [])
    assert reader.get(snap.id).result == {"ok": 1}


def test_return_while_cancel_requested_ends_cancelled_without_result(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store)
    store.cancel(snap.id, CancelReason.USER)
    assert store.finish(c, Outcome.returned({"ok": 1}), []) is State.CANCELLED
    got = reader.get(snap.id)
    assert got.state is State.CANCELLED and got.result is None
    assert got.cancel_reason is CancelReason.USER


def test_old_worker_after_reassignment_is_fenced_out(store, reader):
    """docs/design.md §6: an old worker returning after its lease was reassigned has its state
    and event writes rejected; the new attempt's result stands."""
    ((snap, _),) = store.submit([new(retry_safe=True, max_attempts=3)])
    old = claim_one(store, lease=1.0, owner="old")
    store.append_events(old, [("progress", {"by": "old"})])
    time.sleep(1.2)
    assert store.expire(Backoff(base=0.0, jitter=0.0)) == [snap.id]
    new_claim = claim_one(store, owner="new")
    assert new_claim.epoch == old.epoch + 1 and new_claim.attempt == 2
    with pytest.raises(LeaseLost):
        store.append_events(old, [("progress", {"by": "old, late"})])
    with pytest.raises(LeaseLost):
        store.finish(old, Outcome.returned("old result"), [])
    assert store.heartbeat(old, 5.0) is None
    with pytest.raises(LeaseLost):
        store.effect_start(old, "charge")
    store.effect_start(new_claim, "charge")
    with pytest.raises(LeaseLost):  # the old claim cannot mark the new attempt's effect
        store.effect_done(old, "charge", {"by": "old"})
    assert reader.effect_get(snap.id, "charge").status == "started"
    assert store.finish(new_claim, Outcome.returned("new result"), []) is State.SUCCEEDED
    got = reader.get(snap.id)
    assert got.result == "new result"
    events = reader.events(snap.id)  # the old claim's, then the reaper's (the timeline's)
    assert [(e.type, e.data) for e in events] == [
        ("progress", {"by": "old"}),
        ("lease_expired", {"attempt": 1, "epoch": 1, "state": "queued"}),
    ]
    assert [e.seq for e in events] == [1, 2]
    assert reader.counters()["expired_leases"] == 1


def test_expired_lease_rejects_writes_even_before_reaping(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store, lease=1.0)
    store.effect_start(c, "charge")
    time.sleep(1.2)  # expired by the database clock; no reaper has run
    with pytest.raises(LeaseLost):
        store.append_events(c, [("progress", {"late": True})])
    with pytest.raises(LeaseLost):
        store.effect_done(c, "charge", {"late": True})
    with pytest.raises(LeaseLost):
        store.finish(c, Outcome.returned(1), [])
    assert store.heartbeat(c, 5.0) is None
    # nothing of it was written: still running (for the reaper), no event, effect open
    got = reader.get(snap.id)
    assert got.state is State.RUNNING and got.result is None
    assert reader.events(snap.id) == []
    assert reader.effect_get(snap.id, "charge").status == "started"


def test_heartbeat_extends_and_reports_cancel(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store, lease=1.0)
    for _ in range(3):
        time.sleep(0.4)
        assert store.heartbeat(c, 1.0) is State.RUNNING
    store.cancel(snap.id, CancelReason.USER)
    assert store.heartbeat(c, 1.0) is State.CANCEL_REQUESTED
    assert reader.get(snap.id).state is State.CANCEL_REQUESTED


def test_release_returns_claim_attempt_back_epoch_stays(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store)
    assert store.release(c)
    got = reader.get(snap.id)
    assert got.state is State.QUEUED and got.attempt == 0
    c2 = claim_one(store)
    assert c2.epoch == c.epoch + 1 and c2.attempt == 1
    with pytest.raises(LeaseLost):
        store.append_events(c, [("progress", 1)])


def test_release_owned_gives_back_exactly_one_claim_calls_running_claims(store, reader):
    ids = [snap.id for snap, _ in store.submit([new() for _ in range(4)])]
    lost = store.claim(NAMES, 2, "host:1:ab#7", 5.0)  # the call whose answer was lost
    kept = store.claim(NAMES, 1, "host:1:ab#8", 5.0)
    cancelled = store.claim(NAMES, 1, "host:1:ab#7", 5.0)[0]
    store.cancel(cancelled.task_id, CancelReason.USER)  # cancel_requested: not released
    assert sorted(store.release_owned("host:1:ab#7")) == sorted(c.task_id for c in lost)
    for c in lost:
        got = reader.get(c.task_id)
        assert got.state is State.QUEUED and got.attempt == 0
    assert reader.get(kept[0].task_id).state is State.RUNNING
    assert reader.get(cancelled.task_id).state is State.CANCEL_REQUESTED
    assert store.release_owned("host:1:ab#7") == []
    assert reader.counters()["lost_claims_released"] == 2  # counted in that transaction
    again = {c.task_id: c.epoch for c in store.claim(NAMES, 2, "w2", 5.0)}
    assert again == {c.task_id: c.epoch + 1 for c in lost}  # the epoch stays, then moves on
    assert len(ids) == 4


@pytest.mark.parametrize(
    ("retry_safe", "max_attempts", "cancel", "state", "code"),
    [
        (True, 3, False, State.QUEUED, "outcome_unknown"),
        (False, 3, False, State.FAILED, "outcome_unknown"),
        (True, 1, False, State.FAILED, "outcome_unknown"),
        (True, 3, True, State.FAILED, "outcome_unknown"),  # stop was asked: not requeued
    ],
)
def test_reaper_policy(store, reader, retry_safe, max_attempts, cancel, state, code):
    ((snap, _),) = store.submit([new(retry_safe=retry_safe, max_attempts=max_attempts)])
    claim_one(store, lease=1.0)
    if cancel:
        store.cancel(snap.id, CancelReason.USER)
    assert store.expire(Backoff()) == []  # not expired yet: nothing happens
    time.sleep(1.2)
    assert store.expire(Backoff(base=0.0, jitter=0.0)) == [snap.id]
    got = reader.get(snap.id)
    assert got.state is state and got.error.code == code
    assert (reader.outbox_for(snap.id) is not None) == state.terminal


def test_retry_backoff_delays_the_next_claim(store):
    store.submit([new(max_attempts=3)])
    c = claim_one(store)
    out = Outcome.retry(ErrorCode.TASK_ERROR, "flaky", delay=1.0)
    assert store.finish(c, out, []) is State.QUEUED
    assert store.claim(NAMES, 1, "w", 5.0) == []
    assert 0 < store.seconds_until_runnable(NAMES) <= 1.0
    time.sleep(1.1)
    assert claim_one(store).attempt == 2


def test_exclusive_recovery_refuses_while_an_executor_lives(store, store_url):
    other = open_store(store_url)
    ((snap, _),) = store.submit([new()])
    claim_one(store)
    with other.executor_presence(), pytest.raises(WorkerAlive):
        store.recover_running(Backoff())
    assert store.recover_running(Backoff()) == [snap.id]
    got = store.get(snap.id)
    assert got.state is State.FAILED and got.error.code == "outcome_unknown"
    other.close()


def test_faults_hook_fails_the_terminal_write_without_a_fake_state(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store, lease=1.0)
    store.faults.arm("finish")
    with pytest.raises(StoreError, match="injected"):
        store.finish(c, Outcome.returned("x"), [("progress", 1)])
    got = reader.get(snap.id)
    assert got.state is State.RUNNING and got.result is None
    assert reader.events(snap.id) == []  # rolled back with the terminal write
    assert reader.outbox_for(snap.id) is None
    time.sleep(1.2)
    reader.expire(Backoff())
    assert reader.get(snap.id).error.code == "outcome_unknown"


def test_effects_are_fenced_and_survive_attempts(store, reader):
    ((snap, _),) = store.submit([new(retry_safe=True, max_attempts=2)])
    c = claim_one(store)
    assert store.effect_get(snap.id, "charge").status == "none"
    store.effect_start(c, "charge")
    assert reader.effect_get(snap.id, "charge").status == "started"
    store.effect_done(c, "charge", {"receipt": 9})
    rec = reader.effect_get(snap.id, "charge")
    assert (rec.status, rec.result, rec.attempt) == ("done", {"receipt": 9}, 1)


def test_events_pagination_and_gapless_seq(store, reader):
    ((snap, _),) = store.submit([new()])
    c = claim_one(store)
    for i in range(5):
        store.append_events(c, [("progress", i), ("chunk", {"text": str(i)})])
    evs = reader.events(snap.id)
    assert [e.seq for e in evs] == list(range(1, 11))
    assert [e.seq for e in reader.events(snap.id, after=7)] == [8, 9, 10]
    assert [e.seq for e in reader.events(snap.id, after=2, limit=2)] == [3, 4]


def test_wait_change_wakes_on_a_commit_from_another_store(store, reader):
    token = reader.change_token()
    t0 = time.monotonic()
    threading.Timer(0.2, lambda: store.submit([new()])).start()
    assert reader.wait_change(token, 5.0) != token
    assert time.monotonic() - t0 < 2.0


def test_counters_and_workers(store, reader):
    store.bump("rejected_stale_writes", 2)
    assert reader.counters()["rejected_stale_writes"] == 2
    store.register_worker("w-1")
    assert [(w["id"], w["state"]) for w in reader.workers()] == [("w-1", "live")]
    store.unregister_worker("w-1")
    assert [(w["id"], w["state"]) for w in reader.workers()] == [("w-1", "stopped")]


def test_request_bound_tasks_are_claimed_only_by_their_request(store, reader):
    item = NewTask("t.echo", {"value": 1}, 1, False, request_bound=True)
    snap, created, claim = store.submit_and_claim(item, "server", 5.0)
    assert created and claim is not None and snap.state is State.RUNNING
    ((other, _),) = store.submit([NewTask("t.echo", {"value": 2}, 1, False, request_bound=True)])
    assert store.claim(NAMES, 10, "worker", 5.0) == []  # no worker takes them
    assert reader.get(other.id).state is State.QUEUED


def test_finish_many_fences_each_claim_on_its_own(store, reader):
    (a, _), (b, _), (c, _) = store.submit([new(retry_safe=True, max_attempts=3), new(), new()])
    claims = store.claim(NAMES, 3, "w", 5.0)
    by_id = {cl.task_id: cl for cl in claims}
    store.release(by_id[a.id])  # a's claim is stale now (re-claimed below, new epoch)
    fresh_a = store.claim(NAMES, 1, "w2", 5.0)[0]
    store.cancel(c.id, CancelReason.USER)
    results = store.finish_many(
        [
            (by_id[a.id], Outcome.returned("stale"), [("progress", "stale")]),
            (by_id[b.id], Outcome.returned("b"), [("progress", 1), ("chunk", {"text": "x"})]),
            (by_id[c.id], Outcome.returned("c"), []),
            (fresh_a, Outcome.returned("fresh"), [("progress", "fresh")]),
        ]
    )
    assert isinstance(results[0], LeaseLost)
    assert results[1:] == [State.SUCCEEDED, State.CANCELLED, State.SUCCEEDED]
    assert reader.get(a.id).result == "fresh"
    assert [e.data for e in reader.events(a.id)] == ["fresh"]
    assert [e.seq for e in reader.events(b.id)] == [1, 2]
    assert reader.get(c.id).result is None
    assert all(reader.outbox_for(t) is not None for t in (a.id, b.id, c.id))


def test_a_batch_numbers_each_tasks_events_on_into_its_next_attempt(store, reader):
    """A batch's fence reads each row (locked) and each settlement writes the event
    counter the fence answered: a task retried by the batch, one it put to sleep (due
    at once: queued again) and one it finished number their next events on from where
    the batch left them — no number twice, none skipped."""
    (a, _), (b, _), (c, _) = store.submit([new(retry_safe=True, max_attempts=2), new(), new()])
    claims = {cl.task_id: cl for cl in store.claim(NAMES, 3, "w", 5.0)}
    nap = {"kind": "sleep", "key": "wait:1:sleep", "wake_at": "2020-01-01T00:00:00Z"}
    results = store.finish_many(
        [
            (
                claims[a.id],
                Outcome.retry(ErrorCode.TASK_ERROR, "again", 0),
                [("progress", 1), ("progress", 2)],
            ),
            (claims[b.id], Outcome.suspended({**nap, "record": {}}), [("progress", 1)]),
            (claims[c.id], Outcome.returned("c"), [("progress", 1)]),
        ]
    )
    assert results == [State.QUEUED, State.QUEUED, State.SUCCEEDED]
    again = {cl.task_id: cl for cl in store.claim(NAMES, 2, "w", 5.0)}
    assert set(again) == {a.id, b.id}
    for claim in again.values():
        counter = store.append_events(claim, [("progress", "next")])
        assert counter == (3 if claim.task_id == a.id else 2)
    ends = [(cl, Outcome.returned("done"), [("progress", "end")]) for cl in again.values()]
    store.finish_many(ends)
    assert [e.seq for e in reader.events(a.id)] == [1, 2, 3, 4]
    assert [e.seq for e in reader.events(b.id)] == [1, 2, 3]
    assert [e.seq for e in reader.events(c.id)] == [1]
    assert reader.get(a.id).attempt == 2 and reader.get(c.id).result == "c"


def test_a_batch_fence_on_sqlite_is_a_key_lookup_per_claim(tmp_path):
    """SQLite's batch fence walks the batch and looks each claim up by its key, never
    the table by an index, with statistics that say most tasks run (PostgreSQL's
    plans: tests/integration/test_pg_plans.py)."""
    s = open_store(f"sqlite:///{tmp_path / 'plan.db'}")
    try:
        s.submit([new() for _ in range(2000)])
        s.claim(NAMES, 1500, "w", 60.0)
        with s._write() as conn:
            conn.execute("ANALYZE")
        with s._read() as conn:
            sql = "EXPLAIN QUERY PLAN " + s.q["fence_many"]
            rows = conn.execute(sql, s._rows_param([{"id": "a", "epoch": 1, "n": 1}])).fetchall()
        plan = [r["detail"] for r in rows]
        assert plan[0].startswith("SCAN json_each") and plan[1:] == [
            "SEARCH tasks USING PRIMARY KEY (id=?)"
        ], plan
    finally:
        s.close()


def test_finish_and_claim_is_one_transaction(store, reader):
    """Claim-on-finish: the terminal writes and the next claims commit together, or
    (a failed terminal write) neither does."""
    (a, _), (b, _), (c, _) = store.submit([new(), new(), new()])
    first = store.claim(NAMES, 1, "w", 5.0)[0]
    request = ClaimRequest(NAMES, 1, "w", 5.0)
    store.faults.arm("finish")
    with pytest.raises(StoreError, match="injected"):
        store.finish_and_claim([(first, Outcome.returned(1), [])], request)
    assert reader.get(first.task_id).state is State.RUNNING
    assert reader.counts()["queued"] == 2  # nothing was claimed either
    results, claims = store.finish_and_claim([(first, Outcome.returned(1), [])], request)
    assert results == [State.SUCCEEDED] and len(claims) == 1
    assert reader.get(first.task_id).state is State.SUCCEEDED
    nxt = reader.get(claims[0].task_id)
    assert nxt.state is State.RUNNING and nxt.lease_owner == "w" and nxt.attempt == 1
    assert {first.task_id, claims[0].task_id} < {a.id, b.id, c.id}
    # a stale claim writes nothing, but its slot is still refilled
    store.release(claims[0])
    results, more = store.finish_and_claim([(claims[0], Outcome.returned(2), [])], request)
    assert isinstance(results[0], LeaseLost) and len(more) == 1


def test_leases_run_on_the_database_clock_not_the_process_clock(store, reader, monkeypatch):
    """A process clock an hour off changes nothing: lease_until is the database's now
    plus the lease, and a fresh claim is not expired."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)
    ((snap, _),) = store.submit([new()])
    c = claim_one(store, lease=5.0)
    got = reader.get(snap.id)
    ahead = (got.lease_until - reader.now()).total_seconds()
    assert 4.0 < ahead <= 5.0, ahead
    assert store.expire(Backoff(base=0.0, jitter=0.0)) == []  # not expired
    assert store.heartbeat(c, 5.0) is State.RUNNING
    # ids never go back within a process: the ids made later in this test process
    # would carry this clock's hour for an hour (and miss created-range searches)
    from tasklab.store.ids import new_task_id

    new_task_id._forget()


def test_a_batch_with_idempotency_keys_answers_the_holders(store):
    """One statement for a batch with keys (the scheduler's ticks): a taken key answers
    its task, a key twice in the batch makes one task, a different payload conflicts
    and the whole batch is written or none of it."""
    ((first, _),) = store.submit([new({"value": 1}, key="b1")])
    out = store.submit(
        [new({"value": 1}, key="b1"), new({"value": 2}, key="b2"), new({"value": 2}, key="b2")]
    )
    assert (out[0][0].id, out[0][1]) == (first.id, False)
    assert out[1][1] is True and out[2][1] is False and out[1][0].id == out[2][0].id
    with pytest.raises(IdempotencyConflict):
        store.submit([new({"value": 3}), new({"value": 9}, key="b1")])
    assert store.counts()["queued"] == 2
