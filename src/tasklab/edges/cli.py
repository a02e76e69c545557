"""The `tasklab` command. Every command takes `--db` and `--app` after its name;
every command that prints a task takes `--json`. Errors: one line on stderr, non-zero
exit (2 for bad input, 1 for everything else)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tasklab.app import DEFAULT_DB, TaskApp
from tasklab.core.models import TaskSnapshot
from tasklab.core.states import State
from tasklab.edges import watching
from tasklab.edges.loading import load_app
from tasklab.errors import (
    IdempotencyConflict,
    InvalidPayload,
    TasklabError,
    TaskNotFound,
    UnknownTask,
)
from tasklab.redact import redact

cli = typer.Typer(
    add_completion=False, no_args_is_help=True, help="tasklab: durable tasks that tell the truth."
)
out = Console()
err = Console(stderr=True)

Db = Annotated[str, typer.Option("--db", envvar="TASKLAB_DB", help="Database URL.")]
AppSpec = Annotated[
    str | None,
    typer.Option("--app", envvar="TASKLAB_APP", help="module:attr of a TaskApp with your tasks."),
]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
DataDir = Annotated[
    str | None,
    typer.Option(
        "--data-dir", envvar="TASKLAB_DATA_DIR", help="Directory tasks may read files from."
    ),
]
Lease = Annotated[
    float, typer.Option("--lease", envvar="TASKLAB_LEASE", min=1.0, help="Lease seconds.")
]
Drain = Annotated[
    float,
    typer.Option(
        "--drain-timeout", min=0.0, help="Seconds running tasks get to finish at shutdown."
    ),
]
Runner = Annotated[str, typer.Option("--runner", help="thread | process | async")]
Concurrency = Annotated[int, typer.Option("--concurrency", min=1)]
PinCpu = Annotated[
    int | None,
    typer.Option(
        "--pin-cpu",
        min=0,
        help="Thread runner: run its threads on this one CPU (Linux). Pure-Python tasks "
        "lose nothing (one thread runs Python at a time) and hand-offs skip cross-CPU "
        "wake-ups; tasks computing in C without the GIL lose their parallelism.",
    ),
]
Webhook = Annotated[list[str] | None, typer.Option("--webhook", help="Repeatable webhook URL.")]
Retain = Annotated[
    str | None,
    typer.Option(
        "--retain",
        envvar="TASKLAB_RETAIN",
        help="Prune terminal tasks that finished longer ago (90s, 15m, 12h, 7d), every minute.",
    ),
]

BAD_INPUT = (InvalidPayload, UnknownTask, IdempotencyConflict, TaskNotFound, ValueError)
T = TypeVar("T")


@contextmanager
def _app(db: str, spec: str | None, **kw: Any) -> Iterator[TaskApp]:
    app = _guard(lambda: load_app(db, spec, **kw))
    try:
        yield app
    finally:
        app.close()


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except BAD_INPUT as exc:
        _fail(exc, 2)
    except (TasklabError, OSError) as exc:
        _fail(exc, 1)


def _fail(exc: BaseException, code: int) -> NoReturn:
    name = getattr(exc, "code", type(exc).__name__)
    err.print(f"error: {name}: {redact(str(exc))}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _print_task(snap: TaskSnapshot, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(snap.to_json()))
        return
    table = Table(show_header=False, box=None)
    for key, value in snap.to_json().items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        table.add_row(key, shown if len(shown) < 200 else shown[:197] + "…")
    out.print(table)


def _parse_json(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        with open(text[1:], encoding="utf-8") as fh:
            text = fh.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"--payload is not valid JSON: {exc}") from None


@cli.command()
def submit(
    task: Annotated[str, typer.Argument(help="Registered task name.")],
    payload: Annotated[
        str, typer.Option("--payload", help="JSON object; '-' reads stdin, '@file' reads a file.")
    ] = "{}",
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", min=1)] = None,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Queue a task; prints its id."""
    with _app(db, app, data_dir=data_dir) as a:
        snap, created = _guard(lambda: a.submit_ex(task, _parse_json(payload), key, max_attempts))
        if as_json:
            out.print_json(json.dumps({"id": snap.id, "created": created, "task": snap.to_json()}))
        else:
            print(snap.id)


