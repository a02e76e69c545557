"""Search and retries: tasks by filter (keyset-paged, each criterion on an index), the
ids a bulk action takes batch by batch, and retries made of ended tasks."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from tasklab.core.filters import TaskFilter
from tasklab.core.models import Page
from tasklab.core.states import State
from tasklab.store.ids import decode_cursor, encode_cursor, new_task_id
from tasklab.store.shared.core import SqlCore

_EQUALS = ("task", "queue", "parent_id", "idempotency_key")


class SqlSearch(SqlCore):
    """The `Search` role."""

    def search(self, f: TaskFilter, limit: int, cursor: str | None) -> Page:
        limit = max(1, min(int(limit), 1000))
        sql, params = self._filtered("search_tasks", f, cursor=decode_cursor(cursor))
        with self._ordered_read(f) as conn:
            rows = list(conn.execute(sql, {**params, "limit": limit + 1}).fetchall())
        items = [self._snapshot(r) for r in rows[:limit]]
        more = len(rows) > limit
        return Page(items, encode_cursor(items[-1].id) if more and items else None)

    def page(self, state: State | None, limit: int, cursor: str | None) -> Page:
        """Newest first, optionally of one state."""
        return self.search(TaskFilter(state=state), limit, cursor)

    def count_matching(self, f: TaskFilter, *, not_retried: bool = False) -> int:
        sql, params = self._filtered("search_count", f, not_retried=not_retried)
        with self._read() as conn:
            return int(conn.execute(sql, params).fetchone()["n"])

    def matching_ids(
        self, f: TaskFilter, before: str | None, limit: int, *, not_retried: bool = False
    ) -> list[str]:
        """Up to `limit` ids matching, newest first, older than `before`."""
        sql, params = self._filtered("search_ids", f, cursor=before, not_retried=not_retried)
        with self._ordered_read(f) as conn:
            return [r["id"] for r in conn.execute(sql, {**params, "limit": limit}).fetchall()]

    def search_plan(self, f: TaskFilter, limit: int = 50) -> list[str]:
        """The database's plan for the first page of this search, a line per node."""
        sql, params = self._filtered("search_tasks", f)
        with self._ordered_read(f) as conn:
            rows = conn.execute(f"{self.q['explain']} {sql}", {**params, "limit": limit})
            return [str(r["detail"] if "detail" in r.keys() else r["QUERY PLAN"]) for r in rows]

    def retry_many(self, sources: list[str], keys: list[str | None]) -> dict[str, str]:
        """A new queued task made of each ended source, in one transaction; source id
        → new id for those made (a live source or a taken key makes none)."""
        if not sources:
            return {}
        rows = [
            {"id": new_task_id(), "src": src, "key": key}
            for src, key in zip(sources, keys, strict=True)
        ]
        with self._write() as conn:
            made = self._all(conn, "retry_tasks", **self._rows_param(rows))
        return {r["retry_of"]: r["id"] for r in made}

    def _ordered_read(self, f: TaskFilter) -> AbstractContextManager[Any]:
        """A read whose plans walk an index in order (PostgreSQL: `_walking`). An
        idempotency key names one task at most: nothing to walk, its index finds it."""
        return self._read() if f.idempotency_key is not None else self._walking()

    def _walking(self) -> AbstractContextManager[Any]:
        return self._read()

    def _filtered(
        self,
        query: str,
        f: TaskFilter,
        *,
        cursor: str | None = None,
        not_retried: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """The query with the filter's terms in it, and their parameters."""
        terms: list[str] = []
        params: dict[str, Any] = {}
        if f.state is State.QUEUED:
            terms.append(self.q["filter_queued"])
        elif f.state is not None:
            terms.append(self.q["filter_state"].replace("{state}", State(f.state).value))
        for name in _EQUALS:
            value = getattr(f, name)
            if value is not None:
                terms.append(self.q[f"filter_{name}"])
                params[name] = value
        low, high = f.id_range()
        for name, value in (("low", low), ("high", high), ("cursor", cursor)):
            if value is not None:
                terms.append(self.q[f"filter_{name}"])
                params[name] = value
        if not_retried:
            terms.append(self.q["filter_not_retried"])
        return self.q[query].replace("{terms}", " ".join(terms)), params
