"""The task state machine of docs/design.md §1, as data.

Stores encode the same rules in their conditional SQL; this table is what tests and
the in-process code consult, and what a reader should look at first.
"""

from __future__ import annotations

from enum import StrEnum

from tasklab.errors import IllegalTransition


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CANCEL_REQUESTED = "cancel_requested"
    WAITING = "waiting"  # suspended: for a time, a signal or children; no lease, no slot
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def live(self) -> bool:
        """Claimed by an executor: the states whose writes are fenced by epoch + lease."""
        return self in LIVE


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})
LIVE = frozenset({State.RUNNING, State.CANCEL_REQUESTED})


class CancelReason(StrEnum):
    USER = "user"
    CLIENT_DISCONNECTED = "client_disconnected"
    SHUTDOWN = "shutdown"
    DEADLINE = "deadline"
    PARENT_CANCELLED = "parent_cancelled"


class ErrorCode(StrEnum):
    TASK_ERROR = "task_error"
    INVALID_RESULT = "invalid_result"
    TERMINATED = "terminated"
    OUTCOME_UNKNOWN = "outcome_unknown"


class Transition(StrEnum):
    SUBMIT = "submit"
    CLAIM = "claim"
    CANCEL = "cancel"
    RELEASE = "release"
    RETURN = "return"  # the task function returned (a JSON result)
    RETRY = "retry"  # raised a retry_on exception with attempts left / expired retry-safe
    FAIL = "fail"  # raised, invalid result, terminated, outcome unknown
    CHECKPOINT_CANCEL = "checkpoint_cancel"  # reached a checkpoint with a cancel pending
    DEADLINE = "deadline"
    SUSPEND = "suspend"  # ctx.sleep_for / wait_signal / join: the execution ends into a wait
    RESUME = "resume"  # the time came, the signal arrived, the children ended


_Q, _R, _C = State.QUEUED, State.RUNNING, State.CANCEL_REQUESTED
_W = State.WAITING

# (from, transition) -> to.  `None` as from means "no task yet".
TABLE: dict[tuple[State | None, Transition], State] = {
    (None, Transition.SUBMIT): _Q,
    (_Q, Transition.CLAIM): _R,
    (_Q, Transition.CANCEL): State.CANCELLED,
    (_R, Transition.CANCEL): _C,
    (_C, Transition.CANCEL): _C,  # accepted, changes nothing
    (_R, Transition.DEADLINE): _C,
    (_R, Transition.RELEASE): _Q,
    (_R, Transition.RETURN): State.SUCCEEDED,
    (_C, Transition.RETURN): State.CANCELLED,  # the cancel check precedes the success commit
    (_C, Transition.CHECKPOINT_CANCEL): State.CANCELLED,
    (_R, Transition.CHECKPOINT_CANCEL): State.CANCELLED,  # local cancel (runner shutdown)
    (_R, Transition.RETRY): _Q,
    (_R, Transition.FAIL): State.FAILED,
    (_C, Transition.FAIL): State.FAILED,
    (_R, Transition.SUSPEND): _W,  # fenced, with the wait's journal record
    (_C, Transition.SUSPEND): State.CANCELLED,  # a stop was asked: the wait ends it
    (_W, Transition.RESUME): _Q,  # not an attempt: attempt went back at the suspend
    (_W, Transition.CANCEL): State.CANCELLED,  # at once: no code is running
}


def next_state(current: State | None, transition: Transition) -> State:
    """The state `transition` leads to from `current`, or `IllegalTransition`."""
    try:
        return TABLE[(current, transition)]
    except KeyError:
        raise IllegalTransition(
            f"transition {transition.value!r} is not allowed from "
            f"{current.value if current else 'nothing'!r}"
        ) from None


def allowed(current: State | None, transition: Transition) -> bool:
    return (current, transition) in TABLE