@cli.command()
def status(task_id: str, db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Show one task."""
    with _app(db, app) as a:
        _print_task(_guard(lambda: a.query(task_id)), as_json)


@cli.command("list")
def list_(
    state: Annotated[str | None, typer.Option("--state")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    cursor: Annotated[str | None, typer.Option("--cursor")] = None,
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    as_json: AsJson = False,
) -> None:
    """List tasks, newest first."""
    with _app(db, app) as a:
        page = _guard(lambda: a.list(state, limit, cursor))
        if as_json:
            out.print_json(
                json.dumps(
                    {
                        "items": [s.to_json(payload=False) for s in page.items],
                        "next_cursor": page.next_cursor,
                    }
                )
            )
            return
        table = Table("id", "task", "state", "attempt", "created", "error")
        for s in page.items:
            table.add_row(
                s.id,
                s.task,
                s.state.value,
                f"{s.attempt}/{s.max_attempts}",
                s.to_json()["created_at"],
                s.error.code if s.error else "",
            )
        out.print(table)
        if page.next_cursor:
            out.print(f"more: --cursor {page.next_cursor}")


@cli.command()
def cancel(task_id: str, db: Db = DEFAULT_DB, app: AppSpec = None, as_json: AsJson = False) -> None:
    """Cancel a task: queued → cancelled, running → cancel_requested."""
    with _app(db, app) as a:
        outcome = _guard(lambda: a.cancel(task_id))
        snap = a.query(task_id)
        if as_json:
            out.print_json(
                json.dumps({"request_accepted": outcome.request_accepted, "task": snap.to_json()})
            )
        else:
            print(
                f"request_accepted={str(outcome.request_accepted).lower()} state={snap.state.value}"
            )


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
            "counters": a.store.counters(),
            "workers": a.store.workers(),
        }
        if as_json:
            out.print_json(json.dumps(doc))
            return
        table = Table("what", "value")
        for k, v in doc["counts"].items():
            table.add_row(f"tasks {k}", str(v))
        for k, v in doc["counters"].items():
            table.add_row(k, str(v))
        table.add_row("live workers (registered)", str(len(doc["workers"])))
        out.print(table)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str, option: str = "--older-than") -> timedelta:
    """`90`, `90s`, `15m`, `12h`, `7d`, `2w` → a duration (not negative)."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        age = timedelta(seconds=float(number) * _UNITS[unit])
    except (ValueError, OverflowError):  # not a number, nan, inf, beyond timedelta
        age = timedelta(-1)
    if age < timedelta(0):
        raise InvalidPayload(f"{option} {text!r} is not a duration like 90s, 15m, 12h, 7d")
    return age


@cli.command()
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", help="Terminal tasks that finished longer ago: 90s, 15m, 12h, 7d."
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
                age, batch=batch, progress=lambda t: progress.update(bar, completed=t["tasks"])
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


@cli.command()
def worker(
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    concurrency: Concurrency = 4,
    runner: Runner = "thread",
    lease: Lease = 30.0,
    drain_timeout: Drain = 10.0,
    data_dir: DataDir = None,
    webhook: Webhook = None,
    pin_cpu: PinCpu = None,
    retain: Retain = None,
) -> None:
    """Claim and run tasks until SIGTERM/SIGINT, then shut down gracefully (exit 0)."""
    hooks = _webhooks(webhook)
    keep = _guard(lambda: parse_age(retain, "--retain")) if retain is not None else None
    with _app(db, app, data_dir=data_dir, lease=lease, drain_timeout=drain_timeout) as a:
        stop = threading.Event()
        _on_signals(stop.set)
        w = _guard(
            lambda: a.worker(
                runner=runner,
                concurrency=concurrency,
                webhooks=hooks,
                pin_cpu=pin_cpu,
                retain=keep,
            ).start()
        )
        err.print(
            f"tasklab worker ready: {concurrency} {runner} slots on {redact(db)}", highlight=False
        )
        while not stop.wait(0.2):
            pass
        report = w.stop()
        err.print(f"tasklab worker stopped: {json.dumps(report)}", highlight=False)
        left = _say_left_running(report.get("left_running", 0))
    _exit_now_if_threads_remain(left)


def _say_left_running(left: int) -> int:
    if left:
        err.print(
            f"tasklab: {left} task(s) still running after the drain, the cancel request "
            "and the grace period are left to their leases (a thread cannot be stopped); "
            "exiting without them",
            highlight=False,
        )
    return left


def _exit_now_if_threads_remain(left_running: int) -> None:
    """The store is closed; a task thread that was left running must not hold the
    process up (the interpreter joins executor threads at exit, daemon or not): its
    task is its lease's now."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if left_running or others:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@cli.command()
def serve(
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    jsonl_port: Annotated[int, typer.Option("--jsonl-port", min=0, max=65535)] = 7411,
    concurrency: Concurrency = 4,
    runner: Runner = "thread",
    lease: Lease = 30.0,
    drain_timeout: Drain = 10.0,
    data_dir: DataDir = None,
    webhook: Webhook = None,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Serve only; workers run elsewhere.")
    ] = False,
    max_streams: Annotated[
        int,
        typer.Option(
            "--max-streams", min=1, help="Concurrent SSE streams; past it, 503 too_many_streams."
        ),
    ] = 1000,
    pin_cpu: PinCpu = None,
    retain: Retain = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            envvar="TASKLAB_ALLOWED_HOSTS",
            help="A Host name served besides IP addresses and localhost (repeatable; "
            "'*' for any). Other names are refused: DNS rebinding.",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            envvar="TASKLAB_ALLOWED_ORIGINS",
            help="An origin (https://app.example) whose pages may make state-changing "
            "requests (repeatable). Other cross-origin writes are refused.",
        ),
    ] = None,
    max_connections: Annotated[
        int, typer.Option("--max-connections", min=1, help="Open HTTP connections.")
    ] = 2000,
    jsonl_max_connections: Annotated[
        int, typer.Option("--jsonl-max-connections", min=1, help="Open JSON-lines connections.")
    ] = 512,
    header_timeout: Annotated[
        float,
        typer.Option("--header-timeout", min=0.1, help="Seconds for a request's headers."),
    ] = 10.0,
) -> None:
    """HTTP API + dashboard + JSON-lines + an embedded worker; graceful on SIGTERM."""
    from tasklab.edges.serve import ServeOptions, check_binding, run_event_loop
    from tasklab.edges.serve import serve as run_server

    opts = ServeOptions(
        host=host,
        port=port,
        jsonl_port=jsonl_port,
        concurrency=concurrency,
        runner=runner,
        drain_timeout=drain_timeout,
        webhooks=_webhooks(webhook),
        token=os.environ.get("TASKLAB_TOKEN") or None,
        embed_worker=not no_worker,
        max_streams=max_streams,
        pin_cpu=pin_cpu,
        retain=_guard(lambda: parse_age(retain, "--retain")) if retain is not None else None,
        allowed_hosts=_split(allowed_host),
        allowed_origins=_split(allowed_origin),
        max_connections=max_connections,
        jsonl_max_connections=jsonl_max_connections,
        header_timeout=header_timeout,
    )
    _guard(lambda: check_binding(opts))
    with _app(db, app, data_dir=data_dir, lease=lease, drain_timeout=drain_timeout) as a:
        report = _guard(lambda: run_event_loop(run_server(a, opts)))
        left = _say_left_running((report.get("worker") or {}).get("left_running", 0))
    _exit_now_if_threads_remain(left)


def _webhooks(given: list[str] | None) -> list[str]:
    """`--webhook` values and `TASKLAB_WEBHOOKS`, each checked (exit 2 on a bad one)."""
    from tasklab.service.outbox import check_webhook_url

    env = [u.strip() for u in os.environ.get("TASKLAB_WEBHOOKS", "").split(",") if u.strip()]
    return [_guard(partial(check_webhook_url, u)) for u in [*(given or []), *env]]


def _split(values: list[str] | None) -> list[str]:
    """Repeated options, each of which may also be a comma-separated list (env)."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def _on_signals(handler: Callable[[], None]) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: handler())


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)


