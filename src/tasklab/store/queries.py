"""Loads a store's SQL: the named blocks of `sql/<dialect>/queries.sql`, and the
migrations in `sql/<dialect>/migrations/NNN_<what>.sql`, one file each, found by name
and run in the order of their numbers.

A block starts with `-- name: <name>` followed by a one-line `--` description; the
SQL runs until the next `-- name:`. Parameters are written `:name` everywhere; stores
whose driver wants another style convert them once here. A migration is known by its
file's stem (`002_slim_tables`); a new one is a new file, not a line of Python.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.abc import Traversable

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_PARAM = re.compile(r"(?<![:\w]):(\w+)")
_MIGRATION = re.compile(r"^\d{3}_\w+\.sql$")


def _dir(dialect: str) -> Traversable:
    return resources.files("tasklab.store").joinpath("sql", dialect)


def migrations(dialect: str) -> list[str]:
    """The dialect's migrations, oldest first (the schema version counts them)."""
    files = [f.name for f in _dir(dialect).joinpath("migrations").iterdir()]
    return sorted(name[:-4] for name in files if _MIGRATION.match(name))


def load(dialect: str, *, pyformat: bool = False) -> dict[str, str]:
    """Every named query, and every migration under its name."""
    text = _dir(dialect).joinpath("queries.sql").read_text()
    parts = _NAME.split(text)
    blocks = dict(zip(parts[1::2], parts[2::2], strict=True))
    for name in migrations(dialect):
        blocks[name] = _dir(dialect).joinpath("migrations", f"{name}.sql").read_text()
    return {name: _clean(body, pyformat) for name, body in blocks.items()}


def _clean(body: str, pyformat: bool) -> str:
    lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
    sql = "\n".join(lines).strip()
    if pyformat:
        sql = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
    return sql
