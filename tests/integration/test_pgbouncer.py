"""Behind PgBouncer (SPEC §9, connection poolers), with a real PgBouncer started here
in front of the test's database: in transaction mode LISTEN and session advisory
locks do not survive, so the store refuses to open, with the reason, and writes
nothing; in session mode everything works — wake-ups by LISTEN, the liveness lock that
makes exclusive recovery refuse while a worker lives, tasks run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
import pytest

from tasklab import TaskApp, WorkerAlive
from tasklab.errors import StoreError
from tests.conftest import make_app, wait_for


def _binary() -> str | None:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if found is None:
        if os.environ.get("TASKLAB_REQUIRE_PGBOUNCER") == "1":
            pytest.fail("TASKLAB_REQUIRE_PGBOUNCER=1 but pgbouncer is not installed")
        pytest.skip("pgbouncer not installed")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pgbouncer(server_url: str, mode: str) -> Iterator[str]:
    """A PgBouncer in `mode` in front of the server of `server_url`; its URL."""
    binary = _binary()
    parts = urlsplit(server_url)
    base = tempfile.mkdtemp(prefix="tasklab-pgbouncer-")
    os.chmod(base, 0o777)
    port = _free_port()
    users = os.path.join(base, "users.txt")
    with open(users, "w") as fh:
        fh.write(f'"{parts.username or "postgres"}" ""\n')
    ini = os.path.join(base, "pgbouncer.ini")
    with open(ini, "w") as fh:
        fh.write(
            "[databases]\n"
            f"* = host={parts.hostname} port={parts.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
            f"auth_type = trust\nauth_file = {users}\npool_mode = {mode}\n"
            f"unix_socket_dir =\nlogfile = {base}/pgbouncer.log\n"
        )
    for name in (users, ini):
        os.chmod(name, 0o644)
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # not as root
    proc = subprocess.Popen(
        [*as_pg, binary, ini], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"postgresql://{parts.username or 'postgres'}@127.0.0.1:{port}{parts.path}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)


def test_transaction_mode_is_refused_with_the_reason_and_nothing_is_written(pg_url):
    with pgbouncer(pg_url, "transaction") as url:
        with pytest.raises(StoreError, match="transaction or statement mode") as refused:
            TaskApp(url).counts()
        assert "session" in str(refused.value) and "LISTEN" in str(refused.value)
    with psycopg.connect(pg_url) as conn:  # not one table was made
        assert conn.execute("SELECT to_regclass('tasks')").fetchone()[0] is None


def test_session_mode_works_wakeups_locks_and_all(pg_url):
    with pgbouncer(pg_url, "session") as url:
        app = make_app(url)
        try:
            assert app.store._settings  # the pooler took no startup options: SET instead
            with app.store._read() as conn:
                assert conn.execute("SHOW jit").fetchone()["jit"] == "off"
            app.change_token()  # starts the listener, whose own first wake-up may
            time.sleep(0.1)  # come a moment after: a token from before it would be
            token = app.change_token()  # woken by it, listening or not
            tid = app.submit("t.echo", {"value": 3})
            assert app.wait_change(token, 5.0) != token  # LISTEN through the pooler
            with app.worker(concurrency=2):
                wait_for(lambda: app.query(tid).terminal, 10)
                other = make_app(url)
                try:  # the worker's session lock is held through the pooler
                    with pytest.raises(WorkerAlive):
                        other.recover_running()
                finally:
                    other.close()
            assert app.query(tid).result == 3
        finally:
            app.close()
