"""How many pages does a write put in SQLite's WAL, and whose are they?

    python experiments/004_wal_pages.py [--batch 32]

Every page a transaction changes is a WAL frame to write and flush at commit: the
count, not Python, is what separates a submit from the store's smallest commit. With
automatic checkpoints off, this reads the WAL's frame headers after each kind of
write and names the b-tree each page belongs to (SQLite's `dbstat`).
"""

from __future__ import annotations

import argparse
import collections
import sqlite3
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

from tasklab.bench.queue import _app
from tasklab.core.models import ClaimRequest, Outcome

ROUNDS = 20


def frames(db: Path, store: object, write: Callable[[], None]) -> tuple[float, dict[str, float]]:
    """Pages per commit of `write`, and per b-tree."""
    for conn in store._all_conns:  # type: ignore[attr-defined]
        conn.execute("PRAGMA wal_autocheckpoint=0")
    with sqlite3.connect(db) as probe:
        probe.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(ROUNDS):
        write()
    wal = Path(f"{db}-wal").read_bytes()
    page_size = struct.unpack(">I", wal[8:12])[0]
    pages = [
        struct.unpack(">I", wal[offset : offset + 4])[0]
        for offset in range(32, len(wal) - 23, 24 + page_size)
    ]
    with sqlite3.connect(db) as conn:
        owner = dict((page, name) for name, page in conn.execute("SELECT name, pageno FROM dbstat"))
    per_tree = collections.Counter(owner.get(p, "?") for p in pages)
    return len(pages) / ROUNDS, {k: v / ROUNDS for k, v in per_tree.most_common()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "pages.db"
        app = _app(f"sqlite:///{db}", "full")
        store = app.store
        app.submit_many("bench.noop", [{}] * 20_000)
        claims = store.claim(["bench.noop"], args.batch, "me", 30.0)

        def cycle() -> None:
            nonlocal claims
            items = [(c, Outcome.returned(None), [("attempt", {"attempt": 1})]) for c in claims]
            _, claims = store.finish_and_claim(
                items, ClaimRequest(["bench.noop"], args.batch, "me", 30.0)
            )

        for _ in range(20):  # past the first page splits
            cycle()
        writes: list[tuple[str, Callable[[], None]]] = [
            ("commit probe (one counter row)", lambda: store.bump("bench_commit_probe")),
            ("one submit", lambda: app.submit("bench.noop", {})),
            (f"group commit: {args.batch} finishes + {args.batch} claims", cycle),
        ]
        for label, write in writes:
            total, per_tree = frames(db, store, write)
            trees = ", ".join(f"{name} {n:.2f}" for name, n in per_tree.items())
            print(f"{label:45s} {total:6.2f} pages per commit  ({trees})")
        app.close()


if __name__ == "__main__":
    main()
