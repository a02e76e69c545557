"""`tasklab queues list|set|pause|resume`, `tasklab schedules list|remove`, and
`tasklab signal` (the commands of SPEC §7 and §8 beside the tasks')."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from tasklab.app import DEFAULT_DB
from tasklab.core.queueing import KEEP
from tasklab.edges.cli.common import (
    AppSpec,
    AsJson,
    Db,
    _app,
    _fail,
    _guard,
    _parse_json,
    cli,
    out,
)
from tasklab.errors import TaskNotFound

queues = typer.Typer(help="Queues: limits and pause, kept in the database.", no_args_is_help=True)
schedules = typer.Typer(help="Schedules kept in the database.", no_args_is_help=True)
cli.add_typer(queues, name="queues")
cli.add_typer(schedules, name="schedules")


def _print_queues(items: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(items))
        return
    table = Table("queue", "paused", "concurrency", "rate", "queued", "running", "claimed")
    for q in items:
        table.add_row(
            str(q["name"]),
            "yes" if q["paused"] else "no",
            "-" if q["concurrency"] is None else str(q["concurrency"]),
            q["rate"] or "-",
            f"{q['queued']:,}",
            f"{q['running']:,}",
            f"{q['claimed']:,}",
        )
    out.print(table)


@queues.command("list")
def queues_list(db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Every queue with its settings, queued and running tasks, and claims so far."""
    with _app(db, app) as a:
        _print_queues(_guard(a.queues), as_json)


@queues.command("set")
def queues_set(
    name: str,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="At most N running; 'none' removes.")
    ] = None,
    rate: Annotated[
        str | None, typer.Option("--rate", help="e.g. 100/s, 600/m; 'none' removes.")
    ] = None,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """Set a queue's limits (an option left out stays as it is)."""
    if concurrency is None and rate is None:
        _fail(ValueError("give --concurrency and/or --rate"), 2)
    limit: Any = KEEP
    if concurrency is not None:
        limit = None if concurrency.lower() == "none" else _int(concurrency)
    per: Any = KEEP if rate is None else (None if rate.lower() == "none" else rate)
    with _app(db, app) as a:
        _guard(lambda: a.configure_queue(name, concurrency=limit, rate=per))
        _print_queues([q for q in _guard(a.queues) if q["name"] == name], as_json)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        _fail(ValueError(f"--concurrency must be an integer or 'none', got {text!r}"), 2)


@queues.command("pause")
def queues_pause(name: str, db: Db = DEFAULT_DB, app: AppSpec = None) -> None:
    """No new claims from NAME until resumed (running tasks go on)."""
    with _app(db, app) as a:
        _guard(lambda: a.pause(name))
    out.print(f"paused {name}", highlight=False)


@queues.command("resume")
def queues_resume(name: str, db: Db = DEFAULT_DB, app: AppSpec = None) -> None:
    """Claims from NAME again."""
    with _app(db, app) as a:
        _guard(lambda: a.resume(name))
    out.print(f"resumed {name}", highlight=False)


@schedules.command("list")
def schedules_list(db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Every stored schedule: its task, expression, next tick and last task."""
    with _app(db, app) as a:
        items = _guard(a.schedules)
    if as_json:
        out.print_json(json.dumps(items))
        return
    table = Table("schedule", "task", "expression", "next tick", "last task")
    for s in items:
        table.add_row(
            str(s["name"]),
            str(s["task"]),
            str(s["expression"]),
            str(s["next_tick"]),
            str(s["last_task_id"] or "-"),
        )
    out.print(table)


@schedules.command("remove")
def schedules_remove(name: str, db: Db = DEFAULT_DB, app: AppSpec = None) -> None:
    """Forget a schedule (the tasks it made stay)."""
    with _app(db, app) as a:
        removed = _guard(lambda: a.unschedule(name))
    if not removed:
        _fail(TaskNotFound(f"no schedule named {name!r}"), 2)
    out.print(f"removed {name}", highlight=False)


@cli.command()
def signal(
    task_id: str,
    name: str,
    data: Annotated[str, typer.Option("--data", help="JSON; '-' reads stdin.")] = "null",
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """Send signal NAME to a task (once per name: a second answers the first)."""
    with _app(db, app) as a:
        stored, created = _guard(lambda: a.signal(task_id, name, _parse_json(data)))
    if as_json:
        out.print_json(json.dumps({"name": name, "data": stored, "created": created}))
    else:
        out.print(f"{'sent' if created else 'already sent'} {name}", highlight=False)
