"""Durable functions (SPEC §8): steps answered from the journal, and waits that end the
execution and free its slot — a task that spans hours without holding a worker.

The model is DBOS's and Temporal's: the function runs again from the top after every
wait (and after a crash); each finished step and wait answers from the task's effect
journal instead of running again. So a task function must call its steps and waits in
the same order every time (decide by their results, not by the clock or randomness
outside a step).

- `step(name, fn, *args, retry_safe=False)`: `fn` is called at most once per task; its
  JSON result is journaled (fenced) and returned by every later run. A step the
  journal says was `started` but never `done` (its executor died inside it) is called
  again only when `retry_safe`; otherwise the task ends `failed/outcome_unknown`
  naming the step — never a silent second call.
- `sleep_until` / `sleep_for`, `wait_signal`, `join`: if what they wait for has come,
  they return; otherwise they raise `Suspend`, a `BaseException` that `except
  Exception` cannot swallow, and the execution ends in the fenced transaction that
  records the wait: the task is `waiting` (no lease, no slot) until its time, its
  signal or its children's ends queue it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from tasklab.core.jsontext import dumps
from tasklab.core.models import JSON, EffectRecord, iso
from tasklab.core.queueing import check_when, parse_duration
from tasklab.errors import InvalidPayload


class Suspend(BaseException):
    """Ends the execution into a wait (raised by the wait methods; never caught by
    `except Exception`). Carries what the task waits for."""

    def __init__(self, wait: Wait) -> None:
        super().__init__(f"waiting: {wait.kind}")
        self.wait = wait


class StepUnknown(BaseException):
    """A step an earlier execution started and did not finish, not `retry_safe`: the
    task ends `failed/outcome_unknown`; the step is not called again."""


class WaitTimeout(TimeoutError):
    """`wait_signal` or `join` past its timeout (an ordinary exception: catch it)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """What a suspended task waits for: plain data (a process child sends it)."""

    kind: str  # sleep | signal | join
    key: str  # its journal record
    wake_at: str | None = None  # ISO 8601: the sleep's end or the timeout
    name: str | None = None  # the signal
    children: list[str] = field(default_factory=list)
    record: dict[str, JSON] = field(default_factory=dict)  # journaled the first time

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "wake_at": self.wake_at,
            "name": self.name,
            "children": list(self.children),
            "record": self.record,
        }

    @staticmethod
    def from_wire(doc: dict[str, Any]) -> Wait:
        return Wait(
            doc["kind"],
            doc["key"],
            doc.get("wake_at"),
            doc.get("name"),
            list(doc.get("children") or []),
            dict(doc.get("record") or {}),
        )


class DurablePort(Protocol):
    """What the durable methods need of the running execution: the journal, and
    `durable(op, **args)` — JSON in, JSON out, so that a process child forwards it."""

    task_id: str

    def effect_get(self, key: str) -> EffectRecord: ...
    def effect_start(self, key: str) -> None: ...
    def effect_done(self, key: str, result: JSON) -> None: ...
    def durable(self, op: str, **args: Any) -> Any: ...


