"""What a PostgreSQL store needs of its connections, checked before it opens: real
sessions. LISTEN (wake-ups) and session advisory locks (executor liveness, recovery)
live as long as a server session; a pooler in transaction or statement mode (PgBouncer
`pool_mode = transaction`) hands each transaction to whichever server connection is
free, so a listener would miss notifications and a "held" lock would belong to
nobody. Such a pooler is refused, with the reason; PgBouncer in session mode works.

The check: two client connections open at once, each asks its server backend's pid.
Directly, or through a session-mode pooler, two open sessions are two backends; a
transaction-mode pooler answers both from one idle server connection (it reuses the
last one released). Two different pids do not prove a pooler absent (a busy pool may
hand out two), so the PgBouncer signature is read too: it refuses the `options`
startup parameter unless told to ignore it, and then tasklab's session settings are
sent with SET instead.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tasklab.errors import StoreError
from tasklab.redact import redact

# A silent network (no RST) must be noticed in seconds, not when TCP gives up:
# unacknowledged data fails after tcp_user_timeout, an idle wait for an answer is
# probed by keepalives. (statement_timeout is the server's, useless then.)
CLIENT_NETWORK: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": 5000,
    "connect_timeout": 5,
}


def session_settings(statement_timeout_ms: int, idle_in_transaction_ms: int) -> dict[str, str]:
    """What every tasklab session runs with (in the startup packet, or SET).

    jit off: tasklab's statements are short, and JIT compiling one costs more than
    running it (tens of ms where the statement takes a fraction of one).
    idle_in_transaction_session_timeout: a session cut off in the middle of a
    transaction (a silent network: the server sees nothing wrong) would hold its row
    locks until the server's TCP gave up, hours later, and every statement needing
    those rows would wait for it; tasklab's transactions never wait on anything but
    their own next statement, so the server ends such a session after a few seconds (a
    transactional task's run lifts it: its body is user code). Server-side keepalives
    end a session whose peer is gone, idle or not (its session advisory locks with it).
    enable_seqscan off: every statement of tasklab's is meant to walk an index, and a
    queue table's statistics lie in the normal course of things — emptied and vacuumed
    between two bursts, `tasks` has no pages, a sequential scan of it costs nothing,
    and each plan made then (a prepared statement's generic plan, a PL/pgSQL
    function's) read the whole table for every fence, heartbeat and claim of the next
    burst until an autovacuum's statistics replaced it, up to a minute later. Off, a
    sequential scan is still taken where nothing else can answer (small tables without
    a fitting index).
    """
    return {
        "statement_timeout": str(statement_timeout_ms),
        "idle_in_transaction_session_timeout": str(idle_in_transaction_ms),
        "tcp_keepalives_idle": "10",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "3",
        "jit": "off",
        "enable_seqscan": "off",
    }


def connection_kwargs(url: str, options: str, net: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments for this store's connections, after the session check:
    `options` in the startup packet where the server takes it; else none (the
    settings are then SET by `configure`). StoreError for a transaction pooler."""
    kwargs: dict[str, Any] = {"autocommit": True, **net, "options": options}
    try:
        first = psycopg.connect(url, **kwargs)
    except psycopg.OperationalError as exc:
        if "unsupported startup parameter" not in str(exc):
            raise StoreError(redact(f"cannot connect to PostgreSQL at {url}: {exc}")) from exc
        kwargs.pop("options")  # a pooler (PgBouncer) between us and the server
        try:
            first = psycopg.connect(url, **kwargs)
        except psycopg.Error as again:
            raise StoreError(redact(f"cannot connect to PostgreSQL at {url}: {again}")) from again
    try:
        with psycopg.connect(url, **kwargs) as second:
            pids = {_pid(first), _pid(second)}
    except psycopg.Error as exc:
        raise StoreError(redact(f"cannot connect to PostgreSQL at {url}: {exc}")) from exc
    finally:
        first.close()
    if len(pids) == 1:
        raise StoreError(
            redact(
                f"PostgreSQL at {url} is reached through a pooler in transaction or "
                f"statement mode (two open sessions were answered by one server backend, "
                f"pid {pids.pop()}): tasklab needs real sessions — LISTEN for wake-ups, "
                "session advisory locks for executor liveness. Connect directly, or "
                "through the pooler's session mode (PgBouncer: pool_mode = session)."
            )
        )
    return kwargs


def configure(settings: dict[str, str]) -> Any:
    """A pool `configure` callback that sets what the startup packet could not carry."""

    def apply(conn: psycopg.Connection[Any]) -> None:
        for name, value in settings.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))

    return apply


def _pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return int(row[0]) if row else -1
