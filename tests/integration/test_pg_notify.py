"""PostgreSQL wake-ups: one notification per transaction that a waiter acts on, however
many rows it wrote (PostgreSQL folds identical notifications of a transaction)."""

from __future__ import annotations

import psycopg

from tasklab.core.models import Outcome
from tests.conftest import make_app


def _drain(conn: psycopg.Connection) -> int:
    return sum(1 for _ in conn.notifies(timeout=0.5))


def test_a_batch_of_submits_notifies_once_and_claims_notify_nobody(pg_url):
    app = make_app(pg_url)
    listener = psycopg.connect(pg_url, autocommit=True)
    try:
        listener.execute("LISTEN tasklab")
        app.submit_many("t.echo", [{"value": i} for i in range(200)])
        assert _drain(listener) == 1
        app.submit("t.echo", {"value": 0})
        assert _drain(listener) == 1
        claims = app.store.claim(["t.echo"], 201, "w1", 30.0)
        assert len(claims) == 201
        assert _drain(listener) == 0  # a claim wakes nobody
        app.store.finish_many([(c, Outcome.returned(1), [("progress", {})]) for c in claims])
        assert _drain(listener) == 1  # 201 terminal states and 201 events: one wake-up
    finally:
        listener.close()
        app.close()
