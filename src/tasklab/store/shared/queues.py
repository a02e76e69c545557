"""Queues: their settings (pause, concurrency, rate) and what they hold."""

from __future__ import annotations

from typing import Any

from tasklab._types import JSON
from tasklab.core.queueing import KEEP, Keep, Rate
from tasklab.store.shared.claims import SqlClaims


class SqlQueues(SqlClaims):
    """The `Queues` role."""

    def configure_queue(
        self, name: str, concurrency: int | Keep | None = KEEP, rate: Rate | Keep | None = KEEP
    ) -> None:
        """Set a queue's limits; None removes one, KEEP leaves it as it is."""
        params: dict[str, Any] = {
            "name": name,
            "set_concurrency": not isinstance(concurrency, Keep),
            "concurrency": None if isinstance(concurrency, Keep) else concurrency,
            "set_rate": not isinstance(rate, Keep),
            "rate_count": rate.count if isinstance(rate, Rate) else None,
            "rate_period": rate.period if isinstance(rate, Rate) else None,
        }
        self._write_steps([("queue_settings", params)])
        self.forget_queue_view()

    def pause_queue(self, name: str, paused: bool) -> None:
        self._write_steps([("queue_pause", {"name": name, "paused": paused})])
        self.forget_queue_view()

    def queue_stats(self) -> list[dict[str, JSON]]:
        """Every queue with tasks or settings: its settings, queued and running tasks
        (from the counters), and claims so far."""
        with self._read() as conn:
            settings = {r["name"]: r for r in self._all(conn, "queue_rows")}
            counts = self._all(conn, "count_queues")
        out: dict[str, dict[str, JSON]] = {}
        for name in sorted(settings.keys() | {c["queue"] for c in counts}):
            row = settings.get(name)
            rate = (
                str(Rate(int(row["rate_count"]), float(row["rate_period"])))
                if row is not None and row["rate_count"] is not None
                else None
            )
            out[name] = {
                "name": name,
                "paused": bool(row["paused"]) if row is not None else False,
                "concurrency": row["concurrency"] if row is not None else None,
                "rate": rate,
                "queued": 0,
                "running": 0,
                "claimed": 0,
            }
        for c in counts:
            doc = out[c["queue"]]
            n = int(c["n"])
            if c["state"] == "queued":
                doc["queued"] = n
            elif c["state"] in ("running", "cancel_requested"):
                doc["running"] = int(doc["running"]) + n
            elif c["state"] == "claimed":
                doc["claimed"] = n
        return list(out.values())

    def queue_activity(self, minutes: int = 60) -> list[dict[str, JSON]]:
        """Per queue and minute over the last `minutes`: claims, and the mean and
        longest wait (ms) of the tasks claimed from when they became runnable."""
        with self._read() as conn:
            rows = self._all(conn, "queue_activity", minutes=int(minutes))
        return [
            {
                "queue": r["queue"],
                "minute": int(r["minute"]),
                "claims": int(r["claims"]),
                "wait_ms_mean": round(float(r["wait_ms_sum"]) / max(1, int(r["claims"])), 2),
                "wait_ms_max": round(float(r["wait_ms_max"]), 2),
            }
            for r in rows
        ]