class DurableMethods:
    """Mixed into `TaskContext` (which provides `_port`)."""

    _port: DurablePort
    _waits: int = 0
    _clock: datetime | None = None  # the database clock as last read in this run

    def step(
        self, name: str, fn: Callable[..., Any], /, *args: Any, retry_safe: bool = False
    ) -> Any:
        """Run `fn(*args)` at most once for this task (once more after a crash inside
        it only if `retry_safe`); every later run gets its stored JSON result."""
        key = self._step_key(name)
        record = self._port.effect_get(key)
        if record.status == "done":
            return record.result
        if record.status == "started" and not retry_safe:
            raise StepUnknown(
                f"step {name!r} was started by an earlier execution that did not finish "
                "it, and it is not retry_safe: it is not called again (check what it did)"
            )
        self._port.effect_start(key)
        return self.step_done(key, fn(*args))

    def _step_key(self, name: str) -> str:
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise InvalidPayload("a step name is a string of 1 to 200 characters")
        return f"step:{name}"

    def step_done(self, key: str, value: Any) -> Any:
        """Journal a step's result; answers it as every later run will see it."""
        try:
            text = dumps(value)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"the result of {key} is not JSON: {exc}") from None
        self._port.effect_done(key, value)
        return json.loads(text)

    def _next_wait(self, kind: str) -> tuple[str, EffectRecord]:
        self._waits += 1
        key = f"wait:{self._waits}:{kind}"
        return key, self._port.effect_get(key)

    def sleep_until(self, at: datetime) -> None:
        """Sleep durably until `at` (timezone-aware), by the database clock: the
        execution ends now and the task runs again after `at`."""
        if not isinstance(at, datetime) or at.tzinfo is None:
            raise InvalidPayload("sleep_until takes a timezone-aware datetime")
        check_when(at, "sleep_until")
        key, record = self._next_wait("sleep")
        due = _time_of(record, "due") or at
        self._wait_or_return(key, due)

    def sleep_for(self, delta: timedelta | float) -> None:
        """Sleep durably for `delta` from the first time this call was reached."""
        seconds = parse_duration(delta, "sleep_for")
        key, record = self._next_wait("sleep")
        due = _time_of(record, "due") or self._now() + timedelta(seconds=seconds)
        self._wait_or_return(key, due)

    def _wait_or_return(self, key: str, due: datetime) -> None:
        if self._reached(due):
            return
        raise Suspend(Wait("sleep", key, wake_at=iso(due), record={"due": iso(due)}))

    def wait_signal(self, name: str, timeout: timedelta | float | None = None) -> JSON:
        """The data of signal `name` sent to this task (`app.signal`), waiting for it
        durably if it has not come; `WaitTimeout` once `timeout` has passed since this
        call was first reached."""
        if not isinstance(name, str) or not 0 < len(name) <= 100:
            raise InvalidPayload("a signal name is a string of 1 to 100 characters")
        key, record = self._next_wait("signal")
        found = self._port.durable("signal_get", name=name)
        if found["found"]:
            return found["data"]
        deadline = self._deadline(record, timeout)
        if deadline is not None and self._reached(deadline):
            raise WaitTimeout(f"signal {name!r} did not come in time")
        wake = iso(deadline) if deadline is not None else None
        raise Suspend(Wait("signal", key, wake_at=wake, name=name, record={"due": wake}))

    def join(
        self, child_ids: list[str], timeout: timedelta | float | None = None
    ) -> list[dict[str, JSON]]:
        """The snapshots of these tasks once every one has ended (a failed child is
        there to see, not raised), waiting durably until then; `WaitTimeout` past
        `timeout` from the first time this call was reached."""
        ids = [str(i) for i in child_ids]
        key, record = self._next_wait("join")
        snaps: list[dict[str, JSON]] = self._port.durable("snapshots", ids=ids)
        if all(s["state"] in ("succeeded", "failed", "cancelled") for s in snaps):
            return snaps
        deadline = self._deadline(record, timeout)
        if deadline is not None and self._reached(deadline):
            live = sum(1 for s in snaps if s["finished_at"] is None)
            raise WaitTimeout(f"{live} child task(s) still live")
        wake = iso(deadline) if deadline is not None else None
        raise Suspend(Wait("join", key, wake_at=wake, children=ids, record={"due": wake}))

    def spawn(self, task: str, payload: dict[str, JSON], key: str) -> str:
        """Submit a child task (fenced: a stale execution cannot), with the
        idempotency key `<this task's id>:<key>` — a re-run answers the same child."""
        if not isinstance(key, str) or not 0 < len(key) <= 100:
            raise InvalidPayload("a spawn key is a string of 1 to 100 characters")
        child: str = self._port.durable("spawn", task=task, payload=payload, key=key)
        return child

    def _deadline(self, record: EffectRecord, timeout: timedelta | float | None) -> datetime | None:
        if record.status != "none":
            return _time_of(record, "due")
        if timeout is None:
            return None
        return self._now() + timedelta(seconds=parse_duration(timeout, "timeout"))

    def _now(self) -> datetime:
        now = datetime.fromisoformat(str(self._port.durable("now")).replace("Z", "+00:00"))
        self._clock = now
        return now

    def _reached(self, at: datetime) -> bool:
        """Whether the database clock has passed `at` (a time before the clock's last
        reading in this run needs no new read: a replayed sleep costs nothing)."""
        if self._clock is not None and at <= self._clock:
            return True
        return self._now() >= at


def _time_of(record: EffectRecord, field_: str) -> datetime | None:
    if record.status == "none" or not isinstance(record.result, dict):
        return None
    value = record.result.get(field_)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
