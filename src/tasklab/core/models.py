"""Plain frozen records that cross every boundary: snapshots, events, outcomes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tasklab._types import JSON as JSON  # re-exported: the models speak JSON
from tasklab.core.jsontext import dumps
from tasklab.core.states import CancelReason, ErrorCode, State


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """What the store says about one task, at one moment. Immutable."""

    id: str
    task: str
    payload: dict[str, JSON]
    state: State
    attempt: int
    max_attempts: int
    result: JSON
    error: ErrorInfo | None
    cancel_reason: CancelReason | None
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_owner: str | None = None
    lease_until: datetime | None = None
    run_after: datetime | None = None
    queue: str = "default"
    priority: int = 0
    concurrency_key: str | None = None
    unique_key: str | None = None
    parent_id: str | None = None
    wait: dict[str, JSON] | None = None  # while waiting: kind, name, children, wake_at
    retry_of: str | None = None  # made by `app.retry` of that ended task

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def to_json(self, *, payload: bool = True) -> dict[str, JSON]:
        doc: dict[str, JSON] = {
            "id": self.id,
            "task": self.task,
            "payload": self.payload,
            "state": self.state.value,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "result": self.result,
            "error": self.error.to_json() if self.error else None,
            "cancel_reason": self.cancel_reason.value if self.cancel_reason else None,
            "idempotency_key": self.idempotency_key,
            "queue": self.queue,
            "priority": self.priority,
            "concurrency_key": self.concurrency_key,
            "unique_key": self.unique_key,
            "parent_id": self.parent_id,
            "wait": self.wait,
            "retry_of": self.retry_of,
            "run_after": iso(self.run_after),
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
        }
        if not payload:
            del doc["payload"]
        return doc


@dataclass(frozen=True, slots=True)
class Event:
    """One persisted event: `(task_id, seq)` is unique and gapless per task."""

    task_id: str
    seq: int
    attempt: int
    type: str
    data: JSON
    at: datetime

    def to_json(self) -> dict[str, JSON]:
        return {
            "seq": self.seq,
            "attempt": self.attempt,
            "type": self.type,
            "data": self.data,
            "at": iso(self.at),
        }


EVENT_TYPES = frozenset(
    {"progress", "chunk", "attempt", "waiting", "resumed", "retry", "lease_expired"}
)


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """What `app.cancel()` did: whether the request was recorded, and the state now."""

    request_accepted: bool
    state: State


@dataclass(frozen=True, slots=True)
class RunnerCancelOutcome:
    """The two facts of cancelling through a runner (seed 001): the future left the
    queue, and the application recorded the request. Neither says the work stopped."""

    future_cancelled: bool
    request_accepted: bool


@dataclass(frozen=True, slots=True)
class Page:
    items: list[TaskSnapshot]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """The authority to execute one attempt: valid while `epoch` is the task's epoch,
    its state is live and its lease has not expired (by the database clock)."""

    task_id: str
    task: str
    payload: dict[str, JSON]
    epoch: int
    attempt: int
    max_attempts: int
    owner: str
    cancel_requested: bool = False
    # this process's monotonic clock when the claiming statement was sent: the lease
    # cannot have started earlier, so the local lease deadline counts from here
    sent_at: float = 0.0
    resumed: str | None = None  # the kind of wait this run resumes (sleep, signal, join)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What a worker asks for when it claims: up to `limit` runnable tasks of `names`
    in `queues` (None: every queue)."""

    names: list[str]
    limit: int
    owner: str
    lease: float
    queues: list[str] | None = None
    keyed: tuple[str, ...] = ()  # the names among `names` with a per-key limit


@dataclass(frozen=True, slots=True)
class NewTask:
    task: str
    payload: dict[str, JSON]
    max_attempts: int
    retry_safe: bool
    idempotency_key: str | None = None
    request_bound: bool = False
    timeout: float | None = None
    payload_json: str | None = None  # the payload's stored text, when validation made it
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None  # or `delay` seconds from the commit (database clock)
    delay: float | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None  # the task's per-key limit, with a key only
    unique_key: str | None = None
    parent_id: str | None = None  # spawned by that task (ctx.spawn)
    trace_context: str | None = None  # the submitter's W3C trace context (tracing.py)

    def payload_text(self) -> str:
        return self.payload_json if self.payload_json is not None else dumps(self.payload)


class Submission:
    """What a submit answers: the task's id, whether this submit created it, and its
    snapshot, made when first asked for and in the asking thread. `app.submit` wants
    the id alone, and a thread writing a batch shared by many callers would otherwise
    make every caller's snapshot while they wait for it, under one GIL."""

    __slots__ = ("_make", "_snapshot", "created", "id")

    def __init__(
        self,
        task_id: str,
        created: bool,
        make: Callable[[], TaskSnapshot] | None = None,
        snapshot: TaskSnapshot | None = None,
    ) -> None:
        self.id = task_id
        self.created = created
        self._make = make
        self._snapshot = snapshot

    @classmethod
    def of(cls, snapshot: TaskSnapshot, created: bool) -> Submission:
        return cls(snapshot.id, created, snapshot=snapshot)

    def snapshot(self) -> TaskSnapshot:
        if self._snapshot is None:
            assert self._make is not None
            self._snapshot, self._make = self._make(), None
        return self._snapshot

    def pair(self) -> tuple[TaskSnapshot, bool]:
        return self.snapshot(), self.created


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What an executor says of itself in its row (SPEC §9: workers you can see)."""

    owner: str = ""  # the lease owner its claims write, `<owner>#<n>`
    runner: str = ""
    queues: list[str] | None = None  # None: every queue
    slots: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended, as the executor saw it; the store turns it into a state.

    `kind` is one of: "return" (result), "fail" (error), "cancel" (reason),
    "retry" (error, delay seconds).
    """

    kind: str
    result: JSON = None
    error: ErrorInfo | None = None
    reason: CancelReason | None = None
    retry_delay: float = 0.0
    encoded: str | None = None  # the result's stored JSON text, when already made
    wait: dict[str, Any] | None = None  # "suspend": what the task waits for (Wait.to_wire)

    @staticmethod
    def returned(result: JSON, encoded: str | None = None) -> Outcome:
        return Outcome("return", result=result, encoded=encoded)

    @staticmethod
    def failed(code: ErrorCode, message: str) -> Outcome:
        return Outcome("fail", error=ErrorInfo(code.value, message))

    @staticmethod
    def cancelled(reason: CancelReason) -> Outcome:
        return Outcome("cancel", reason=reason)

    @staticmethod
    def suspended(wait: dict[str, Any]) -> Outcome:
        return Outcome("suspend", wait=wait)

    @staticmethod
    def retry(code: ErrorCode, message: str, delay: float) -> Outcome:
        return Outcome("retry", error=ErrorInfo(code.value, message), retry_delay=delay)


@dataclass(frozen=True, slots=True)
class Expired:
    """A live task whose lease ran out (or, under exclusive recovery, any live task)."""

    task_id: str
    epoch: int
    state: State
    attempt: int
    max_attempts: int
    retry_safe: bool
    request_bound: bool


@dataclass(slots=True)
class EffectRecord:
    key: str
    status: str  # none / started / done
    result: JSON = None
    attempt: int | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
