"""Schedules: when a periodic task is due. Pure: the scheduler (service/scheduler.py)
reads the store's clock and asks here which ticks fall between two times.

A cron expression is read by `cronsim` (healthchecks.io's parser: no dependencies,
DST-aware in any IANA timezone, strict about bad fields) — not by hand. An interval
ticks at whole multiples of itself since the Unix epoch (UTC), so every scheduler on
every machine computes the same ticks without talking to the others.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from tasklab.core.models import JSON
from tasklab.core.queueing import check_priority, check_queue, parse_duration
from tasklab.errors import InvalidPayload

CATCH_UP = ("latest", "all", "skip")
MAX_CATCH_UP = 1000  # ticks submitted per schedule per pass under catch_up="all"
MISFIRE_GRACE = 60.0  # seconds: under "skip", a tick later than this is not submitted
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


@dataclass(frozen=True)
class ScheduleDef:
    """One schedule: run `task` with `payload` at every tick of `cron` or `every`."""

    name: str
    task: str
    cron: str | None = None
    every: float | None = None  # seconds
    timezone: str = "UTC"
    payload: dict[str, JSON] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    catch_up: str = "latest"
    origin: str = "runtime"

    @staticmethod
    def checked(
        name: object,
        task: str,
        *,
        cron: object = None,
        every: object = None,
        timezone: object = "UTC",
        payload: object = None,
        queue: object = None,
        priority: object = None,
        catch_up: object = "latest",
        origin: str = "runtime",
    ) -> ScheduleDef:
        """A schedule from what a caller gave, or `InvalidPayload` naming what is wrong
        (the payload is checked against the task by whoever registers it)."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidPayload(f"schedule name must match [A-Za-z0-9_.:-]{{1,100}}, got {name!r}")
        if (cron is None) == (every is None):
            raise InvalidPayload("a schedule takes one of cron or every")
        if catch_up not in CATCH_UP:
            raise InvalidPayload(f"catch_up must be one of {', '.join(CATCH_UP)}, got {catch_up!r}")
        if not isinstance(timezone, str):
            raise InvalidPayload("timezone must be an IANA name such as Europe/Paris")
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidPayload(f"unknown timezone {timezone!r}") from None
        seconds = None
        if cron is not None:
            if not isinstance(cron, str):
                raise InvalidPayload("cron must be a cron expression such as '*/5 * * * *'")
            try:
                CronSim(cron, datetime.now(zone))
            except (CronSimError, ValueError) as exc:
                raise InvalidPayload(f"invalid cron expression {cron!r}: {exc}") from None
        else:
            seconds = parse_duration(every, "every")
            if seconds < 1:
                raise InvalidPayload("every must be at least one second")
        if payload is not None and not isinstance(payload, dict):
            raise InvalidPayload("a schedule's payload must be a JSON object")
        return ScheduleDef(
            name=name,
            task=task,
            cron=cron,
            every=seconds,
            timezone=timezone,
            payload=dict(payload or {}),
            queue=check_queue(queue) if queue is not None else None,
            priority=check_priority(priority) if priority is not None else None,
            catch_up=str(catch_up),
            origin=origin,
        )

    @property
    def expression(self) -> str:
        return self.cron if self.cron is not None else f"every {_seconds_text(self.every or 0)}"

    def same_timing(self, row: dict[str, Any]) -> bool:
        """Whether a stored schedule ticks as this one does (then its progress stays)."""
        return (
            row["cron"] == self.cron
            and (row["every_s"] is None) == (self.every is None)
            and (self.every is None or math.isclose(float(row["every_s"]), self.every))
            and row["timezone"] == self.timezone
        )

    def next_after(self, at: datetime) -> datetime:
        """The first tick strictly after `at`."""
        return next(self.ticks_after(at))

    def ticks_after(self, at: datetime) -> Iterator[datetime]:
        """The ticks strictly after `at`, in order, as UTC times."""
        if self.every is not None:
            k = math.floor(at.timestamp() / self.every) + 1
            while True:
                yield datetime.fromtimestamp(k * self.every, UTC)
                k += 1
        assert self.cron is not None
        local = at.astimezone(ZoneInfo(self.timezone))
        for tick in CronSim(self.cron, local):
            if tick > at:  # cronsim answers ticks after `local` already; DST folds aside
                yield tick.astimezone(UTC)

    def latest_until(self, at: datetime) -> datetime:
        """The last tick at or before `at`."""
        if self.every is not None:
            return datetime.fromtimestamp(math.floor(at.timestamp() / self.every) * self.every, UTC)
        assert self.cron is not None
        local = (at + timedelta(milliseconds=1)).astimezone(ZoneInfo(self.timezone))
        return next(CronSim(self.cron, local, reverse=True)).astimezone(UTC)

    def due(self, next_tick: datetime, now: datetime) -> tuple[list[datetime], datetime]:
        """The ticks to submit now, oldest first, and the next tick to wait for, given
        the first tick not yet submitted and the database clock. `catch_up` decides what
        happens to ticks missed while no scheduler ran: `all` submits each (at most
        MAX_CATCH_UP per pass, the rest at the next), `latest` only the last one, `skip`
        only a last one less than MISFIRE_GRACE late."""
        if next_tick > now:
            return [], next_tick
        if self.catch_up == "all":
            missed: list[datetime] = []
            tick, ticks = next_tick, self.ticks_after(next_tick)
            while tick <= now and len(missed) < MAX_CATCH_UP:
                missed.append(tick)
                tick = next(ticks)
            return missed, tick
        latest = max(self.latest_until(now), next_tick)
        following = self.next_after(now)
        if self.catch_up == "skip" and (now - latest).total_seconds() > MISFIRE_GRACE:
            return [], following
        return [latest], following


@dataclass(frozen=True, slots=True)
class Advance:
    """Move schedule `name` from the stored next tick `raw_from` (as the store keeps
    it) to `next_tick`, noting the last tick submitted and its task."""

    name: str
    raw_from: Any
    next_tick: datetime
    last_tick: datetime | None
    last_task_id: str | None


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of one tick: N schedulers submit it, one task exists."""
    return f"schedule:{name}:{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _seconds_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
