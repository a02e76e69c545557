"""Schedules: stored, so that they outlive the process that made them, and advanced by
a conditional write, so that N schedulers agree without a leader (the idempotency key
of each tick makes one task of it whoever submits first)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tasklab._types import Row
from tasklab.core.jsontext import dumps
from tasklab.core.models import JSON, iso
from tasklab.core.schedules import Advance, ScheduleDef
from tasklab.store.shared.core import SqlCore


class SqlSchedules(SqlCore):
    """The `Schedules` role."""

    def put_schedule(self, spec: ScheduleDef, next_tick: datetime, *, keep: bool) -> bool:
        """Store a schedule. With `keep`, one already stored that ticks the same way
        keeps its progress (a restart must not lose or repeat ticks); answers whether
        the row was written."""
        with self._write() as conn:
            row = self._one(conn, "schedule_get", name=spec.name)
            if keep and row is not None and spec.same_timing(dict(row)) and _same(row, spec):
                return False
            self._x(
                conn,
                "schedule_put",
                name=spec.name,
                task=spec.task,
                cron=spec.cron,
                every_s=spec.every,
                timezone=spec.timezone,
                payload=dumps(spec.payload),
                queue=spec.queue,
                priority=spec.priority,
                catch_up=spec.catch_up,
                origin=spec.origin,
                next_tick=self._time_param(
                    next_tick
                    if row is None or not keep or not spec.same_timing(dict(row))
                    else self._at(row["next_tick"])
                ),
            )
        return True

    def remove_schedule(self, name: str) -> bool:
        with self._write() as conn:
            return bool(self._x(conn, "schedule_delete", name=name).rowcount)

    def schedules(self) -> list[dict[str, JSON]]:
        with self._read() as conn:
            rows = self._all(conn, "schedules_all")
        return [self._schedule_doc(r) for r in rows]

    def due_schedules(self, limit: int) -> list[tuple[ScheduleDef, dict[str, Any]]]:
        """Schedules whose next tick has come: each with its progress (`next_tick`,
        `now` — the database clock — and `raw_next`, the stored value that
        `advance_schedule` compares against)."""
        with self._read() as conn:
            rows = self._all(conn, "schedules_due", limit=limit)
        return [
            (
                _spec(r),
                {
                    "next_tick": self._at(r["next_tick"]),
                    "now": self._at(r["now"]),
                    "raw_next": r["next_tick"],
                },
            )
            for r in rows
        ]

    def advance_schedules(self, moves: list[Advance]) -> None:
        """Move schedules on, in one transaction (PostgreSQL: one statement), each
        unless another scheduler already did."""
        params = [
            {
                "name": m.name,
                "from_tick": m.raw_from,
                "next_tick": self._time_param(m.next_tick),
                "last_tick": self._time_param(m.last_tick) if m.last_tick is not None else None,
                "last_task_id": m.last_task_id,
            }
            for m in moves
        ]
        with self._write() as conn:
            self._executemany(conn, "schedule_advance", params)

    def _schedule_doc(self, r: Row) -> dict[str, JSON]:
        spec = _spec(r)
        return {
            "name": spec.name,
            "task": spec.task,
            "expression": spec.expression,
            "cron": spec.cron,
            "every": spec.every,
            "timezone": spec.timezone,
            "payload": spec.payload,
            "queue": spec.queue,
            "priority": spec.priority,
            "catch_up": spec.catch_up,
            "origin": spec.origin,
            "next_tick": iso(self._dt(r["next_tick"])),
            "last_tick": iso(self._dt(r["last_tick"])),
            "last_task_id": r["last_task_id"],
        }


def _spec(r: Row) -> ScheduleDef:
    return ScheduleDef(
        name=r["name"],
        task=r["task"],
        cron=r["cron"],
        every=float(r["every_s"]) if r["every_s"] is not None else None,
        timezone=r["timezone"],
        payload=json.loads(r["payload"]),
        queue=r["queue"],
        priority=r["priority"],
        catch_up=r["catch_up"],
        origin=r["origin"],
    )


def _same(row: Row, spec: ScheduleDef) -> bool:
    """Whether a stored schedule says what `spec` says (then nothing is written)."""
    stored = _spec(row)
    return stored == spec
