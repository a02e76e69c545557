"""`tasklab webhooks list|remove`."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from tasklab.app import DEFAULT_DB
from tasklab.edges.cli.common import (
    AsJson,
    Db,
    _app,
    _fail,
    _guard,
    cli,
    out,
)
from tasklab.errors import (
    TaskNotFound,
)

webhooks = typer.Typer(
    help="Webhook subscriptions, kept in the database by the dispatchers of `--webhook`.",
    no_args_is_help=True,
)
cli.add_typer(webhooks, name="webhooks")


@webhooks.command("list")
def webhooks_list(db: Db = DEFAULT_DB, as_json: AsJson = False) -> None:
    """Subscribed URLs and how many notifications each has still to receive."""
    with _app(db, None) as a:
        subscribed = _guard(a.webhooks)
    if as_json:
        out.print_json(json.dumps(subscribed))
        return
    table = Table("url", "pending")
    for url, pending in subscribed.items():
        table.add_row(url, f"{pending:,}")
    out.print(table)


@webhooks.command("remove")
def webhooks_remove(url: str, db: Db = DEFAULT_DB) -> None:
    """Stop queueing notifications for URL and drop what it has still to receive."""
    with _app(db, None) as a:
        removed = _guard(lambda: a.unsubscribe(url))
    if not removed:
        _fail(TaskNotFound(f"no webhook subscription for {url!r}"), 2)
    out.print(f"removed {url}", highlight=False)
