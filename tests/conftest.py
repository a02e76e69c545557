"""Shared fixtures: one contract over every store, real PostgreSQL, real files."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasklab import Settings, TaskApp
from tasklab.store.base import Store
from tests.helpers import pg, sample_tasks

STORES = ["sqlite", "postgres"]
PG_MISSING = "PostgreSQL not available: set TASKLAB_TEST_PG or install postgresql"


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[str | None]:
    with pg.admin_url() as url:
        yield url


def _require_pg(admin: str | None) -> str:
    if admin is None:
        if os.environ.get("TASKLAB_REQUIRE_PG") == "1":
            pytest.fail(
                "TASKLAB_REQUIRE_PG=1 but no PostgreSQL server could be found or "
                "started (TASKLAB_TEST_PG, 127.0.0.1:5432/test, local initdb)"
            )
        pytest.skip(PG_MISSING)
    return admin


@pytest.fixture
def pg_url(pg_admin: str | None) -> Iterator[str]:
    with pg.fresh_database(_require_pg(pg_admin)) as url:
        yield url


@pytest.fixture(params=STORES)
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, pg_admin: str | None
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tasklab.db'}"
    else:
        with pg.fresh_database(_require_pg(pg_admin)) as url:
            yield url


def make_app(url: str, store: Store | None = None, **settings: object) -> TaskApp:
    app = TaskApp(url, settings=Settings(**settings), store=store)  # type: ignore[arg-type]
    for task in sample_tasks.app.registry.all():
        app.registry.add(task)
    return app


@pytest.fixture
def app(store_url: str) -> Iterator[TaskApp]:
    a = make_app(store_url, lease=5.0)
    yield a
    a.close()


@pytest.fixture(autouse=True)
def _no_leaked_latches() -> Iterator[None]:
    yield
    # release every latch a test left closed, so no runner thread outlives its test
    for ev in list(sample_tasks._latches.values()):
        ev.set()
    sample_tasks._latches.clear()
    sample_tasks._started.clear()


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    # read from the skip reports: with `-n 2` the tests ran in worker processes
    skipped = terminalreporter.stats.get("skipped", [])
    if any(PG_MISSING in str(report.longrepr) for report in skipped):
        terminalreporter.write_line(
            "!!! PostgreSQL tests were SKIPPED: no server found. CI sets "
            "TASKLAB_REQUIRE_PG=1 so that this fails instead.",
            red=True,
            bold=True,
        )


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01):  # type: ignore[no-untyped-def]
    """Poll until predicate() is truthy; returns its value or fails the test."""
    import time

    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)


__all__ = ["make_app", "threading", "wait_for"]