def _print_report(table: Table, conditions: dict[str, Any]) -> None:
    """A benchmark's figures, always with the conditions they were measured under."""
    out.print(table)
    out.print(json.dumps(conditions), highlight=False)


webhooks = typer.Typer(
    help="Webhook subscriptions, kept in the database by the dispatchers of `--webhook`.",
    no_args_is_help=True,
)
cli.add_typer(webhooks, name="webhooks")


@webhooks.command("list")
def webhooks_list(db: Db = DEFAULT_DB, as_json: AsJson = False) -> None:
    """Subscribed URLs and how many notifications each has still to receive."""
    with _app(db, None) as a:
        subscribed = _guard(a.store.webhooks)
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
        removed = _guard(lambda: a.store.unsubscribe(url))
    if not removed:
        _fail(TaskNotFound(f"no webhook subscription for {url!r}"), 2)
    out.print(f"removed {url}", highlight=False)


bench = typer.Typer(help="Benchmarks: numbers with their conditions.", no_args_is_help=True)
cli.add_typer(bench, name="bench")


@bench.command("queue")
def bench_queue(
    db: Db = DEFAULT_DB,
    n: Annotated[int, typer.Option("--n", min=100)] = 5000,
    durability: Annotated[str, typer.Option("--durability")] = "full",
    concurrency: Annotated[list[int] | None, typer.Option("--concurrency")] = None,
    samples: Annotated[int, typer.Option("--latency-samples", min=10)] = 300,
    pin_cpu: PinCpu = None,
    runs: Annotated[
        int, typer.Option("--runs", min=1, help="Measure this many times; a column each.")
    ] = 1,
    as_json: AsJson = False,
) -> None:
    """Enqueue one by one and in batches, drain, enqueue→start latency."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from tasklab.bench import queue

    reports = []
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
    ) as progress:
        for i in range(runs):
            task = progress.add_task(f"run {i + 1} of {runs}", total=None)
            reports.append(
                _guard(
                    lambda: queue.run(db, n, durability, concurrency or [1, 64], samples, pin_cpu)
                )
            )
            progress.update(task, total=1, completed=1)
    if as_json:
        docs = [r.to_json() for r in reports]
        out.print_json(json.dumps(docs[0] if runs == 1 else {"runs": docs}))
        return
    first = reports[0]
    table = Table(
        "figure",
        *(["value"] if runs == 1 else [f"run {i + 1}" for i in range(runs)]),
        title=f"tasklab bench queue — {redact(first.db)}, N={first.n}",
    )
    columns = [_queue_figures(r) for r in reports]
    for row, label in enumerate(label for label, _ in columns[0]):
        table.add_row(label, *(col[row][1] for col in columns))
    _print_report(table, first.conditions)


def _queue_figures(r: Any) -> list[tuple[str, str]]:
    share = r.enqueue_one_per_s / max(r.single_commit_per_s, 1)
    lat = r.latency_ms
    return [
        ("single commit (store)", f"{r.single_commit_per_s:,}/s"),
        ("enqueue one at a time", f"{r.enqueue_one_per_s:,}/s ({share:.0%} of a commit)"),
        ("enqueue submit_many", f"{r.enqueue_batch_per_s:,}/s"),
        *((f"drain, concurrency {c}", f"{rate:,}/s") for c, rate in r.drain_per_s.items()),
        ("latency p50/p95/p99", f"{lat['p50']} / {lat['p95']} / {lat['p99']} ms"),
        ("prune (terminal tasks)", f"{r.prune_per_s:,}/s"),
    ]


@bench.command("runners")
def bench_runners(
    megabytes: Annotated[float, typer.Option("--mb", min=1.0)] = 24.0,
    files: Annotated[int, typer.Option("--files", min=2)] = 8,
    repeat: Annotated[int, typer.Option("--repeat", min=1)] = 5,
    png: Annotated[str | None, typer.Option("--png", help="Write a chart here.")] = None,
    as_json: AsJson = False,
) -> None:
    """wordfreq on thread, process and asyncio runners with 1 and 2 workers."""
    from dataclasses import asdict

    from tasklab.bench import runners

    report = _guard(lambda: runners.run(megabytes, files, repeat))
    if png:
        runners.chart(report, png)
    if as_json:
        out.print_json(json.dumps(asdict(report)))
        return
    table = Table(
        "runner",
        "workers",
        "wall s",
        "CPU s",
        "speed-up",
        "per-task overhead",
        title=f"tasklab bench runners — {report.corpus_mb} MB, {report.files} "
        f"tasks, median of {report.repeat}",
    )
    for f in report.figures:
        table.add_row(
            f.kind,
            str(f.workers),
            f"{f.wall_s:.2f}",
            f"{f.cpu_s:.2f}",
            f"{f.speedup:.2f}×",
            f"{f.overhead_ms:.2f} ms" if f.overhead_ms else "",
        )
    _print_report(table, report.conditions)


@bench.command("serve")
def bench_serve(
    n: Annotated[int, typer.Option("--n", min=100)] = 5000,
    events: Annotated[int, typer.Option("--events", min=100)] = 5000,
    idle: Annotated[int, typer.Option("--idle", min=1, max=5000)] = 1000,
    as_json: AsJson = False,
) -> None:
    """Submits/s over HTTP and JSON-lines, SSE events/s, resume time, idle memory."""
    from tasklab.bench import serve as bench_serve_mod

    report = _guard(lambda: bench_serve_mod.run(n, events, idle))
    if as_json:
        out.print_json(json.dumps(report.to_json()))
        return
    table = Table("figure", "value", title="tasklab bench serve")
    table.add_row("HTTP submits", f"{report.http_submits_per_s:,}/s")
    table.add_row("JSON-lines submits", f"{report.jsonl_submits_per_s:,}/s")
    for subs, rate in report.sse_events_per_s.items():
        table.add_row(f"SSE events delivered, {subs} subscriber(s)", f"{rate:,}/s")
    table.add_row(
        "resume (reconnect → first event)",
        f"p50 {report.resume_ms['p50']} ms, max {report.resume_ms['max']} ms",
    )
    rss = report.rss_mb
    table.add_row(
        f"server RSS, {report.idle_subscribers} idle subscribers",
        f"{rss['before']} → {rss['with_idle']} MB ({rss['per_stream_kb']} KB each)",
    )
    _print_report(table, report.conditions)


if __name__ == "__main__":
    main()


@cli.command()
def demo(
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    tasks: Annotated[int, typer.Option(min=1)] = 4,
    words: Annotated[int, typer.Option(min=1)] = 400_000,
    runner: Runner = "thread",
) -> None:
    """Run an embedded worker, submit wordfreq tasks and show their live progress."""
    import random

    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    vocab = [f"w{i}" for i in range(2000)]
    rnd = random.Random(7)
    with _app(db, app) as a, a.worker(runner=runner, concurrency=2):
        ids = [
            a.submit("wordfreq", {"text": " ".join(rnd.choices(vocab, k=words))})
            for _ in range(tasks)
        ]
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[state]}"),
            console=out,
        ) as progress:
            bars = {t: progress.add_task(t, total=1, state="queued") for t in ids}
            seen = dict.fromkeys(ids, 0)
            while True:
                token = a.store.change_token()
                done = 0
                for t in ids:
                    for ev in a.events(t, seen[t]):
                        seen[t] = ev.seq
                        if ev.type == "progress":
                            progress.update(
                                bars[t], completed=ev.data["done"], total=ev.data["total"]
                            )
                    snap = a.query(t)
                    progress.update(bars[t], state=snap.state.value)
                    done += snap.terminal
                if done == len(ids):
                    break
                a.store.wait_change(token, 0.2)
        for t in ids:
            top = a.query(t).result["top"][:3]
            out.print(f"{t}: top words {top}", highlight=False)
