"""The PostgreSQL store: many workers on many machines share one database.

Claims use `FOR UPDATE SKIP LOCKED`; every time is `clock_timestamp()`. Liveness is a
shared advisory lock held by every executor on a dedicated session; exclusive recovery
takes it exclusively without waiting. Wake-ups: one dedicated autocommit connection per
store LISTENs; triggers NOTIFY the task id at commit, and local waiters are woken.
"""

from __future__ import annotations

import contextlib
import logging
import select
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from tasklab._types import Row
from tasklab.core.jsontext import not_text
from tasklab.core.models import ClaimRequest
from tasklab.errors import (
    ForeignConnection,
    InvalidPayload,
    SessionLost,
    StoreError,
    WorkerAlive,
)
from tasklab.redact import redact
from tasklab.store import pgsessions, queries
from tasklab.store.caller import CallersConnection
from tasklab.store.gate import ClosingGate
from tasklab.store.signal import ChangeSignal
from tasklab.store.sqlstore import SqlStore
from tasklab.store.vacuum import Vacuumer

log = logging.getLogger("tasklab.postgres")

MIGRATIONS = queries.migrations("postgres")  # sql/postgres/migrations/, by name


class PostgresStore(SqlStore):
    integrity_errors = (psycopg.errors.IntegrityError,)

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout_ms: int = 4000,
        idle_in_transaction_timeout_ms: int = 5000,
    ) -> None:
        super().__init__()
        self.url = url
        self.q = queries.load("postgres", pyformat=True)
        self._conninfo = url
        settings = pgsessions.session_settings(statement_timeout_ms, idle_in_transaction_timeout_ms)
        self._options = " ".join(f"-c {name}={value}" for name, value in settings.items())
        self._net = pgsessions.CLIENT_NETWORK
        # refuses a transaction-mode pooler; options by SET where a pooler takes none
        self._kwargs = pgsessions.connection_kwargs(url, self._options, self._net)
        self._settings = {} if "options" in self._kwargs else settings
        try:
            self._pool = ConnectionPool(
                url,
                min_size=min_size,
                max_size=max_size,
                open=True,
                timeout=10,
                kwargs={**self._kwargs, "row_factory": dict_row},
                configure=pgsessions.configure(self._settings) if self._settings else None,
                check=_not_hung_up,
            )
            self._pool.wait(timeout=10)
        except (psycopg.Error, Exception) as exc:
            raise StoreError(redact(f"cannot connect to PostgreSQL at {url}: {exc}")) from exc
        self._listener_lock = threading.Lock()
        self._signal = ChangeSignal()
        self._listener: threading.Thread | None = None
        self._closed = threading.Event()
        self._gate = ClosingGate()
        # which store calls met a broken session (SessionLost), by method: what the
        # tests of killed sessions read to see the failure path taken, not the lease
        self.lost_sessions: Counter[str] = Counter()
        self.vacuumer = Vacuumer(self._dedicated, self.q["dead_rows"])
        self._callers_seen: set[tuple[Any, ...]] = set()  # callers' sessions checked
        self._identity: str | None = None
        self._migrate()

    def _dedicated(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._conninfo, row_factory=dict_row, **self._kwargs)
        if self._settings:
            pgsessions.configure(self._settings)(conn)
        return conn

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._session(transaction=False) as conn:
            yield conn

    @contextmanager
    def _walking(self) -> Iterator[Any]:
        with self._session(transaction=True) as conn:
            conn.execute(self.q["ordered_reads"])
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self._session(transaction=True) as conn:
            yield conn

    @contextmanager
    def _session(self, *, transaction: bool) -> Iterator[Any]:
        conn = None
        try:
            with self._gate.use(), self._pool.connection() as conn:
                if transaction:
                    with conn.transaction():
                        yield conn
                else:
                    yield conn
        except psycopg.Error as exc:
            if conn is not None and conn.closed:  # the session itself broke
                self._count_lost(sys._getframe(1))
                raise SessionLost(f"PostgreSQL session lost: {exc}") from exc
            raise StoreError(f"PostgreSQL: {exc}") from exc
        except UnicodeEncodeError as exc:  # a caller's string no column can hold
            raise InvalidPayload(f"a string given to the store: {not_text(exc)}") from None

    def _count_lost(self, frame: Any) -> None:
        """The first caller outside the session plumbing names the call (only on this
        failure path, so walking frames costs nothing in the common case)."""
        plumbing = {"_session", "_read", "_write", "_write_steps", "__exit__", "__enter__"}
        while frame is not None and frame.f_code.co_name in plumbing | {"_count_lost"}:
            frame = frame.f_back
        with self._listener_lock:
            self.lost_sessions[frame.f_code.co_name if frame is not None else "?"] += 1

    def _write_steps(self, steps: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
        if len(steps) != 1:
            return super()._write_steps(steps)
        # On an autocommit connection one statement is its own transaction: no BEGIN and
        # COMMIT round trips around it.
        query, params = steps[0]
        with self._read() as conn:
            cur = conn.execute(self.q[query], params)
            return [cur.fetchall() if cur.description else []]

    def _migrate(self) -> None:
        with self._write() as conn:
            conn.execute(self.q["migration_lock"])
            conn.execute(self.q["schema_version_create"])
            done = conn.execute(self.q["schema_version_get"]).fetchone()["version"]
            for version, name in enumerate(MIGRATIONS, start=1):
                if version > done:
                    conn.execute(self.q[name].replace("%%", "%"))
                    conn.execute(self.q["schema_version_set"], {"version": version})

    def identity(self) -> str:
        """This database's store id (migration 012), read once."""
        if self._identity is None:
            with self._read() as conn:
                self._identity = str(conn.execute(self.q["store_identity"]).fetchone()["id"])
        return self._identity

    def _on_callers(self, connection: Any) -> CallersConnection:
        if isinstance(connection, psycopg.AsyncConnection) or not isinstance(
            connection, psycopg.Connection
        ):
            raise ForeignConnection(
                "this store is PostgreSQL: connection= takes a psycopg 3 (sync) connection "
                "to its database (or a SQLAlchemy connection or session bound to one), "
                f"not a {type(connection).__module__}.{type(connection).__name__}"
            )
        info = connection.info
        # one check per server session: a backend pid names it while it lives
        seen = (info.host, info.port, info.dbname, info.backend_pid)
        if seen not in self._callers_seen:
            with connection.cursor(row_factory=dict_row) as cur:
                present = cur.execute(self.q["has_store_identity"]).fetchone()
                known = present is not None and present["present"]
                row = cur.execute(self.q["store_identity"]).fetchone() if known else None
            if row is None or row["id"] != self.identity():
                raise ForeignConnection(
                    f"connection= is on database {info.dbname!r} at {info.host}:{info.port}, "
                    f"which is not this store's ({redact(self.url)})"
                )
            if len(self._callers_seen) >= 4096:
                self._callers_seen.clear()
            self._callers_seen.add(seen)
        return CallersConnection(lambda: connection.cursor(row_factory=dict_row))

    def _lock_table(self, conn: Any, query: str) -> None:
        conn.execute(self.q[query])

    def _time_param(self, at: datetime) -> datetime:
        return at

    def _executemany(self, conn: Any, query: str, params: list[dict[str, Any]]) -> None:
        # One statement over all the rows (`_rows_param`): a pipelined executemany saves
        # the round trips but the server still plans and runs a statement per row.
        conn.execute(self.q[query + "_batch"], self._rows_param(params))

    def _dt(self, value: Any) -> datetime | None:
        return value.astimezone(UTC) if value is not None else None

    def _list_param(self, values: list[str]) -> Any:
        return list(values)

    def _claim_limited(self, conn: Any, r: ClaimRequest, served: list[str]) -> list[Row]:
        # one round trip: tasklab_claim_limited (migration 010) runs the whole rule
        return self._all(
            conn,
            "claim_limited",
            served=served,
            names=list(r.names),
            keys=self._lock_keys(r, served),
            keyed=bool(r.keyed),
            limit=r.limit,
            owner=r.owner,
            lease=r.lease,
        )

    def _open_steps(self, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [("claim_next", params)]  # tasklab_claim runs the stager itself

    def _stager_steps(self) -> list[tuple[str, dict[str, Any]]]:
        return [("promote_due", {})]  # tasklab_promote: delayed and waiting tasks both

    # ---- liveness ------------------------------------------------------------------
    def _hold_presence(self) -> _Presence:
        return _Presence(self._presence_session, unlock=self.q["presence_unlock"])

    def _presence_session(self) -> psycopg.Connection[Any]:
        conn = self._dedicated()
        try:
            conn.execute(self.q["presence_lock"])  # waits while a recovery holds it
        except BaseException:
            conn.close()
            raise
        return conn

    def _drop_presence(self, handle: _Presence) -> None:
        handle.close()

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._dedicated() as conn:
            row = conn.execute(self.q["exclusive_try"]).fetchone()
            if row is None or not row["ok"]:
                raise WorkerAlive(
                    "another executor is alive (it holds the advisory presence lock); "
                    "stop it before exclusive recovery"
                )
            try:
                yield
            finally:
                conn.execute(self.q["exclusive_release"])

    # ---- change notification -------------------------------------------------------
    def change_token(self) -> int:
        self._ensure_listener()
        return self._signal.token()

    def wait_change(self, token: int, timeout: float) -> int:
        self._ensure_listener()
        return self._signal.wait(token, timeout)

    def wake(self) -> None:
        self._signal.bump()

    def _ensure_listener(self) -> None:
        if self._listener is None:
            with self._listener_lock:
                if self._listener is None:
                    ready = threading.Event()
                    self._listener = threading.Thread(
                        target=self._listen,
                        args=(ready,),
                        name="tasklab-pg-listen",
                        daemon=True,
                    )
                    self._listener.start()
                    ready.wait(5)

    def _listen(self, ready: threading.Event) -> None:
        while not self._closed.is_set():
            try:
                with self._dedicated() as conn:
                    conn.execute(self.q["listen"])
                    ready.set()
                    self.wake()  # anything may have happened while we were not listening
                    while not self._closed.is_set():
                        got = False
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            got = True
                        if got:
                            self.wake()
            except psycopg.Error:
                ready.set()
                self._closed.wait(0.5)

    def maintain(self) -> None:
        """Vacuum the queue's tables if autovacuum has left them full of dead rows."""
        self.vacuumer.maybe()

    def close(self, timeout: float = 5.0) -> None:
        """Refuse new calls, wait up to `timeout` for those in flight, close."""
        self._gate.close(timeout)
        self._closed.set()
        if self._listener is not None:
            self._listener.join(timeout=2)
        if self._presence_handle is not None:
            self._presence_handle.close()
        self._pool.close()


def _not_hung_up(conn: psycopg.Connection[Any]) -> None:
    """The pool's check at every checkout: refuse a connection the server has hung up
    on. A killed backend or a restarted server leaves the idle socket readable (a FATAL
    message, then EOF) before any query is sent; `select` sees that in microseconds,
    where a `SELECT 1` would cost every operation a round trip. Without it, each pooled
    connection fails one operation after a server restart."""
    if conn.closed or select.select([conn.fileno()], [], [], 0)[0]:
        conn.close()  # closed, the pool discards it (an idle-looking one would go back)
        raise psycopg.OperationalError("the server closed this pooled connection")


class _Presence:
    """The shared presence lock, held on a session of its own and kept: when that
    session dies (a server restart, a killed backend, a dropped connection) the lock
    goes with it, and exclusive recovery would take this live executor for dead. A
    keeper checks the session every `check_every` seconds and takes the lock again on a
    new one. In the gap a recovery may settle this executor's tasks; fencing then
    rejects its writes, so the store stays true, but tasks may run twice — the gap is
    kept short rather than trusted."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        unlock: str,
        check_every: float = 1.0,
    ) -> None:
        self._connect = connect
        self._unlock = unlock
        self._conn: psycopg.Connection[Any] | None = connect()
        self._every = check_every
        self.renewed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="tasklab-pg-presence", daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(self._every):
            conn = self._conn
            if conn is not None:
                try:
                    conn.execute("SELECT 1")
                    continue
                except psycopg.Error:
                    log.warning("presence lock lost with its session; taking it again")
                    conn.close()
                    self._conn = None
            try:
                self._conn = self._connect()
                self.renewed += 1
            except psycopg.Error as exc:  # the server is away: try again next round
                log.warning("presence lock not taken again yet: %s", exc)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._conn is not None:
            # Unlocked before the hang-up: a closed session's backend lets go of its
            # locks only a moment later, and a recovery right after this executor left
            # would still find it alive (WorkerAlive).
            with contextlib.suppress(psycopg.Error):
                self._conn.execute(self._unlock)
            self._conn.close()
