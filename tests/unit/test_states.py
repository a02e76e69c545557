"""The state machine and the pure policies, table-driven, no database."""

from __future__ import annotations

import json
import random

import pytest

from tasklab.core.ending import AttemptFacts, Ending, outcome_of
from tasklab.core.models import Expired, Outcome
from tasklab.core.policy import Backoff, expiry_outcome, settle
from tasklab.core.states import (
    TABLE,
    TERMINAL,
    CancelReason,
    ErrorCode,
    State,
    Transition,
    allowed,
    next_state,
)
from tasklab.errors import Cancelled, IllegalTransition, LeaseLost

Q, R, C = State.QUEUED, State.RUNNING, State.CANCEL_REQUESTED
S, F, X = State.SUCCEEDED, State.FAILED, State.CANCELLED


@pytest.mark.parametrize(
    ("current", "transition", "expected"),
    [
        (None, Transition.SUBMIT, Q),
        (Q, Transition.CLAIM, R),
        (Q, Transition.CANCEL, X),
        (R, Transition.CANCEL, C),
        (C, Transition.CANCEL, C),
        (R, Transition.RELEASE, Q),
        (R, Transition.RETURN, S),
        (C, Transition.RETURN, X),
        (C, Transition.CHECKPOINT_CANCEL, X),
        (R, Transition.RETRY, Q),
        (R, Transition.FAIL, F),
        (C, Transition.FAIL, F),
        (R, Transition.DEADLINE, C),
    ],
)
def test_allowed_transitions(current, transition, expected):
    assert next_state(current, transition) is expected


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
@pytest.mark.parametrize("transition", list(Transition))
def test_terminal_states_never_change(terminal, transition):
    assert not allowed(terminal, transition)
    with pytest.raises(IllegalTransition):
        next_state(terminal, transition)


def test_illegal_transition_is_an_error_not_an_overwrite():
    with pytest.raises(IllegalTransition, match="not allowed"):
        next_state(Q, Transition.RETURN)
    with pytest.raises(IllegalTransition):
        next_state(C, Transition.RETRY)  # a stop was asked for: never re-queued
    with pytest.raises(IllegalTransition):
        next_state(C, Transition.RELEASE)


def test_table_never_leaves_a_terminal_state():
    assert all(src not in TERMINAL for src, _ in TABLE)


@pytest.mark.parametrize(
    ("current", "outcome", "state", "has_result"),
    [
        (R, Outcome.returned({"a": 1}), S, True),
        (C, Outcome.returned({"a": 1}), X, False),  # cancel check before success commit
        (C, Outcome.cancelled(CancelReason.USER), X, False),
        (R, Outcome.failed(ErrorCode.TASK_ERROR, "x"), F, False),
        (R, Outcome.retry(ErrorCode.TASK_ERROR, "x", 1.0), Q, False),
        (C, Outcome.retry(ErrorCode.TASK_ERROR, "x", 1.0), F, False),
    ],
)
def test_settle(current, outcome, state, has_result):
    s = settle(current, outcome)
    assert s.state is state
    assert (s.result is not None) == has_result


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
def test_settle_refuses_terminal(terminal):
    with pytest.raises(IllegalTransition):
        settle(terminal, Outcome.returned(1))


def _expired(state=R, retry_safe=True, request_bound=False, attempt=1, max_attempts=3):
    return Expired("t", 1, state, attempt, max_attempts, retry_safe, request_bound)


@pytest.mark.parametrize(
    ("task", "kind"),
    [
        (_expired(), "retry"),
        (_expired(retry_safe=False), "fail"),
        (_expired(request_bound=True), "fail"),
        (_expired(attempt=3), "fail"),
        (_expired(state=C), "fail"),  # the user asked it to stop: never re-queued
    ],
)
def test_lease_expiry_policy(task, kind):
    out = expiry_outcome(task, Backoff())
    assert out.kind == kind
    assert out.error is not None and out.error.code == "outcome_unknown"


def test_backoff_doubles_with_jitter_and_caps():
    b = Backoff(base=1.0, cap=300.0, jitter=0.25)
    rnd = random.Random(1)
    for attempt, raw in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 300.0), (50, 300.0)]:
        d = b.delay(attempt, rnd)
        assert raw * 0.75 <= d <= raw * 1.25


def _mapped(exc, retry_on, **facts):
    kw = dict(attempt=1, max_attempts=3, backoff=Backoff()) | facts
    return outcome_of(Ending.raised(exc), AttemptFacts(retry_on, **kw))


class _Sub(KeyError):
    pass


def test_an_error_retries_only_when_listed_with_attempts_left_and_no_stop():
    assert _mapped(KeyError("k"), (KeyError,)).kind == "retry"
    assert _mapped(_Sub("k"), (KeyError,)).kind == "retry"  # a subclass matches by its MRO
    assert _mapped(ValueError("v"), (KeyError,)).kind == "fail"
    assert _mapped(KeyError("k"), ()).kind == "fail"
    assert _mapped(KeyError("k"), (KeyError,), attempt=3).kind == "fail"
    assert _mapped(KeyError("k"), (KeyError,), cancel_requested=True).kind == "fail"


def test_every_ending_maps_to_one_outcome():
    facts = AttemptFacts((), 1, 3, Backoff(), True, CancelReason.DEADLINE)
    assert outcome_of(Ending.returned({"a": 1}), facts).encoded == '{"a":1}'
    bad = outcome_of(Ending.returned({1, 2}), facts)
    assert bad.kind == "fail" and bad.error.code == "invalid_result"
    assert outcome_of(Ending.raised(Cancelled("x")), facts).reason is CancelReason.DEADLINE
    assert outcome_of(Ending.raised(LeaseLost("x")), facts) is None
    # a process child's ending crosses the pipe as plain data and maps the same
    err = Ending.raised(_Sub("k"))
    again = Ending.from_wire(json.loads(json.dumps(err.to_wire())))
    wide = AttemptFacts((KeyError,), 1, 3, Backoff())
    a, b = outcome_of(again, wide), outcome_of(err, wide)
    assert (a.kind, a.error) == (b.kind, b.error) == ("retry", b.error) and b.error is not None
    with pytest.raises(KeyboardInterrupt):  # not a task's ending: raised again
        Ending.raised(KeyboardInterrupt())
