"""Loads the named SQL blocks of a store's `.sql` file.

A block starts with `-- name: <name>` followed by a one-line `--` description; the
SQL runs until the next `-- name:`. Parameters are written `:name` everywhere; stores
whose driver wants another style convert them once here.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_PARAM = re.compile(r"(?<![:\w]):(\w+)")


def load(dialect: str, *, pyformat: bool = False) -> dict[str, str]:
    text = resources.files("tasklab.store").joinpath("sql", f"{dialect}.sql").read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        sql = "\n".join(lines).strip()
        if pyformat:
            sql = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        queries[name] = sql
    return queries
