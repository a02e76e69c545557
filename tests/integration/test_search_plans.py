"""Every search filter walks an index in id order and stops at the page's end (SPEC §9),
on both stores, read from the plans the databases choose on a filled store — on
PostgreSQL both with statistics that do not know the rows (never analysed since the
table was filled) and after ANALYZE. `tasklab bench search --n 1000000` shows the same
plans and their times at a million tasks (README)."""

from __future__ import annotations

import psycopg
import pytest

from tasklab.bench import search
from tasklab.bench.queue import bench_app

N = 20_000

# the index each shape walks (PostgreSQL names it in the plan)
INDEX = {
    "newest, no filter": "tasks_pkey",
    "state queued": "tasks_queued",
    "state succeeded (rare)": "tasks_by_state",
    "state cancelled": "tasks_by_state",
    "task": "tasks_by_task",
    "queue": "tasks_by_queue",
    "parent_id": "tasks_children",
    "idempotency_key": "tasks_key",
    "id prefix": "tasks_pkey",
    "created range": "tasks_pkey",
}


@pytest.fixture
def filled(store_url):  # type: ignore[no-untyped-def]
    app = bench_app(store_url, "normal")
    seen = search.fill(app, N)
    yield app, search.shapes(seen)
    app.close()


def _check_sqlite(name: str, plan: list[str]) -> None:
    text = " | ".join(plan)
    assert "TEMP B-TREE" not in text, (name, plan)  # no sort of every match
    for line in plan:
        if line.startswith("SCAN tasks") and name != "newest, no filter":
            assert "USING" in line, (name, plan)  # an index walk, not the table
    if name not in ("newest, no filter", "queue + state", "task + state"):
        want = INDEX[name] if INDEX[name] != "tasks_pkey" else "PRIMARY KEY"
        assert want in text, (name, plan)


def _check_postgres(name: str, plan: list[str]) -> None:
    text = " | ".join(plan)
    assert "Seq Scan" not in text and "Bitmap" not in text, (name, plan)
    if name != "idempotency_key":  # one row at most: sorting it costs nothing
        assert "Sort" not in text, (name, plan)
    if name in INDEX:  # or the newest-first walk of the key, when the planner expects
        # the matches to be common enough to meet the page's end soon (both stop there)
        assert f"using {INDEX[name]} on tasks" in text or "using tasks_pkey" in text, (name, plan)


def test_every_filter_walks_an_index(filled, store_url):
    app, shapes = filled
    check = _check_sqlite if store_url.startswith("sqlite") else _check_postgres
    for name, f in shapes.items():
        check(name, app.store.search_plan(f))
        assert app.search(f, limit=5).items, f"{name} should find tasks"
    if store_url.startswith("postgres"):  # and again with statistics that know the rows
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute("ANALYZE tasks")
        for name, f in shapes.items():
            check(name, app.store.search_plan(f))
