"""Recovery: the reaper, exclusive recovery (which marks every live worker row dead)."""

from __future__ import annotations

from tasklab.core.jsontext import dumps
from tasklab.core.models import Expired
from tasklab.core.policy import Backoff, expiry_outcome, settle
from tasklab.core.states import State
from tasklab.store.shared.core import SqlCore


class SqlRecovery(SqlCore):
    """The `Recovery` role."""

    def expire(self, backoff: Backoff) -> list[str]:
        """The reaper: settle tasks whose lease ran out, by the lease-expiry policy."""
        resolved = self._resolve("expired", backoff, exclusive=False)
        if resolved:
            self.bump("expired_leases", len(resolved))
        return resolved

    def recover_running(self, backoff: Backoff) -> list[str]:
        """Exclusive recovery: with no executor alive, settle every live task now."""
        with self._exclusive():
            resolved = self._resolve("live", backoff, exclusive=True)
            with self._write() as conn:
                self._x(conn, "clear_workers")
        return resolved

    def _resolve(self, query: str, backoff: Backoff, *, exclusive: bool) -> list[str]:
        resolved: list[str] = []
        while True:
            with self._write() as conn:
                rows = self._all(conn, query, limit=500)
                for r in rows:
                    task = Expired(
                        r["id"],
                        r["epoch"],
                        State(r["state"]),
                        r["attempt"],
                        r["max_attempts"],
                        bool(r["retry_safe"]),
                        bool(r["request_bound"]),
                    )
                    settled = settle(task.state, expiry_outcome(task, backoff))
                    if self._apply(
                        conn,
                        task.task_id,
                        task.epoch,
                        task.state,
                        settled,
                        "resolve_expired",
                        exclusive=exclusive,
                    ):
                        resolved.append(task.task_id)
                        data = dumps(
                            {
                                "attempt": task.attempt,
                                "epoch": task.epoch,
                                "state": settled.state.value,
                            }
                        )
                        self._x(conn, "expiry_event", id=task.task_id, data=data)
            if len(rows) < 500:
                return resolved
