"""How an attempt's call ended, and the `Outcome` that ending becomes — written once for
every runner (threads, the asyncio loop, a process child, a transactional task).

`Ending` is plain data, so that a process child can send it over its pipe and the
parent map it exactly as an in-process runner does. The mapping is pure:

- a return → `return` (or `fail/invalid_result` when the value is not JSON);
- `Cancelled` (the task stopped at a checkpoint) → `cancel`, with the reason recorded
  by whoever asked;
- `LeaseLost` → nothing to write (None): another attempt owns the task now;
- any other `Exception` → `retry` or `fail` by the task's `retry_on`, its attempts left
  and whether a stop was requested (policy.error_outcome);
- `KeyboardInterrupt` and `SystemExit` in the main thread (`app.run`, a process
  runner's child) stop the process that runs the task — Ctrl-C, an exit — and are not
  the task's ending: they are raised again, and the task is its lease's. Anywhere else
  (a runner's slot threads, its event loop's thread) only the task's own code can
  raise them, so they end it like any exception, as does any other `BaseException`
  of its own: before this, one `sys.exit()` in a task stopped the async runner's loop
  and every task on it, and on the thread runner left its task `running` until the
  lease ran out.

`retry_on` matches by the qualified names of the exception's classes (its MRO), the
one rule a process child and its parent can both apply.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasklab.core.durable import StepUnknown, Suspend
from tasklab.core.jsontext import dumps
from tasklab.core.models import JSON, Outcome
from tasklab.core.policy import Backoff, describe, error_outcome, storable
from tasklab.core.states import CancelReason, ErrorCode
from tasklab.errors import Cancelled, LeaseLost


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class Ending:
    kind: str  # return | invalid_result | cancelled | lost | error | suspend | step_unknown
    value: JSON = None
    encoded: str | None = None  # the value's JSON text, made once here
    message: str = ""
    mro: tuple[str, ...] = ()

    @staticmethod
    def returned(value: object) -> Ending:
        try:
            encoded = dumps(value)
        except (TypeError, ValueError) as exc:
            return Ending("invalid_result", message=f"the result is not JSON: {exc}")
        return Ending("return", value, encoded)

    @staticmethod
    def raised(exc: BaseException) -> Ending:
        if isinstance(exc, Cancelled):
            return Ending("cancelled")
        if isinstance(exc, Suspend):
            return Ending("suspend", exc.wait.to_wire())
        if isinstance(exc, StepUnknown):
            return Ending("step_unknown", message=storable(str(exc)))
        if isinstance(exc, LeaseLost):
            return Ending("lost")
        if not _stops_the_process(exc):
            return Ending(
                "error",
                message=describe(exc),
                mro=tuple(qualified(c) for c in type(exc).__mro__),
            )
        raise exc  # not the task's ending: Ctrl-C or an exit of the running process

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "value": self.value,
            "message": self.message,
            "mro": list(self.mro),
        }

    @staticmethod
    def from_wire(msg: dict[str, Any]) -> Ending:
        return Ending(
            str(msg["kind"]),
            msg.get("value"),
            None,
            str(msg.get("message", "")),
            tuple(msg.get("mro", ())),
        )


def _stops_the_process(exc: BaseException) -> bool:
    return (
        isinstance(exc, KeyboardInterrupt | SystemExit)
        and threading.current_thread() is threading.main_thread()
    )


def call_ending(fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Ending:
    """Call a task function; how it ended."""
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # classified by Ending.raised, which re-raises the rest
        return Ending.raised(exc)
    return Ending.returned(value)


@dataclass(frozen=True, slots=True)
class AttemptFacts:
    """What the mapping needs to know of the attempt besides its ending."""

    retry_on: tuple[type[BaseException], ...]
    attempt: int
    max_attempts: int
    backoff: Backoff
    cancel_requested: bool = False
    cancel_reason: CancelReason | None = None


def outcome_of(ending: Ending, facts: AttemptFacts) -> Outcome | None:
    """The outcome to settle; None when the execution lost its authority."""
    if ending.kind == "return":
        return Outcome.returned(ending.value, ending.encoded)
    if ending.kind == "invalid_result":
        return Outcome.failed(ErrorCode.INVALID_RESULT, ending.message)
    if ending.kind == "cancelled":
        return Outcome.cancelled(facts.cancel_reason or CancelReason.USER)
    if ending.kind == "lost":
        return None
    if ending.kind == "suspend":
        return Outcome.suspended(dict(ending.value))
    if ending.kind == "step_unknown":
        return Outcome.failed(ErrorCode.OUTCOME_UNKNOWN, ending.message)
    names = set(ending.mro)
    return error_outcome(
        ending.message,
        retryable=any(qualified(c) in names for c in facts.retry_on),
        attempt=facts.attempt,
        max_attempts=facts.max_attempts,
        cancel_requested=facts.cancel_requested,
        backoff=facts.backoff,
    )
