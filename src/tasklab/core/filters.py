"""Which tasks a search or a bulk action means: one checked filter for every interface
(Python, HTTP, JSON-lines, CLI). Pure: nothing here reads the store.

Ids are time-ordered (store/ids.py: twelve hex digits of milliseconds since the epoch
first), so an id prefix and a created range are both ranges of the primary key. The
created range is therefore read off the id: the submitting process's clock at submit,
which is the database clock's `created_at` give or take the machines' clock skew.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from tasklab.core.queueing import check_key, check_queue, parse_time
from tasklab.core.states import State
from tasklab.errors import InvalidPayload

_TASK_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
_HEX = re.compile(r"[0-9a-f]{1,24}")
_ID = re.compile(r"[0-9a-f]{24}")
_WIDTH = 24  # hex digits in a task id


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Every criterion given must hold; None means any."""

    state: State | None = None
    task: str | None = None
    queue: str | None = None
    parent_id: str | None = None
    idempotency_key: str | None = None
    id_prefix: str | None = None
    created_after: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive

    @classmethod
    def of(cls, **given: Any) -> TaskFilter:
        """Checked from loose input (text from a query string or JSON): InvalidPayload
        names the first bad field, or a field that is not a criterion."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise InvalidPayload(f"unknown filter field(s) {unknown}; known: {sorted(known)}")
        values = {k: v for k, v in given.items() if v is not None and v != ""}
        out: dict[str, Any] = {}
        if "state" in values:
            out["state"] = _state(values["state"])
        if "task" in values:
            out["task"] = _match(values["task"], _TASK_NAME, "task")
        if "queue" in values:
            out["queue"] = check_queue(values["queue"])
        if "parent_id" in values:
            out["parent_id"] = _match(values["parent_id"], _ID, "parent_id")
        if "idempotency_key" in values:
            out["idempotency_key"] = check_key("idempotency_key", values["idempotency_key"])
        if "id_prefix" in values:
            out["id_prefix"] = _match(str(values["id_prefix"]).lower(), _HEX, "id_prefix")
        for name in ("created_after", "created_before"):
            if name in values:
                out[name] = parse_time(values[name], name)
        return cls(**out)

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def id_range(self) -> tuple[str | None, str | None]:
        """The primary-key range the prefix and the created range allow: (lowest id,
        inclusive; first id past the range, exclusive); None where unbounded."""
        low: str | None = None
        high: str | None = None
        if self.id_prefix is not None:
            low = self.id_prefix.ljust(_WIDTH, "0")
            high = _after_prefix(self.id_prefix)
        if self.created_after is not None:
            low = max(low or "", _id_at(self.created_after))
        if self.created_before is not None:
            bound = _id_at(self.created_before)
            high = bound if high is None else min(high, bound)
        return low, high

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, State):
                value = value.value
            elif isinstance(value, datetime):
                value = value.isoformat()
            if value is not None:
                doc[f.name] = value
        return doc


def _state(value: object) -> State:
    if isinstance(value, State):
        return value
    try:
        return State(str(value))
    except ValueError:
        raise InvalidPayload(
            f"unknown state {value!r}; one of {[s.value for s in State]}"
        ) from None


def _match(value: object, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidPayload(f"{what} must match {pattern.pattern}, got {value!r}")
    return value


def _id_at(at: datetime) -> str:
    """The lowest id a task created at that instant can have."""
    ms = max(0, int(at.timestamp() * 1000))
    return f"{ms:012x}".ljust(_WIDTH, "0")[:_WIDTH]


def _after_prefix(prefix: str) -> str | None:
    """The first id past every id with this prefix (None: past them all)."""
    value = int(prefix, 16) + 1
    if value >= 16 ** len(prefix):
        return None
    return f"{value:0{len(prefix)}x}".ljust(_WIDTH, "0")
