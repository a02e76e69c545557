"""Random sequences of store operations keep the invariants of SPEC §1: terminal states
never change, success is never overwritten, a stale epoch never writes, `seq` is
gapless, and every terminal task has exactly one notification."""

from __future__ import annotations

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
    def claim(self, lease: float) -> None:
        self.claims += self.store.claim(["t.echo"], 2, "w", lease)

    @rule(i=st.integers(0, 50))
    def cancel(self, i: int) -> None:
        if self.ids:
            self.store.cancel(self.ids[i % len(self.ids)], CancelReason.USER)

    @rule(i=st.integers(0, 50))
    def heartbeat(self, i: int) -> None:
        if self.claims:
            self.store.heartbeat(self.claims[i % len(self.claims)], 30.0)

    @rule(i=st.integers(0, 50))
    def emit(self, i: int) -> None:
        if self.claims:
            claim = self.claims[i % len(self.claims)]
            before = self.reader.events(claim.task_id)
            try:
                self.store.append_events(claim, [("progress", i)])
            except LeaseLost:  # a stale claim: nothing may have been written
                assert self.reader.events(claim.task_id) == before

    @rule(i=st.integers(0, 50), kind=st.sampled_from(["return", "fail", "cancel", "retry"]))
    def finish(self, i: int, kind: str) -> None:
        if not self.claims:
            return
        c = self.claims[i % len(self.claims)]
        before = self.reader.get(c.task_id)
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
            return
        # an accepted write had the authority: the current epoch, a live state
        assert before.state in (State.RUNNING, State.CANCEL_REQUESTED)

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


def test_random_operation_sequences_keep_the_invariants(store_url):
    StoreMachine.store_url = store_url
    StoreMachine.TestCase.settings = settings(
        max_examples=15,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    StoreMachine.TestCase().runTest()
