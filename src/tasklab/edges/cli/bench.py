"""`tasklab bench queue|runners|serve|search|handles`: numbers with their conditions."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.table import Table

from tasklab.app import DEFAULT_DB
from tasklab.edges.cli.common import (
    AsJson,
    Db,
    PinCpu,
    _guard,
    cli,
    err,
    out,
)


def _report(
    as_json: bool, doc: dict[str, Any], table: Callable[[], Table], conditions: dict[str, Any]
) -> None:
    """A benchmark's figures: one JSON document, or a table always printed with the
    conditions it was measured under."""
    if as_json:
        out.print_json(json.dumps(doc))
        return
    out.print(table())
    out.print(json.dumps(conditions), highlight=False)


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
        int,
        typer.Option("--runs", min=1, help="Measure this many times; a column each."),
    ] = 1,
    backlog: Annotated[
        int | None,
        typer.Option(
            "--backlog",
            min=1000,
            help="Instead: queue this many tasks at once and drain them with the default "
            "worker, a rate per window (does the drain slow as history grows?).",
        ),
    ] = None,
    window: Annotated[int, typer.Option("--window", min=100)] = 100_000,
    limits: Annotated[
        bool,
        typer.Option(
            "--limits",
            help="Instead: the default worker's drain plainly and with a queue limit, a "
            "per-key limit over 1,000 keys and a rate limit (all far above the drain), "
            "in alternating rounds (--runs).",
        ),
    ] = False,
    schedules: Annotated[
        int | None,
        typer.Option(
            "--schedules",
            min=1,
            help="Instead: this many interval schedules due at once; the scheduler's CPU "
            "per tick and how late the ticks' tasks are.",
        ),
    ] = None,
    durable: Annotated[
        bool,
        typer.Option(
            "--durable",
            help="Instead: a step's cost, a suspend+resume round trip, and 10,000 tasks "
            "sleeping at once (the worker's CPU meanwhile, how late they wake).",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Enqueue one by one, from 32 threads and in batches, drain (the default worker and
    chosen concurrencies), enqueue→start latency."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from tasklab.bench import limits as limit_bench
    from tasklab.bench import queue

    if backlog is not None:
        _bench_backlog(db, backlog, min(window, backlog), durability, as_json)
        return
    if durable:
        from tasklab.bench import durable as durable_bench

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err) as p:
            p.add_task("durable functions", total=None)
            doc = _guard(lambda: durable_bench.run(db, durability))
        from tasklab.bench.tables import dict_table

        _report(as_json, doc, lambda: dict_table(doc), doc["conditions"])
        return
    if limits or schedules is not None:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err) as p:
            p.add_task("limits" if limits else f"{schedules:,} schedules", total=None)
            doc = _guard(
                lambda: (
                    limit_bench.run_limits(db, n, durability, max(runs, 2))
                    if limits
                    else limit_bench.run_schedules(db, schedules or 0, durability)
                )
            )
        from tasklab.bench.tables import dict_table

        _report(as_json, doc, lambda: dict_table(doc), doc["conditions"])
        return

    reports = []
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        for i in range(runs):
            task = progress.add_task(f"run {i + 1} of {runs}", total=None)
            reports.append(
                _guard(
                    lambda: queue.run(db, n, durability, concurrency or [1, 64], samples, pin_cpu)
                )
            )
            progress.update(task, total=1, completed=1)
    from tasklab.bench.tables import queue_table

    docs = [r.to_json() for r in reports]
    doc = docs[0] if runs == 1 else {"runs": docs}
    _report(as_json, doc, lambda: queue_table(reports), reports[0].conditions)


def _bench_backlog(db: str, n: int, window: int, durability: str, as_json: bool) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tasklab.bench import backlog

    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err
    ) as progress:
        bars: dict[str, Any] = {}

        def tick(what: str, done: int, total: int) -> None:
            if what not in bars:
                bars[what] = progress.add_task(what, total=total)
            progress.update(bars[what], completed=done)

        report = _guard(lambda: backlog.run(db, n, window, durability, tick))
    from tasklab.bench.tables import backlog_table

    _report(as_json, report.to_json(), lambda: backlog_table(report), report.conditions)


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
    from tasklab.bench.tables import runners_table

    _report(as_json, asdict(report), lambda: runners_table(report), report.conditions)


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
    from tasklab.bench.tables import serve_table

    _report(as_json, report.to_json(), lambda: serve_table(report), report.conditions)


@bench.command("search")
def bench_search(
    db: Db = DEFAULT_DB,
    n: Annotated[int, typer.Option("--n", min=1000)] = 100_000,
    as_json: AsJson = False,
) -> None:
    """Every search filter on a store of N tasks (an empty database): the plan chosen
    for its first page and how long a page takes, first and after ten pages."""
    import os
    import platform

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tasklab.bench import search
    from tasklab.redact import redact

    with Progress(
        TextColumn("filling"), BarColumn(), MofNCompleteColumn(), console=err, transient=True
    ) as p:
        bar = p.add_task("fill", total=n)
        doc = _guard(lambda: search.run(db, n, lambda done: p.update(bar, completed=done)))
    conditions = {
        "db": redact(db),
        "n": n,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "page": 50,
    }

    def table() -> Table:
        t = Table("filter", "first page", "11th page", "plan", title=f"search, {n:,} tasks")
        for name, m in doc.items():
            deep = f"{m['deep_page_ms']} ms" if m["deep_page_ms"] is not None else "-"
            plan = " / ".join(
                line.strip()
                for line in m["plan"]
                if "Scan" in line or "SCAN" in line or "SEARCH" in line
            )
            t.add_row(name, f"{m['first_page_ms']} ms", deep, plan)
        return t

    _report(as_json, {"conditions": conditions, "filters": doc}, table, conditions)


@bench.command("handles")
def bench_handles(
    db: Db = DEFAULT_DB,
    samples: Annotated[int, typer.Option("--samples", min=10)] = 200,
    durability: Annotated[str, typer.Option("--durability")] = "full",
    as_json: AsJson = False,
) -> None:
    """How soon TaskHandle.result() returns after a worker process's terminal commit."""
    import os
    import platform

    from tasklab.bench import handles
    from tasklab.redact import redact

    doc = _guard(lambda: handles.run(db, samples, durability))
    conditions = {
        "db": redact(db),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "worker": "the default worker in its own process, one task at a time",
    }

    def table() -> Table:
        t = Table("result() after the terminal commit", "ms", title="handles")
        for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
            t.add_row(k.removesuffix("_ms"), str(doc[k]))
        return t

    _report(as_json, {"conditions": conditions, **doc}, table, conditions)
