"""Stores: where every task state, event, effect record and notification lives."""

from __future__ import annotations

from tasklab.store.base import Faults, Store

__all__ = ["Faults", "Store", "open_store"]


def open_store(url: str, **options: object) -> Store:
    """Open a store from a URL: `sqlite:///relative.db`, `sqlite:////abs/path.db`,
    `postgresql://user@host:port/db`."""
    if url.startswith("sqlite:///"):
        from tasklab.store.sqlite import SQLiteStore

        path = url[len("sqlite:///") :]
        if not path:
            raise ValueError("sqlite URL needs a path: sqlite:///tasklab.db")
        return SQLiteStore(path, **options)  # type: ignore[arg-type]
    if url.startswith(("postgresql://", "postgres://")):
        from tasklab.store.postgres import PostgresStore

        return PostgresStore(url, **options)  # type: ignore[arg-type]
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///path.db or postgresql://…")
