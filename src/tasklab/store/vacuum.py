"""PostgreSQL: keep the queue's tables vacuumed when autovacuum does not.

Every task is updated several times (claimed, fenced, finished); each update leaves a
dead row version and dead index entries until VACUUM removes them. Claims walk the
claimable index from its oldest end, where the claimed tasks' dead entries pile up: on
a server with autovacuum off (this project's test server) or far behind, a
1,000,000-task drain slowed by half. So the worker asks the store, at its reaper's
pace, to look at the dead rows of tasklab's tables (a cheap statistics read) and to
vacuum those past a threshold — in a thread and on a connection of its own (no
statement timeout: a vacuum of a large table takes seconds), `SKIP_LOCKED` so that it
never waits behind another vacuum. With autovacuum on and keeping up (migration 007
tunes it for the tasks table), the threshold is not reached and nothing runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tasklab.store")

# The tables a queue churns; names from this fixed list only (VACUUM takes no
# parameters, so the statement is built from them).
TABLES = ("tasks", "events", "outbox", "deliveries")


class Vacuumer:
    def __init__(
        self,
        connect: Callable[[], Any],
        dead_rows_query: str,
        threshold: int = 50_000,
        every: float = 10.0,
    ) -> None:
        self._connect = connect
        self._query = dead_rows_query
        self.threshold = threshold
        self.every = every
        self._lock = threading.Lock()
        self._running = False
        self._last = 0.0
        self.vacuumed: list[str] = []  # tables vacuumed, in order (tests read it)

    def maybe(self) -> None:
        """Never blocks: at most one look every `every` seconds, in a thread."""
        now = time.monotonic()
        with self._lock:
            if self._running or now - self._last < self.every:
                return
            self._running, self._last = True, now
        threading.Thread(target=self._run, name="tasklab-vacuum", daemon=True).start()

    def _run(self) -> None:
        try:
            with self._connect() as conn:
                conn.execute("SET statement_timeout = 0")
                rows = conn.execute(self._query).fetchall()
                for row in rows:
                    if row["name"] in TABLES and int(row["dead"]) >= self.threshold:
                        conn.execute(f"VACUUM (SKIP_LOCKED) {row['name']}")
                        self.vacuumed.append(row["name"])
        except Exception as exc:  # housekeeping: the next look tries again
            log.warning("vacuum of the queue tables failed: %s", exc)
        finally:
            with self._lock:
                self._running = False
