"""`TaskContext`: what a task function sees of tasklab, over a small port.

The port is the running execution (leased) or the open transaction (transactional);
the context itself does no I/O of its own and is the same for every runner.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from tasklab.core.durable import DurableMethods
from tasklab.core.jsontext import check_text, dumps
from tasklab.core.models import JSON, EffectRecord
from tasklab.errors import Cancelled, InvalidPayload


class ExecutionPort(Protocol):
    task_id: str
    attempt: int
    connection: Any

    data_dir: Any

    def cancel_requested(self) -> bool: ...
    def wait_cancel(self, timeout: float) -> bool: ...
    def add_event(self, etype: str, data: JSON) -> None: ...
    def add_text(self, text: str) -> None: ...
    def heartbeat(self) -> None: ...
    def effect_get(self, key: str) -> EffectRecord: ...
    def effect_start(self, key: str) -> None: ...
    def effect_done(self, key: str, result: JSON) -> None: ...
    def durable(self, op: str, **args: Any) -> Any: ...


@dataclass
class Effect:
    """One external side effect, as previous attempts left it.

    `previous` is `none`, `started` (an attempt began it and we do not know whether it
    completed: check the outside world) or `done` (with `result`)."""

    key: str
    previous: str
    result: JSON = None
    _result_set: bool = False

    @property
    def done(self) -> bool:
        return self.previous == "done"

    def set_result(self, value: JSON) -> None:
        _check_json(value, "effect result")
        self.result = value
        self._result_set = True


class TaskContext(DurableMethods):
    """Passed as the first argument to every task function. The durable methods —
    `step`, `sleep_until`, `sleep_for`, `wait_signal`, `join`, `spawn` — are in
    core/durable.py."""

    _port: ExecutionPort

    def __init__(self, port: ExecutionPort) -> None:
        self._port = port
        self._waits = 0  # the waits reached in this run, in order (their journal keys)

    @property
    def task_id(self) -> str:
        return self._port.task_id

    @property
    def attempt(self) -> int:
        """1 for the first execution, 2 for the first retry, …"""
        return self._port.attempt

    @property
    def connection(self) -> Any:
        """For `transactional=True` tasks: the database connection inside the run's
        transaction (None otherwise)."""
        return self._port.connection

    @property
    def cancel_requested(self) -> bool:
        return self._port.cancel_requested()

    def checkpoint(self) -> None:
        """Raise `tasklab.Cancelled` if this task should stop (cancel requested,
        deadline passed, shutdown, or its lease was lost)."""
        if self._port.cancel_requested():
            raise Cancelled(f"task {self._port.task_id} was asked to stop")

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake and raise `Cancelled` as soon as the task should stop."""
        if self._port.wait_cancel(seconds):
            raise Cancelled(f"task {self._port.task_id} was asked to stop")

    @property
    def data_dir(self) -> Any:
        """The directory tasks may read files from (`--data-dir`), or None."""
        return self._port.data_dir

    def emit(self, data: JSON) -> None:
        """Append one `progress` event with `data` (any JSON value)."""
        _check_json(data, "progress data")
        self._port.add_event("progress", data)

    def stream(self, text: str) -> None:
        """Append text to the task's output; written as coalesced `chunk` events."""
        if not isinstance(text, str):
            raise TypeError("ctx.stream() takes text")
        try:
            check_text(text)
        except ValueError as exc:
            raise InvalidPayload(f"streamed text is not text: {exc}") from None
        if text:
            self._port.add_text(text)

    def heartbeat(self) -> None:
        """Renew the lease now (tasklab also does it every lease/3 on its own)."""
        self._port.heartbeat()

    @contextmanager
    def effect(self, key: str) -> Iterator[Effect]:
        """Wrap one external side effect, keyed by this task and `key` (stable across
        attempts). Records `started` before and `done` after; a retry sees what
        already happened through `.previous` / `.done` / `.result`."""
        handle = self.effect_open(key)
        yield handle
        self.effect_close(handle)

    # The two halves of `effect`, for the async adapter (each may do database I/O).
    def effect_open(self, key: str) -> Effect:
        record = self._port.effect_get(key)
        handle = Effect(key, record.status, record.result)
        if not handle.done:
            self._port.effect_start(key)
        return handle

    def effect_close(self, handle: Effect) -> None:
        if not handle.done or handle._result_set:
            self._port.effect_done(handle.key, handle.result)


def _check_json(value: JSON, what: str) -> None:
    try:
        dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{what} is not JSON: {exc}") from None
