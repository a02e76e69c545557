"""What every `tasklab` command shares: the Typer app, the option types, loading the
app, and turning errors into one line on stderr with an exit code (2 for bad input, 1
for everything else)."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tasklab.app import TaskApp
from tasklab.core.models import TaskSnapshot
from tasklab.edges.loading import load_app
from tasklab.errors import (
    IdempotencyConflict,
    InvalidPayload,
    TasklabError,
    TaskLive,
    TaskNotFound,
    TaskTerminal,
    UnknownTask,
)
from tasklab.redact import redact

cli = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="tasklab: durable tasks that tell the truth.",
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
        "--data-dir",
        envvar="TASKLAB_DATA_DIR",
        help="Directory tasks may read files from.",
    ),
]
Lease = Annotated[
    float,
    typer.Option("--lease", envvar="TASKLAB_LEASE", min=1.0, help="Lease seconds."),
]
Drain = Annotated[
    float,
    typer.Option(
        "--drain-timeout",
        min=0.0,
        help="Seconds running tasks get to finish at shutdown.",
    ),
]
Runner = Annotated[str, typer.Option("--runner", help="thread | process | async")]
Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        min=1,
        help="Slots: tasks at once (default: 32 on the thread and async runners, one per "
        "CPU on the process runner)",
        show_default=False,
    ),
]
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
Ahead = Annotated[
    int | None,
    typer.Option(
        "--ahead",
        min=0,
        help="Thread runner: claims beyond the slots while tasks are short (default 128), "
        "started as earlier tasks' terminal writes commit; at most --concurrency task "
        "functions run at once. 0: none.",
        show_default=False,
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

BAD_INPUT = (
    InvalidPayload,
    UnknownTask,
    IdempotencyConflict,
    TaskNotFound,
    TaskTerminal,
    TaskLive,
    ValueError,
)
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
    err.print(
        f"error: {name}: {redact(str(exc))}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
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


def _split(values: list[str] | None) -> list[str]:
    """Repeated options, each of which may also be a comma-separated list (env)."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def _on_signals(handler: Callable[[], None]) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: handler())
