"""What a submit may say about when, where and in what order a task runs (SPEC §7),
checked once here for every interface: a bad value raises `InvalidPayload` with a
message that names it, and nothing is stored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tasklab.core.jsontext import check_text
from tasklab.errors import InvalidPayload

DEFAULT_QUEUE = "default"
PRIORITY_MIN, PRIORITY_MAX = -100, 100
MAX_DELAY = 10 * 365 * 86400.0  # ten years: anything later is a mistake, not a plan
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_RATE = re.compile(r"(\d+)\s*/\s*(s|m|h|d|sec|second|min|minute|hour|day)")
_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
_PERIODS.update({"h": 3600, "hour": 3600, "d": 86400, "day": 86400})


def check_queue(name: object, what: str = "queue") -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise InvalidPayload(f"{what} must match [A-Za-z0-9_.:-]{{1,64}}, got {name!r}")
    return name


def check_priority(value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not PRIORITY_MIN <= value <= PRIORITY_MAX
    ):
        raise InvalidPayload(
            f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}, got {value!r}"
        )
    return value


def check_key(what: str, value: object) -> str:
    """A concurrency or unique key: text of 1 to 200 characters."""
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise InvalidPayload(f"{what} must be a string of 1 to 200 characters")
    try:
        check_text(value)
    except ValueError as exc:
        raise InvalidPayload(f"{what} is not text: {exc}") from None
    return value


def parse_duration(value: object, what: str = "delay") -> float:
    """Seconds from a number, a `timedelta` or text such as `30s`, `5m`, `2h`, `1.5`."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value.strip())):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise InvalidPayload(
            f"{what} must be seconds or a duration such as 30s, 5m, 2h; got {value!r}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidPayload(f"{what} must not be negative, got {value!r}")
    if seconds > MAX_DELAY:
        raise InvalidPayload(f"{what} must be at most ten years")
    return seconds


def parse_time(value: object, what: str = "run_at") -> datetime:
    """A timezone-aware time, from a `datetime` or ISO 8601 text with an offset."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidPayload(f"{what} is not an ISO 8601 time: {value!r}") from None
    if not isinstance(value, datetime):
        raise InvalidPayload(f"{what} must be a time, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidPayload(f"{what} must carry a timezone (naive times are ambiguous)")
    return value


def check_when(at: datetime, what: str) -> datetime:
    """A time a task is to run or wake at: within ten years of now, either way (by this
    process's clock: a bound on mistakes, not a schedule). Python's times end with the
    year 9999, and a stored time beyond that — `datetime.max`, or a time near it with a
    negative offset — would be a row that no read could load again."""
    if abs((at - datetime.now(UTC)).total_seconds()) > MAX_DELAY:
        raise InvalidPayload(f"{what} must be within ten years of now, got {at.isoformat()}")
    return at


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` claims per `period` seconds: a token bucket of `count` tokens
    refilled at count/period per second."""

    count: int
    period: float

    def __str__(self) -> str:
        unit = {1: "s", 60: "m", 3600: "h", 86400: "d"}.get(int(self.period))
        return f"{self.count}/{unit}" if unit else f"{self.count}/{self.period}s"


def parse_rate(value: object) -> Rate:
    if isinstance(value, Rate):
        return value
    m = _RATE.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None or not 1 <= int(m.group(1)) <= 1_000_000:
        raise InvalidPayload(
            f"rate must look like 100/s, 600/m or 10000/h (1 to 1000000 per period), got {value!r}"
        )
    return Rate(int(m.group(1)), float(_PERIODS[m.group(2)]))


def check_concurrency(value: object, what: str = "concurrency") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise InvalidPayload(f"{what} must be an integer from 1 to 100000, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """The per-submit choices beside the payload; None: the task's default."""

    run_at: datetime | None = None
    delay: float | None = None
    queue: str | None = None
    priority: int | None = None
    concurrency_key: str | None = None
    unique_key: str | None = None

    @staticmethod
    def of(
        *,
        run_at: object = None,
        delay: object = None,
        queue: object = None,
        priority: object = None,
        concurrency_key: object = None,
        unique_key: object = None,
    ) -> SubmitOptions:
        """Checked options from Python values or their wire forms (ISO 8601 text,
        seconds or `30s`)."""
        if run_at is None and delay is None and queue is None and priority is None:
            if concurrency_key is None and unique_key is None:
                return NO_OPTIONS  # every plain submit: nothing to check
        if run_at is not None and delay is not None:
            raise InvalidPayload("give run_at or delay, not both")
        return SubmitOptions(
            run_at=check_when(parse_time(run_at), "run_at") if run_at is not None else None,
            delay=parse_duration(delay) if delay is not None else None,
            queue=check_queue(queue) if queue is not None else None,
            priority=check_priority(priority) if priority is not None else None,
            concurrency_key=(
                check_key("concurrency_key", concurrency_key)
                if concurrency_key is not None
                else None
            ),
            unique_key=check_key("unique_key", unique_key) if unique_key is not None else None,
        )

    @staticmethod
    def from_wire(body: dict[str, Any]) -> SubmitOptions:
        """The options of a JSON submit (HTTP body, JSON-lines frame)."""
        return SubmitOptions.of(**{k: body.get(k) for k in WIRE_FIELDS})


class Keep:
    """The value that leaves a setting as it is (None removes it)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep()

WIRE_FIELDS = ("run_at", "delay", "queue", "priority", "concurrency_key", "unique_key")
NO_OPTIONS = SubmitOptions()
