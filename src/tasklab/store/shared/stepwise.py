"""The limited claim step by step (a statement per step, in one write transaction),
for a dialect without stored procedures: the rule `claims` describes, with `allowance`
and `choose` deciding. PostgreSQL runs the same rule as one function call."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from tasklab._types import Row
from tasklab.core.models import ClaimRequest
from tasklab.store.shared.claims import Allowance, SqlClaims, allowance, choose


class StepwiseLimitedClaim(SqlClaims):
    def _claim_limited(self, conn: Any, r: ClaimRequest, served: list[str]) -> list[Row]:
        for query, params in self._stager_steps():
            self._x(conn, query, **params)
        self._claim_locks(conn, self._lock_keys(r, served))
        settings = {
            row["name"]: row
            for row in self._all(conn, "queue_limits", names=self._list_param(served))
        }
        room: dict[str, Allowance] = {}
        for queue in served:
            row = settings.get(queue)
            if row is None:
                room[queue] = Allowance(r.limit)
                continue
            now = self._at(row["now"])
            found = allowance(row, r.limit, now, self._dt(row["tokens_at"]))
            found.now = row["now"]
            room[queue] = found
        # First as many candidates per queue as it has room (a few more where keys may
        # hold some back); a queue whose page came back full and whose room was not
        # filled — keys at their limit ahead — is read again four times deeper.
        wanted = {q: a.left + (8 if r.keyed else 0) for q, a in room.items() if a.left > 0}
        candidates: dict[str, list[Row]] = {}
        live: dict[tuple[str, str], int] = {}
        chosen: list[Row] = []
        for _ in range(4):
            for queue, n in wanted.items():
                page = self._all(
                    conn, "claim_candidates", queue=queue, names=self._list_param(r.names), limit=n
                )
                candidates[queue] = [{**dict(c), "queue": queue} for c in page]
            pairs = {
                (c["task"], c["concurrency_key"])
                for q in wanted
                for c in candidates[q]
                if c["concurrency_key"] is not None
            }
            if pairs - live.keys():
                live |= dict.fromkeys(pairs - live.keys(), 0)
                live |= self._key_counts(conn, sorted(pairs))
            chosen = choose(candidates, {q: a.left for q, a in room.items()}, live, r.limit)
            if len(chosen) >= r.limit or not r.keyed:
                break
            taken = {q: sum(1 for c in chosen if c["queue"] == q) for q in candidates}
            wanted = {
                q: min(4 * len(rows), 4096)
                for q, rows in candidates.items()
                if len(rows) == wanted.get(q, -1) and taken[q] < room[q].left and len(rows) < 4096
            }
            if not wanted:
                break
        if not chosen:
            return []
        claimed = self._all(
            conn,
            "claim_ids",
            ids=self._list_param([c["id"] for c in chosen]),
            owner=r.owner,
            lease=r.lease,
        )
        got = {row["id"] for row in claimed}
        for queue, a in room.items():
            if a.tokens is not None:
                used = sum(1 for c in chosen if c["queue"] == queue and c["id"] in got)
                self._x(conn, "take_tokens", name=queue, tokens=a.tokens - used, at=a.now)
        order = {c["id"]: i for i, c in enumerate(chosen)}
        return sorted(claimed, key=lambda row: order[row["id"]])

    def _key_counts(self, conn: Any, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        rows = self._all(conn, "key_counts_of", **self._pairs_param(pairs))
        return {(row["task"], row["key"]): int(row["n"]) for row in rows}

    @abstractmethod
    def _claim_locks(self, conn: Any, keys: list[int]) -> None:
        """Take a limited claim's locks (sorted keys) until its commit."""

    @abstractmethod
    def _pairs_param(self, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        """(task, key) pairs as `key_counts_of` takes them."""
