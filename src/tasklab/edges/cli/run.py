"""Commands that run things: worker, serve, demo."""

from __future__ import annotations

import json
import os
import sys
import threading
from functools import partial
from typing import Annotated

import typer

from tasklab.app import DEFAULT_DB
from tasklab.edges.cli.common import (
    Ahead,
    AppSpec,
    Concurrency,
    DataDir,
    Db,
    Drain,
    Lease,
    PinCpu,
    Retain,
    Runner,
    Webhook,
    _app,
    _guard,
    _on_signals,
    _split,
    cli,
    err,
    out,
    parse_age,
)
from tasklab.redact import redact


@cli.command()
def worker(
    db: Db = DEFAULT_DB,
    app: AppSpec = None,
    concurrency: Concurrency = None,
    runner: Runner = "thread",
    lease: Lease = 30.0,
    drain_timeout: Drain = 10.0,
    data_dir: DataDir = None,
    webhook: Webhook = None,
    pin_cpu: PinCpu = None,
    ahead: Ahead = None,
    retain: Retain = None,
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", help="Claim only from this queue (repeatable; default: all)."),
    ] = None,
    no_scheduler: Annotated[
        bool, typer.Option("--no-scheduler", help="Do not run the schedules here.")
    ] = False,
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
                ahead=ahead,
                retain=keep,
                queues=queue or None,
                scheduler=not no_scheduler,
            ).start()
        )
        served = f" (queues: {', '.join(w.queues)})" if w.queues else ""
        err.print(
            f"tasklab worker ready: {w.concurrency} {runner} slots on {redact(db)}{served}",
            highlight=False,
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
    concurrency: Concurrency = None,
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
            "--max-streams",
            min=1,
            help="Concurrent SSE streams; past it, 503 too_many_streams.",
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
        int,
        typer.Option("--jsonl-max-connections", min=1, help="Open JSON-lines connections."),
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
                token = a.change_token()
                done = 0
                for t in ids:
                    for ev in a.events(t, seen[t]):
                        seen[t] = ev.seq
                        if ev.type == "progress":
                            progress.update(
                                bars[t],
                                completed=ev.data["done"],
                                total=ev.data["total"],
                            )
                    snap = a.query(t)
                    progress.update(bars[t], state=snap.state.value)
                    done += snap.terminal
                if done == len(ids):
                    break
                a.wait_change(token, 0.2)
        for t in ids:
            top = a.query(t).result["top"][:3]
            out.print(f"{t}: top words {top}", highlight=False)
