"""Random sequences of store operations keep the invariants of docs/design.md: terminal
states never change, success is never overwritten, a write is accepted exactly when its
claim holds the authority (its epoch is the task's latest, the state is live, the
lease unexpired by the database clock), `seq` is gapless, and every terminal task has
exactly one notification."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tasklab.core.models import NewTask, Outcome
from tasklab.core.policy import Backoff
from tasklab.core.states import TERMINAL, CancelReason, ErrorCode, State
from tasklab.errors import LeaseLost, WorkerAlive
from tasklab.store import open_store


class StoreMachine(RuleBasedStateMachine):
    store_url = ""

    @initialize()
    def setup(self) -> None:
        self.store = open_store(self.store_url)
        self.reader = open_store(self.store_url)
        self.ids: list[str] = []
        self.claims: list = []  # every claim ever made, stale ones included
        self.latest: dict[str, int] = {}  # each task's newest epoch (claims are all ours)
        self.terminal: dict[str, tuple] = {}
        self.succeeded: dict[str, object] = {}
        self.n = 0

    def teardown(self) -> None:
        self.store.close()
        self.reader.close()

    @rule(retry_safe=st.booleans(), max_attempts=st.integers(1, 3))
    def submit(self, retry_safe: bool, max_attempts: int) -> None:
        self.n += 1
        ((snap, _),) = self.store.submit(
            [NewTask("t.echo", {"value": self.n}, max_attempts, retry_safe)]
        )
        self.ids.append(snap.id)

    @rule(lease=st.sampled_from([0.05, 30.0]))
    def claim(self, lease: float, limit: int = 2) -> None:
        made = self.store.claim(["t.echo"], limit, "w", lease)
        for c in made:
            assert c.epoch > self.latest.get(c.task_id, 0)  # the epoch only grows
            self.latest[c.task_id] = c.epoch
        self.claims += made

    def authority(self, claim) -> bool | None:  # type: ignore[no-untyped-def]
        """Whether a write by `claim` must be accepted now (the model), or None when its
        lease ends too close to now to tell."""
        snap = self.reader.get(claim.task_id)
        now = self.reader.now()
        if snap.lease_until is not None and abs((snap.lease_until - now).total_seconds()) < 0.03:
            return None
        return (
            claim.epoch == self.latest[claim.task_id]
            and snap.state in (State.RUNNING, State.CANCEL_REQUESTED)
            and snap.lease_until is not None
            and snap.lease_until > now
        )

    @rule()
    def reassign(self) -> None:
        """A claim whose lease ran out, reaped and claimed again: the old claim is
        stale while the new one is live — the case fencing exists for."""
        self.submit(retry_safe=True, max_attempts=3)
        for lease in (0.05, 30.0):
            self.claim(lease, limit=50)  # whatever is runnable, the new task among them
            if lease < 1:
                time.sleep(0.06)
                self.store.expire(Backoff(base=0.0, jitter=0.0))

    @rule(i=st.integers(0, 50))
    def cancel(self, i: int) -> None:
        if self.ids:
            self.store.cancel(self.ids[i % len(self.ids)], CancelReason.USER)

    @rule(i=st.integers(0, 50))
    def heartbeat(self, i: int) -> None:
        if self.claims:
            claim = self.claims[i % len(self.claims)]
            expected = self.authority(claim)
            accepted = self.store.heartbeat(claim, 30.0) is not None
            assert expected is None or accepted == expected, (claim, expected)

    @rule(i=st.integers(0, 50))
    def emit(self, i: int) -> None:
        if self.claims:
            claim = self.claims[i % len(self.claims)]
            before = self.reader.events(claim.task_id)
            expected = self.authority(claim)
            try:
                self.store.append_events(claim, [("progress", i)])
                accepted = True
            except LeaseLost:  # a stale claim: nothing may have been written
                assert self.reader.events(claim.task_id) == before
                accepted = False
            assert expected is None or accepted == expected, (claim, expected)
            if accepted:
                assert self.reader.events(claim.task_id)[-1].data == i

    @rule(i=st.integers(0, 50), kind=st.sampled_from(["return", "fail", "cancel", "retry"]))
    def finish(self, i: int, kind: str) -> None:
        if not self.claims:
            return
        c = self.claims[i % len(self.claims)]
        before = self.reader.get(c.task_id)
        expected = self.authority(c)
        outcome = {
            "return": Outcome.returned({"by_epoch": c.epoch}),
            "fail": Outcome.failed(ErrorCode.TASK_ERROR, "x"),
            "cancel": Outcome.cancelled(CancelReason.USER),
            "retry": Outcome.retry(ErrorCode.TASK_ERROR, "x", 0.0),
        }[kind]
        try:
            self.store.finish(c, outcome, [("progress", "last")])
        except LeaseLost:
            after = self.reader.get(c.task_id)
            assert after == before  # a rejected write changes nothing
            assert expected is not True, f"a write with the authority was refused: {c}"
            return
        # accepted: exactly when the model says the claim had the authority
        assert expected is not False, f"a write without the authority was accepted: {c}"
        after = self.reader.get(c.task_id)
        if after.state is State.SUCCEEDED:  # and what it wrote is that claim's
            assert after.result == {"by_epoch": c.epoch}

    @rule()
    def expire(self) -> None:
        time.sleep(0.06)
        self.store.expire(Backoff(base=0.0, jitter=0.0))

    @rule()
    def recover(self) -> None:
        try:
            self.store.recover_running(Backoff(base=0.0, jitter=0.0))
        except WorkerAlive:
            raise AssertionError("no executor is alive in this test") from None

    @invariant()
    def terminal_states_never_change(self) -> None:
        if not hasattr(self, "store"):
            return
        for tid in self.ids:
            snap = self.reader.get(tid)
            if tid in self.terminal:
                assert (snap.state, snap.result, snap.error) == self.terminal[tid]
            elif snap.state in TERMINAL:
                self.terminal[tid] = (snap.state, snap.result, snap.error)
                assert self.reader.outbox_for(tid) is not None
            if snap.state is State.SUCCEEDED:
                assert snap.result is not None
            else:
                assert snap.result is None
            seqs = [e.seq for e in self.reader.events(tid)]
            assert seqs == list(range(1, len(seqs) + 1))
        with self.reader._read() as conn:
            exact = {r["state"]: int(r["n"]) for r in self.reader._all(conn, "count_states_exact")}
        kept = self.reader.counts()
        assert {s: n for s, n in kept.items() if n} == {s: n for s, n in exact.items() if n}


def test_random_operation_sequences_keep_the_invariants(store_url):
    StoreMachine.store_url = store_url
    StoreMachine.TestCase.settings = settings(
        max_examples=int(os.environ.get("TASKLAB_PROPERTY_EXAMPLES", "15")),
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    StoreMachine.TestCase().runTest()
