"""Claiming with queues, priorities, delays and limits (SPEC §7), inside the claim
transaction so that no process's memory decides anything a crash could undo.

Two paths, one rule:
- the *open claim*: one queue, not paused, no concurrency or rate limit, no task with
  a per-key limit waiting in it that this claimer could run — one statement
  (`claim_next`) walking the queue's ready index. Its SQL refuses a queue that is
  paused or limited meanwhile, so a stale view can only make it claim less, never
  break a limit.
- the *limited claim*: everything else, in one write transaction: take the locks
  (PostgreSQL: an advisory lock per queue served and per task name with a per-key
  limit, in one order; SQLite's writers take turns anyway), read the queues' settings
  and live counts *after* them (the counters are kept by the transactions that change
  states, so a finishing task gives its slot back in its own commit), read the first
  runnable tasks of each queue in claim order, choose, claim the chosen, take the rate
  tokens. Concurrent finishes only lower the counts read, so a limit can be
  under-used for a moment, never exceeded.

Which path a claim takes comes from a view of the queues (names, paused, limited,
holding tasks) cached for a quarter of a second — or 50 ms after a claim that came
back short, so that a new queue or a resume is seen at once where it matters. Only
queues holding queued tasks are read: one busy queue among many configured ones is
still an open claim.
"""

from __future__ import annotations

import hashlib
import math
import time
from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tasklab._types import Row
from tasklab.core.models import ClaimRequest
from tasklab.store.shared.core import SqlCore

VIEW_TTL = 0.25
VIEW_TTL_SHORT = 0.05
PROMOTE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class QueueView:
    known: tuple[str, ...]  # queues with queued tasks or settings
    paused: frozenset[str]
    limited: frozenset[str]
    keyed: frozenset[str]  # queues where tasks with a per-key limit wait
    busy: frozenset[str]  # queues with queued tasks
    at: float  # monotonic time of the read


@dataclass(slots=True)
class Allowance:
    """How many tasks a queue may still start in this claim, and its bucket."""

    left: int
    tokens: float | None = None  # after refill; None: no rate limit
    now: Any = None  # the database clock, as the dialect stores it


