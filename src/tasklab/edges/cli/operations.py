"""Search and the operator's actions: `list` with filters, `cancel` and `retry` of one
task by id or of every task a filter matches (`--dry-run` counts; a progress bar while
the batches run; a prompt unless `--yes`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tasklab.app import DEFAULT_DB, TaskApp
from tasklab.core.filters import TaskFilter
from tasklab.core.models import Page
from tasklab.edges.cli.common import AppSpec, AsJson, Db, _app, _guard, _print_task, cli, err, out
from tasklab.errors import InvalidPayload

State_ = Annotated[str | None, typer.Option("--state", help="One state.")]
Task = Annotated[str | None, typer.Option("--task", help="One task name.")]
Queue = Annotated[str | None, typer.Option("--queue", help="One queue.")]
Parent = Annotated[str | None, typer.Option("--parent", help="Only its children.")]
Key = Annotated[str | None, typer.Option("--key", help="The task holding this idempotency key.")]
Prefix = Annotated[str | None, typer.Option("--id-prefix", help="Ids starting so.")]
After = Annotated[str | None, typer.Option("--created-after", help="ISO 8601 time with an offset.")]
Before = Annotated[
    str | None, typer.Option("--created-before", help="ISO 8601 time with an offset.")
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Count what would be taken, change nothing.")
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Act without asking.")]
Batch = Annotated[int, typer.Option("--batch", min=1, max=1000, help="Tasks per transaction.")]


def _filter(
    state: str | None,
    task: str | None,
    queue: str | None,
    parent: str | None,
    key: str | None,
    prefix: str | None,
    after: str | None,
    before: str | None,
) -> TaskFilter:
    return _guard(
        lambda: TaskFilter.of(
            state=state,
            task=task,
            queue=queue,
            parent_id=parent,
            idempotency_key=key,
            id_prefix=prefix,
            created_after=after,
            created_before=before,
        )
    )


@cli.command("list")
def list_(
    state: State_ = None,
    task: Task = None,
    queue: Queue = None,
    parent: Parent = None,
    key: Key = None,
    id_prefix: Prefix = None,
    created_after: After = None,
    created_before: Before = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    cursor: Annotated[str | None, typer.Option("--cursor")] = None,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """List tasks, newest first; every filter given must hold."""
    where = _filter(state, task, queue, parent, key, id_prefix, created_after, created_before)
    with _app(db, app) as a:
        page = _guard(lambda: a.search(where, limit=limit, cursor=cursor))
    if as_json:
        items = [s.to_json(payload=False) for s in page.items]
        out.print_json(json.dumps({"items": items, "next_cursor": page.next_cursor}))
    else:
        _table(page)


def _table(page: Page) -> None:
    table = Table()
    # the id whole on one line (users copy it); the others give way in a narrow terminal
    table.add_column("id", no_wrap=True, min_width=24)
    table.add_column("task", overflow="fold")
    table.add_column("state", no_wrap=True)
    table.add_column("attempt", no_wrap=True)
    table.add_column("created (UTC)", overflow="fold", max_width=19)
    table.add_column("error", overflow="fold")
    for s in page.items:
        table.add_row(
            s.id,
            s.task,
            s.state.value,
            f"{s.attempt}/{s.max_attempts}",
            s.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            s.error.code if s.error else "",
        )
    out.print(table)
    if page.next_cursor:
        out.print(f"more: --cursor {page.next_cursor}")


@cli.command()
def cancel(
    task_id: Annotated[str | None, typer.Argument(help="One task; or filter options.")] = None,
    state: State_ = None,
    task: Task = None,
    queue: Queue = None,
    parent: Parent = None,
    key: Key = None,
    id_prefix: Prefix = None,
    created_after: After = None,
    created_before: Before = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    batch: Batch = 500,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """Cancel a task (queued → cancelled, running → cancel_requested), or every live
    task the filter options match."""
    where = _filter(state, task, queue, parent, key, id_prefix, created_after, created_before)
    with _app(db, app) as a:
        if task_id is None:
            _bulk(a, "cancel", a.cancel_where, where, dry_run, yes, batch, as_json)
            return
        _one_only(where, dry_run)
        outcome = _guard(lambda: a.cancel(task_id))
        snap = a.query(task_id)
    if as_json:
        doc = {"request_accepted": outcome.request_accepted, "task": snap.to_json()}
        out.print_json(json.dumps(doc))
    else:
        print(f"request_accepted={str(outcome.request_accepted).lower()} state={snap.state.value}")


@cli.command()
def retry(
    task_id: Annotated[
        str | None, typer.Argument(help="One ended task; or filter options.")
    ] = None,
    state: State_ = None,
    task: Task = None,
    queue: Queue = None,
    parent: Parent = None,
    key: Key = None,
    id_prefix: Prefix = None,
    created_after: After = None,
    created_before: Before = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    batch: Batch = 500,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """A new task made of an ended one (it stays as it ended); prints the new id. With
    filter options: a retry of each ended task matched (failed and cancelled ones
    unless --state names another) that has none yet."""
    where = _filter(state, task, queue, parent, key, id_prefix, created_after, created_before)
    with _app(db, app) as a:
        if task_id is None:
            _bulk(a, "retry", a.retry_where, where, dry_run, yes, batch, as_json)
            return
        _one_only(where, dry_run)
        new = _guard(lambda: a.retry(task_id))
        if as_json:
            _print_task(a.query(new), True)
        else:
            print(new)


def _one_only(where: TaskFilter, dry_run: bool) -> None:
    if not where.empty or dry_run:
        _guard(lambda: _refuse("give a task id or filter options, not both"))


def _refuse(message: str) -> None:
    raise InvalidPayload(message)


def _bulk(
    a: TaskApp,
    verb: str,
    action: Callable[..., dict[str, int]],
    where: TaskFilter,
    dry_run: bool,
    yes: bool,
    batch: int,
    as_json: bool,
) -> None:
    counted = _guard(lambda: action(where, dry_run=True))["matched"]
    if dry_run:
        _report({"matched": counted}, f"would {verb} {counted:,} task(s)", as_json)
        return
    if counted and not yes:
        if not sys.stdin.isatty():
            _guard(
                lambda: _refuse(f"{verb} {counted:,} task(s)? add --yes to act without a prompt")
            )
        typer.confirm(f"{verb} {counted:,} task(s)?", abort=True, err=True)
    with Progress(
        TextColumn(f"{verb}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=as_json,
    ) as progress:
        bar = progress.add_task(verb, total=counted or None)

        def show(totals: dict[str, int]) -> None:
            progress.update(bar, completed=totals["matched"])

        totals = _guard(lambda: action(where, batch=batch, progress=show))
    summary = ", ".join(f"{n:,} {what}" for what, n in totals.items())
    _report(totals, summary, as_json)


def _report(doc: dict[str, Any], text: str, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(doc))
    else:
        print(text)
