"""The embedded default store: one SQLite file in WAL mode, several processes.

Liveness is a file lock beside the database (`<db>.executors.lock`): every executor
holds it shared while alive; exclusive recovery takes it exclusively without waiting,
so it fails with `WorkerAlive` while any executor lives (the kernel drops the lock of a
SIGKILLed process). Wake-ups: a commit that changed something wakes this process's
waiters at once and rings the other processes' doorbells (store/doorbell.py); one
watcher thread per process receives the rings, with a slow `PRAGMA data_version`
check as the safety net for writers that do not ring.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tasklab.core.jsontext import not_text
from tasklab.errors import ForeignConnection, InvalidPayload, StoreError, WorkerAlive
from tasklab.store import queries
from tasklab.store.caller import CallersConnection
from tasklab.store.doorbell import Doorbell, trusted_uids, wait_ring
from tasklab.store.gate import ClosingGate
from tasklab.store.shared.stepwise import StepwiseLimitedClaim
from tasklab.store.signal import ChangeSignal
from tasklab.store.sqlstore import SqlStore

_UNIX_EPOCH_JD = 2440587.5
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIGRATIONS = queries.migrations("sqlite")  # sql/sqlite/migrations/, by name


_write_locks: dict[str, threading.Lock] = {}
_write_locks_guard = threading.Lock()


def _process_write_lock(path: Path) -> threading.Lock:
    key = str(path.resolve())
    with _write_locks_guard:
        return _write_locks.setdefault(key, threading.Lock())


class SQLiteStore(StepwiseLimitedClaim, SqlStore):
    integrity_errors = (sqlite3.IntegrityError,)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        busy_timeout: float = 3.0,
        watch_interval: float = 0.05,
    ) -> None:
        super().__init__()
        if durability not in ("full", "normal"):
            raise ValueError("durability is 'full' or 'normal'")
        # `:memory:` (for users' tests, one process): a file in a private temporary
        # directory, removed at close — a real SQLite memory database is one per
        # connection, and a shared-cache one locks tables instead of waiting
        self._scratch: str | None = None
        if str(path) == ":memory:":
            self._scratch = tempfile.mkdtemp(prefix="tasklab-memory-")
            path = Path(self._scratch) / "tasklab.db"
            durability = "normal"  # nothing outlives the process anyway
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self.durability = durability
        self._busy_timeout = busy_timeout
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all_conns: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self.q = queries.load("sqlite")
        self._watch_interval = watch_interval
        self._signal = ChangeSignal()
        self._doorbell = Doorbell(self.path)
        self._watcher: threading.Thread | None = None
        self._watching = threading.Event()  # the watcher has bound its doorbell
        self._closed = threading.Event()
        self._gate = ClosingGate()
        self._write_lock = _process_write_lock(self.path)  # resolved once, not per write
        try:
            self._migrate()
        except BaseException:
            # not a database, a directory we may not create, a newer schema: the
            # caller gets the error and no store, so nothing of it may stay open
            self._doorbell.close()
            self._close_connections(self._all_conns)
            raise

    # ---- connections ---------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_timeout,
            )
            conn.row_factory = sqlite3.Row
            # the file is first read here: a file that is not a database fails here
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={'FULL' if self.durability == 'full' else 'NORMAL'}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreError(f"cannot open SQLite database {self.path}: {exc}") from exc
        with self._pool_lock:
            self._all_conns.append(conn)
        return conn

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        with self._gate.use():
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                conn = self._connect()
            try:
                yield conn
            except sqlite3.Error as exc:
                # driver errors stop here: the rest of tasklab sees only TasklabError
                raise StoreError(f"SQLite: {exc}") from exc
            except UnicodeEncodeError as exc:  # a caller's string no column can hold
                raise InvalidPayload(f"a string given to the store: {not_text(exc)}") from None
            finally:
                if conn.in_transaction:  # never hand a connection on mid-transaction
                    conn.rollback()
                self._pool.put(conn)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._conn() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE: a deferred read-then-write transaction can fail with
        # SQLITE_BUSY at its first write instead of waiting for the lock.
        # The in-process lock first: SQLite's busy handler backs off by sleeping (1, 2,
        # 5, 10 … ms), so writers of one process queue on a Python lock instead, and
        # only writers of other processes meet the busy handler.
        with self._write_lock, self._conn() as conn:
            before = conn.total_changes
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.execute("COMMIT")
            changed = conn.total_changes != before
        # Only a commit that changed something wakes anyone: an empty claim that woke
        # the claim loop would otherwise wake it again, for ever.
        if changed:
            self._signal.bump()
            self._doorbell.ring()

    def _migrate(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._schema_current():
            return  # opening a store takes no write lock (a caller's transaction may hold it)
        with self._write() as conn:
            conn.execute(self.q["schema_version_create"])
            done = conn.execute(self.q["schema_version_get"]).fetchone()["version"]
            for version, name in enumerate(MIGRATIONS, start=1):
                if version > done:
                    for stmt in _statements(self.q[name]):
                        conn.execute(stmt)
                    conn.execute(self.q["schema_version_set"], {"version": version})

    def _on_callers(self, connection: Any) -> CallersConnection:
        if not isinstance(connection, sqlite3.Connection):
            raise ForeignConnection(
                f"this store is the SQLite file {self.path}: connection= takes a "
                "sqlite3.Connection on it (or a SQLAlchemy connection or session bound "
                f"to one), not a {type(connection).__module__}.{type(connection).__name__}"
            )
        probe = connection.cursor()
        probe.row_factory = None
        files = {row[1]: row[2] for row in probe.execute("PRAGMA database_list")}
        main = files.get("main") or ""
        if not main or os.path.realpath(main) != os.path.realpath(self.path):
            raise ForeignConnection(
                f"connection= is on {main or 'a memory database'}, not on this store's "
                f"file {self.path}"
            )

        def cursor() -> sqlite3.Cursor:
            cur = connection.cursor()
            cur.row_factory = sqlite3.Row
            return cur

        return CallersConnection(cursor)

    def _schema_current(self) -> bool:
        with self._read() as conn:
            known = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if known is None:
                return False
            done = conn.execute(self.q["schema_version_get"]).fetchone()["version"]
            return bool(done == len(MIGRATIONS))

    # ---- dialect hooks -------------------------------------------------------------
    def _dt(self, value: Any) -> datetime | None:
        if value is None:
            return None
        ms = round((float(value) - _UNIX_EPOCH_JD) * 86400000.0)
        return _EPOCH + timedelta(milliseconds=ms)

    def _lock_table(self, conn: Any, query: str) -> None:
        pass  # BEGIN IMMEDIATE: writers take turns already

    def _time_param(self, at: datetime) -> float:
        return at.timestamp() / 86400.0 + _UNIX_EPOCH_JD

    def _list_param(self, values: list[str]) -> Any:
        return json.dumps(values)

    def _claim_locks(self, conn: Any, keys: list[int]) -> None:
        pass  # BEGIN IMMEDIATE: one writer at a time already

    def _pairs_param(self, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        return {"pairs": json.dumps(pairs)}

    # ---- liveness ------------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".executors.lock")

    def _hold_presence(self) -> int:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    def _drop_presence(self, handle: int) -> None:
        os.close(handle)  # closing drops the flock

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise WorkerAlive(
                    "another executor is alive (it holds the liveness lock "
                    f"{self.lock_path}); stop it before exclusive recovery"
                ) from None
            yield
        finally:
            os.close(fd)

    # ---- change notification -------------------------------------------------------
    def change_token(self) -> int:
        self._ensure_watcher()
        return self._signal.token()

    def wait_change(self, token: int, timeout: float) -> int:
        """Block until any commit (from any process) after `token`, or the timeout."""
        self._ensure_watcher()
        return self._signal.wait(token, timeout)

    def _ensure_watcher(self) -> None:
        if self._watcher is None:
            with self._pool_lock:
                if self._watcher is None:
                    self._watcher = threading.Thread(
                        target=self._watch, name="tasklab-sqlite-watch", daemon=True
                    )
                    self._watcher.start()
        # A token handed out before the doorbell is bound could miss another process's
        # commit made in between (no ring would reach us): wait for the watcher.
        if not self._watching.is_set():
            self._watching.wait(5.0)

    def _watch(self) -> None:
        bell = self._doorbell.listen()
        # without a doorbell (not Linux), the data_version check is the only wake-up
        interval = self._watch_interval if bell is not None else 0.001
        conn: sqlite3.Connection | None = None
        trusted = trusted_uids(self.path)
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            last = conn.execute("PRAGMA data_version").fetchone()[0]
            self._watching.set()
            next_check = time.monotonic() + interval
            while not self._closed.is_set():
                if bell is None:
                    self._closed.wait(interval)
                else:
                    rang = wait_ring(bell, max(0.0, next_check - time.monotonic()), trusted)
                    if rang:
                        self.wake()
                        continue
                    if rang is None:  # only strangers' datagrams: dropped; no spinning
                        self._closed.wait(0.001)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + interval
                    now = conn.execute("PRAGMA data_version").fetchone()[0]
                    if now != last:
                        last = now
                        self.wake()
        except (sqlite3.Error, OSError):
            return  # the store was closed under us
        finally:
            self._watching.set()  # never leave a waiter waiting for a watcher that died
            if conn is not None:
                conn.close()
            self._doorbell.unlisten(bell)

    def maintain(self) -> None:
        """Nothing to do: SQLite removes a row's old version in the write itself (no
        dead rows pile up for a vacuum to remove, unlike PostgreSQL)."""

    def wake(self) -> None:
        """Wake this process's waiters (its own commits do so already)."""
        self._signal.bump()

    def close(self, timeout: float = 5.0) -> None:
        """Refuse new calls, wait up to `timeout` for those in flight, close. A
        connection still in use after that is left open (closing it under its
        thread would crash the process); the process's exit takes it."""
        drained = self._gate.close(timeout)
        self._closed.set()
        if self._watcher is not None:
            self._doorbell.interrupt()
            self._watcher.join(timeout=1)
        self._doorbell.close()
        idle = []
        while True:
            try:
                idle.append(self._pool.get_nowait())
            except queue.Empty:
                break
        self._close_connections(self._all_conns if drained else idle)
        if self._scratch is not None and drained:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _close_connections(self, closing: list[sqlite3.Connection]) -> None:
        with self._pool_lock:
            for conn in list(closing):
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all_conns = [c for c in self._all_conns if c not in closing]


def _statements(script: str) -> list[str]:
    """A script's statements, one each (a trigger's body holds semicolons of its own)."""
    done: list[str] = []
    current = ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n;"):
                done.append(current)
            current = ""
    return done
