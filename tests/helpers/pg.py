"""Finding a PostgreSQL server for the tests: `TASKLAB_TEST_PG`, else
127.0.0.1:5432 database `test`, else a throwaway cluster from local binaries (run as
the `postgres` user: initdb refuses root), else none. Each test gets its own database:
LISTEN channels and advisory locks are not scoped to a schema."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


def _reachable(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def throwaway_cluster() -> Iterator[str | None]:
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not initdb or not pg_ctl:
        yield None
        return
    base = tempfile.mkdtemp(prefix="tasklab-pg-")
    os.chmod(base, 0o777)
    data = os.path.join(base, "data")
    port = _free_port()
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    try:
        subprocess.run(
            [*as_pg, initdb, "-D", data, "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *as_pg,
                pg_ctl,
                "-D",
                data,
                "-w",
                "-l",
                os.path.join(base, "log"),
                "-o",
                f"-p {port} -k {base} -h 127.0.0.1",
                "start",
            ],
            check=True,
            capture_output=True,
        )
    except (subprocess.CalledProcessError, FileNotFoundError):
        yield None
        shutil.rmtree(base, ignore_errors=True)
        return
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_pg, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def admin_url() -> Iterator[str | None]:
    env = os.environ.get("TASKLAB_TEST_PG")
    if env:
        yield env if _reachable(env) else None
        return
    local = "postgresql://postgres@127.0.0.1:5432/test"
    if _reachable(local):
        yield local
        return
    with throwaway_cluster() as url:
        yield url


def _with_db(url: str, name: str) -> str:
    head, _, _ = url.rpartition("/")
    return f"{head}/{name}"


@contextmanager
def fresh_database(admin: str) -> Iterator[str]:
    name = f"tl_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # name is ours, not user input
    try:
        yield _with_db(admin, name)
    finally:
        for _ in range(3):
            try:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except psycopg.Error:
                time.sleep(0.2)
