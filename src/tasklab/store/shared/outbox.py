"""Outbox: webhook subscriptions, pending notifications, delivery records."""

from __future__ import annotations

from tasklab.core.models import (
    JSON,
)
from tasklab.store.shared.core import SqlCore


class SqlOutbox(SqlCore):
    """The `Outbox` role."""

    def outbox_pending(self, url: str, limit: int) -> list[dict[str, JSON]]:
        with self._read() as conn:
            rows = self._all(conn, "outbox_pending", url=url, limit=limit)
        return [
            {"event_id": r["event_id"], "task_id": r["task_id"], "attempts": r["attempts"] or 0}
            for r in rows
        ]

    def record_delivery(
        self, event_id: str, url: str, ok: bool, delay: float, error: str | None
    ) -> None:
        with self._write() as conn:
            self.faults.check("delivery_record")
            self._x(
                conn,
                "delivery_attempted",
                event_id=event_id,
                url=url,
                ok=ok,
                delay=delay,
                error=error,
            )

    def subscribe(self, urls: list[str]) -> list[str]:
        """Subscribe webhook URLs (kept in the database: notifications made while no
        dispatcher runs wait for it). A new URL gets the whole history queued once.
        Answers the URLs that were new."""
        new: list[str] = []
        with self._write() as conn:
            self._lock_table(conn, "subscribe_lock")
            for url in urls:
                if self._one(conn, "subscribe", url=url) is not None:
                    self._x(conn, "queue_history", url=url)
                    new.append(url)
        return new

    def unsubscribe(self, url: str) -> bool:
        """Forget a webhook URL and drop what it had still to receive."""
        with self._write() as conn:
            gone = self._x(conn, "unsubscribe", url=url).rowcount
            self._x(conn, "drop_pending", url=url)
        return bool(gone)

    def webhooks(self) -> dict[str, int]:
        """Subscribed URLs and how many notifications each has still to receive."""
        with self._read() as conn:
            return {r["url"]: int(r["pending"]) for r in self._all(conn, "webhooks")}

    def notification_lag(self, url: str) -> float:
        with self._read() as conn:
            row = self._one(conn, "oldest_undelivered", url=url)
        return float(row["lag"]) if row and row["lag"] is not None else 0.0

    def outbox_for(self, task_id: str) -> dict[str, JSON] | None:
        with self._read() as conn:
            row = self._one(conn, "outbox_for_task", task_id=task_id)
        return {"event_id": row["event_id"], "task_id": row["task_id"]} if row else None