def lock_key(kind: str, name: str) -> int:
    """A stable signed 64-bit advisory lock key for a queue or a task name."""
    digest = hashlib.blake2b(f"tasklab.{kind}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def allowance(row: Row, limit: int, now: datetime, tokens_at: datetime | None) -> Allowance:
    """A queue's room: the claim's limit, its concurrency left, its whole tokens."""
    left = limit
    if row["paused"]:
        return Allowance(0)
    if row["concurrency"] is not None:
        left = min(left, int(row["concurrency"]) - int(row["running"]))
    tokens = None
    if row["rate_count"] is not None:
        count, period = int(row["rate_count"]), float(row["rate_period"])
        held = float(row["tokens"]) if row["tokens"] is not None else float(count)
        elapsed = max(0.0, (now - tokens_at).total_seconds()) if tokens_at else 0.0
        tokens = min(float(count), held + elapsed * count / period)
        left = min(left, math.floor(tokens + 1e-9))
    return Allowance(max(0, left), tokens)


def choose(
    candidates: dict[str, list[Row]],
    room: dict[str, int],
    live_per_key: dict[tuple[str, str], int],
    limit: int,
) -> list[Row]:
    """The tasks to claim: candidates of all queues merged in claim order (priority,
    then run_after, then id), each taken while its queue has room, its key is under
    its limit (counting those taken here) and the claim has slots. Pure."""
    merged = sorted(
        (c for rows in candidates.values() for c in rows),
        key=lambda c: (-c["priority"], c["run_after"], c["id"]),
    )
    left = dict(room)
    keys = dict(live_per_key)
    chosen: list[Row] = []
    for c in merged:
        if len(chosen) >= limit:
            break
        queue = c["queue"]
        if left.get(queue, 0) <= 0:
            continue
        if c["concurrency_key"] is not None and c["concurrency_limit"] is not None:
            pair = (c["task"], c["concurrency_key"])
            if keys.get(pair, 0) >= int(c["concurrency_limit"]):
                continue
            keys[pair] = keys.get(pair, 0) + 1
        left[queue] -= 1
        chosen.append(c)
    return chosen


class SqlClaims(SqlCore):
    """Both claim paths; `SqlLeases` calls `_claim_rows` wherever it claims."""

    _view: QueueView | None = None  # replaced whole, never changed in place
    _short = False

    # ---- which path ------------------------------------------------------------------
    def queue_view(self, conn: Any = None) -> QueueView:
        """The cached view; read again when old, or now on `conn` (inside a write
        transaction: then it also sees what that transaction changed)."""
        view = self._view
        age = time.monotonic() - view.at if view is not None else math.inf
        if (
            conn is not None
            or view is None
            or age > VIEW_TTL
            or (self._short and age > VIEW_TTL_SHORT)
        ):
            if conn is not None:
                rows = self._all(conn, "queue_view")
            else:
                with self._read() as reader:
                    rows = self._all(reader, "queue_view")
            view = QueueView(
                known=tuple(sorted({r["name"] for r in rows})),
                paused=frozenset(r["name"] for r in rows if r["paused"]),
                limited=frozenset(r["name"] for r in rows if r["limited"]),
                keyed=frozenset(r["name"] for r in rows if r["keyed"]),
                busy=frozenset(r["name"] for r in rows if r["busy"]),
                at=time.monotonic(),
            )
            self._view, self._short = view, False
        return view

    def view_is_stale(self) -> bool:
        """Whether the view is older than a short claim's patience."""
        view = self._view
        return view is None or time.monotonic() - view.at > VIEW_TTL_SHORT

    def limited_queues(self) -> frozenset[str]:
        return self.queue_view().limited

    def forget_queue_view(self) -> None:
        """Queue settings changed here: read them again at the next claim."""
        self._view = None

    def _served(self, r: ClaimRequest, conn: Any = None) -> list[str]:
        """The queues this claim reads: served, not paused, holding queued tasks as of
        the view — a queue that just got its first tasks while others are busy is seen
        at the next read of the view (within VIEW_TTL, or VIEW_TTL_SHORT after a claim
        that came back short)."""
        view = self.queue_view(conn)
        served = r.queues if r.queues is not None else list(view.known)
        unpaused = [q for q in served if q not in view.paused]
        # none busy as far as the view knows: claim from them all, the SQL finds out (a
        # task queued a moment ago by a commit the view has not seen is claimed now)
        return [q for q in unpaused if q in view.busy] or unpaused

    def _open_queue(self, r: ClaimRequest, served: list[str]) -> str | None:
        """The one queue of an open claim, or None (limited claim, or nothing). A
        queue where tasks with a per-key limit wait takes the limited path when the
        claimer runs such tasks; the open claim's SQL skips them either way."""
        view = self.queue_view()
        if len(served) != 1 or served[0] in view.limited:
            return None
        if r.keyed and served[0] in view.keyed:
            return None
        return served[0]

    def _open_params(self, r: ClaimRequest, queue: str) -> dict[str, Any]:
        return {
            "names": self._list_param(r.names),
            "queue": queue,
            "limit": r.limit,
            "owner": r.owner,
            "lease": r.lease,
        }

    def _stager_steps(self) -> list[tuple[str, dict[str, Any]]]:
        """Before a claim: delayed tasks come due, waiting tasks whose time came are
        queued again (a dialect may do both in one statement)."""
        return [("promote_due", {"limit": PROMOTE_BATCH}), ("wake_due", {"limit": PROMOTE_BATCH})]

    def _stage(self) -> int:
        """Run the stager alone (no queue is busy, but delayed or waiting tasks may
        have come due); how many tasks it made claimable."""
        with self._write() as conn:
            moved = 0
            for query, params in self._stager_steps():
                cur = self._x(conn, query, **params)
                rows = cur.fetchall() if cur.description is not None else []
                moved += int(rows[0]["moved"] or 0) if rows else max(cur.rowcount, 0)
        return moved

    def _open_steps(self, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The statements of an open claim, the claim last (a dialect whose claim
        statement does not run the stager itself runs it first)."""
        return [*self._stager_steps(), ("claim_next", params)]

    def _note_claimed(self, r: ClaimRequest, got: int) -> None:
        if got < r.limit:
            self._short = True

    # ---- claiming inside a transaction -----------------------------------------------
    def _claim_rows(self, conn: Any, r: ClaimRequest) -> list[Row]:
        served = self._served(r)
        if not served:  # the view may not know a queue this very transaction filled
            served = self._served(r, conn)
        if not served:
            rows: list[Row] = []
        elif (queue := self._open_queue(r, served)) is not None:
            rows = []
            for query, params in self._open_steps(self._open_params(r, queue)):
                rows = self._all(conn, query, **params)
        else:
            rows = self._claim_limited(conn, r, served)
        self._note_claimed(r, len(rows))
        return rows

    def _lock_keys(self, r: ClaimRequest, served: list[str]) -> list[int]:
        """A limited claim's advisory lock keys, sorted (one order: no deadlock)."""
        keys = {lock_key("queue", q) for q in served} | {lock_key("keys", n) for n in r.keyed}
        return sorted(keys)

    @abstractmethod
    def _claim_limited(self, conn: Any, r: ClaimRequest, served: list[str]) -> list[Row]:
        """The limited claim, in the caller's write transaction: SQLite step by step
        (`stepwise.StepwiseLimitedClaim`), PostgreSQL in one call
        (`tasklab_claim_limited`, migration 010) — the same rule either way."""
