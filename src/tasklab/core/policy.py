"""Retry, backoff and lease-expiry decisions as pure functions (tested table-driven)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from tasklab.core.jsontext import check_text
from tasklab.core.models import ErrorInfo, Expired, Outcome
from tasklab.core.states import (
    CancelReason,
    ErrorCode,
    State,
    Transition,
    allowed,
    next_state,
)


@dataclass(frozen=True, slots=True)
class Backoff:
    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.25  # +- this fraction

    def delay(self, attempt: int, rnd: random.Random | None = None) -> float:
        """Delay before attempt `attempt + 1`, for an attempt number >= 1: 1 s doubling
        to the cap, with jitter so that a herd of retries spreads out."""
        raw = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        r: float = (rnd or random).uniform(-self.jitter, self.jitter)
        return max(0.0, raw * (1 + r))


OUTCOME_UNKNOWN_MESSAGE = (
    "the result is unknown; external side effects must be checked "
    "(the executor lost its lease or died before recording an outcome)"
)


def expiry_outcome(task: Expired, backoff: Backoff) -> Outcome:
    """What happens to a live task whose executor is gone (docs/design.md §1).

    Re-queued only when the task declared itself retry-safe, is not bound to a
    request, still has attempts left, and nobody asked it to stop. Otherwise the
    honest answer is "we do not know": failed/outcome_unknown.
    """
    if (
        task.state is State.RUNNING
        and task.retry_safe
        and not task.request_bound
        and task.attempt < task.max_attempts
    ):
        return Outcome.retry(
            ErrorCode.OUTCOME_UNKNOWN, OUTCOME_UNKNOWN_MESSAGE, backoff.delay(task.attempt)
        )
    return Outcome.failed(ErrorCode.OUTCOME_UNKNOWN, OUTCOME_UNKNOWN_MESSAGE)


MAX_MESSAGE = 16_384  # characters of an error message kept


def storable(message: str) -> str:
    """An error message as text a database takes (lone surrogates escaped), at most
    `MAX_MESSAGE` characters and a note of how many more there were: a message is in
    every snapshot of its task, so in every page of a list (an exception carrying a
    whole response body would otherwise make each page that large)."""
    if len(message) > MAX_MESSAGE:
        more = len(message) - MAX_MESSAGE
        message = f"{message[:MAX_MESSAGE]}… [{more:,} more characters not kept]"
    try:
        return check_text(message)
    except ValueError:
        return message.encode("utf-8", "backslashreplace").decode("utf-8")


def describe(exc: BaseException) -> str:
    """`Type: message` of an exception a task raised, whatever its `__str__` does (one
    that raises, or returns something that is not a string, still ends its task)."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception as err:  # the task's own code, in its __str__
        return storable(f"{name} (its message could not be read: {type(err).__name__})")
    return storable(f"{name}: {text}" if text else name)


def error_outcome(
    message: str,
    *,
    retryable: bool,
    attempt: int,
    max_attempts: int,
    cancel_requested: bool,
    backoff: Backoff,
) -> Outcome:
    """Retry only a retryable error with attempts left, and never once a stop was
    requested; anything else fails with `task_error`."""
    if retryable and attempt < max_attempts and not cancel_requested:
        return Outcome.retry(ErrorCode.TASK_ERROR, message, backoff.delay(attempt))
    return Outcome.failed(ErrorCode.TASK_ERROR, message)


@dataclass(frozen=True, slots=True)
class Settlement:
    """The row an executor's outcome becomes, given the state read under the fence."""

    state: State
    result: object = None
    error: ErrorInfo | None = None
    encoded: str | None = None  # the result's JSON text, if the outcome carried it
    reason: CancelReason | None = None
    delay: float = 0.0
    wait: dict[str, Any] | None = None  # WAITING: what for (Wait.to_wire)


def settle(current: State, outcome: Outcome) -> Settlement:
    """Turn an attempt's outcome into the next state (docs/design.md §1), checked by the table.

    The cancel check comes before the success commit: a task that returns while a
    cancel is pending ends `cancelled` and its result is not stored. A retry asked for
    after a cancel request fails instead: the user asked the task to stop.
    """
    if outcome.kind == "return":
        new = next_state(current, Transition.RETURN)
        if new is State.SUCCEEDED:
            return Settlement(new, result=outcome.result, encoded=outcome.encoded)
        return Settlement(new)
    if outcome.kind == "suspend":
        new = next_state(current, Transition.SUSPEND)
        return Settlement(new, wait=outcome.wait if new is State.WAITING else None)
    if outcome.kind == "cancel":
        return Settlement(next_state(current, Transition.CHECKPOINT_CANCEL), reason=outcome.reason)
    if outcome.kind == "retry" and allowed(current, Transition.RETRY):
        return Settlement(
            next_state(current, Transition.RETRY), error=outcome.error, delay=outcome.retry_delay
        )
    if outcome.kind in ("retry", "fail"):
        return Settlement(next_state(current, Transition.FAIL), error=outcome.error)
    raise ValueError(f"unknown outcome kind {outcome.kind!r}")
