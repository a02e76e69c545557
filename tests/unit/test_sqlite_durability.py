"""What the README says each durability setting is: FULL by default, NORMAL on request,
WAL always (checked on the store's own connections)."""

from __future__ import annotations

import pytest

from tasklab.store.sqlite import SQLiteStore


@pytest.mark.parametrize(("durability", "level"), [("full", 2), ("normal", 1)])
def test_synchronous_level_and_wal(tmp_path, durability, level):
    store = SQLiteStore(tmp_path / "d.db", durability=durability)
    with store._write() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_default_is_full(tmp_path):
    from tasklab import Settings, TaskApp

    assert Settings().durability == "full"
    app = TaskApp(f"sqlite:///{tmp_path / 'x.db'}")
    with app.store._write() as conn:  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    app.close()


def test_unknown_durability_is_refused(tmp_path):
    with pytest.raises(ValueError, match="full"):
        SQLiteStore(tmp_path / "d.db", durability="sometimes")
