"""Commands on tasks: submit, status, recover, stats, workers, prune, watch (list, cancel and
retry: operations.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from tasklab.app import DEFAULT_DB
from tasklab.core.queueing import SubmitOptions
from tasklab.core.states import State
from tasklab.edges import watching
from tasklab.edges.cli.common import (
    AppSpec,
    AsJson,
    DataDir,
    Db,
    _app,
    _guard,
    _parse_json,
    _print_task,
    cli,
    err,
    out,
    parse_age,
)


@cli.command()
def submit(
    task: Annotated[str, typer.Argument(help="Registered task name.")],
    payload: Annotated[
        str,
        typer.Option("--payload", help="JSON object; '-' reads stdin, '@file' reads a file."),
    ] = "{}",
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", min=1)] = None,
    run_at: Annotated[
        str | None, typer.Option("--run-at", help="ISO 8601 time with an offset.")
    ] = None,
    delay: Annotated[str | None, typer.Option("--delay", help="e.g. 30s, 5m, 2h.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Queue (task default).")] = None,
    priority: Annotated[
        int | None, typer.Option("--priority", help="-100..100, higher first.")
    ] = None,
    concurrency_key: Annotated[str | None, typer.Option("--concurrency-key")] = None,
    unique_key: Annotated[
        str | None, typer.Option("--unique-key", help="Refused while a task with it is live.")
    ] = None,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Queue a task; prints its id."""
    options = _guard(
        lambda: SubmitOptions.of(
            run_at=run_at,
            delay=delay,
            queue=queue,
            priority=priority,
            concurrency_key=concurrency_key,
            unique_key=unique_key,
        )
    )
    with _app(db, app, data_dir=data_dir) as a:
        snap, created = _guard(
            lambda: a.submit_ex(task, _parse_json(payload), key, max_attempts, options=options)
        )
        if as_json:
            out.print_json(json.dumps({"id": snap.id, "created": created, "task": snap.to_json()}))
        else:
            print(snap.id)


@cli.command()
def status(task_id: str, db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Show one task."""
    with _app(db, app) as a:
        _print_task(_guard(lambda: a.query(task_id)), as_json)


@cli.command()
def recover(db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Exclusive recovery: refuses while any executor is alive; otherwise settles every
    running task as its lease expiry would (retry-safe → queued, else outcome_unknown)."""
    with _app(db, app) as a:
        ids = _guard(a.recover_running)
        if as_json:
            out.print_json(json.dumps({"resolved": ids}))
        else:
            for tid in ids:
                print(tid)
            err.print(f"resolved {len(ids)} task(s)")


@cli.command()
def stats(db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Counts per state and the recovery-health counters."""
    with _app(db, app) as a:
        doc: dict[str, Any] = {
            "counts": _guard(a.counts),
            "counters": a.counters(),
            "workers": a.workers(),
            "queues": a.queues(),
        }
        if as_json:
            out.print_json(json.dumps(doc))
            return
        table = Table("what", "value")
        for k, v in doc["counts"].items():
            table.add_row(f"tasks {k}", str(v))
        for k, v in doc["counters"].items():
            table.add_row(k, str(v))
        live = [w for w in doc["workers"] if w["state"] == "live"]
        table.add_row("live workers (heartbeat rows)", str(len(live)))
        for q in doc["queues"]:
            paused = ", paused" if q["paused"] else ""
            table.add_row(
                f"queue {q['name']}",
                f"{q['queued']:,} queued, {q['running']:,} running, "
                f"{q['claimed']:,} claimed{paused}",
            )
        out.print(table)


@cli.command()
def workers(db: Db = DEFAULT_DB, as_json: AsJson = False) -> None:
    """Every executor's row: host, pid, runner, queues, slots, started, last heartbeat,
    state (live, stopped, dead) and what it runs now."""
    with _app(db, None) as a:
        rows = _guard(a.workers)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table()
    table.add_column("id", no_wrap=True)
    for name in ("state", "host / pid", "runner", "queues", "slots", "heartbeat (UTC)", "running"):
        table.add_column(name, overflow="fold")
    for w in rows:
        running = w["running"]
        table.add_row(
            str(w["id"]),
            str(w["state"]),
            f"{w['host']} / {w['pid']}",
            str(w["runner"] or ""),
            ", ".join(w["queues"]) if w["queues"] else "all",
            str(w["slots"] or ""),
            str(w["heartbeat_at"] or "")[:19].replace("T", " "),
            ", ".join(f"{t['task']} {t['id']}" for t in running) or "",
        )
    out.print(table)


@cli.command()
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Terminal tasks that finished longer ago: 90s, 15m, 12h, 7d.",
        ),
    ],
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10_000, help="Tasks per transaction.")
    ] = 500,
    db: Db = DEFAULT_DB,
    as_json: AsJson = False,
) -> None:
    """Delete old terminal tasks with their events, effect records and notifications
    (not those a subscribed webhook still waits for). Their idempotency keys are free
    again."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    age = _guard(lambda: parse_age(older_than))
    with (
        _app(db, None) as a,
        Progress(
            SpinnerColumn(),
            TextColumn("pruned {task.completed:,} tasks"),
            TimeElapsedColumn(),
            console=err,
            transient=as_json,
        ) as progress,
    ):
        bar = progress.add_task("prune", total=None)
        totals = _guard(
            lambda: a.prune(
                age,
                batch=batch,
                progress=lambda t: progress.update(bar, completed=t["tasks"]),
            )
        )
    if as_json:
        out.print_json(json.dumps(totals))
    else:
        rest = ", ".join(f"{n:,} {table} rows" for table, n in totals.items() if table != "tasks")
        print(f"deleted {totals['tasks']:,} tasks ({rest})")


@cli.command()
def watch(
    task_id: str,
    after: Annotated[int, typer.Option("--after", min=0, help="Resume after this seq.")] = 0,
    url: Annotated[str | None, typer.Option("--url", help="Follow over HTTP SSE.")] = None,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """Follow a task's events live with a progress bar until it ends."""
    if url:
        final = _guard(lambda: watching.watch_http(url, task_id, after, out, as_json))
        raise typer.Exit(0 if final.get("state") == "succeeded" else 3)
    with _app(db, app) as a:
        snap = _guard(lambda: watching.watch_store(a, task_id, after, out, as_json))
        if as_json:
            out.print_json(json.dumps(snap.to_json()))
        raise typer.Exit(0 if snap.state is State.SUCCEEDED else 3)
