"""Typed tasks: what `@app.task` returns. Still callable as the plain function (with
its context first, for tests), and submitted by calling it:

    handle = send_invoice.submit(7, "a@b.c")          # mypy checks these arguments
    handle.result(timeout=10)                         # -> dict, the function's type
    send_invoice.options(queue="mail", delay=60).submit(7, "a@b.c")
    send_invoice.submit_many([send_invoice.call(7, "a@b.c"), send_invoice.call(8, "b@c.d")])

The submit options live in `options(...)`, not beside the arguments: a ParamSpec'd
`submit(*args, **kwargs)` cannot also take keyword-only parameters (PEP 612), and
options kept apart can never clash with a parameter of the function. The arguments
become the task's JSON payload by the function's own signature (checked again at
submit: a value that is not JSON, or of the wrong JSON type, is `InvalidPayload`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from tasklab.core.queueing import SubmitOptions
from tasklab.handles import TaskHandle

if TYPE_CHECKING:
    from tasklab.app import TaskApp

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Call(Generic[P, R]):
    """One call of a task's function, checked by the type checker, not yet submitted
    (`Task.call`, for `submit_many`)."""

    payload: dict[str, Any]


@dataclass(frozen=True)
class Options:
    idempotency_key: str | None = None
    max_attempts: int | None = None
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    queue: str | None = None
    priority: int | None = None
    concurrency_key: str | None = None
    unique_key: str | None = None
    connection: Any = field(default=None, compare=False)


class Task(Generic[P, R]):
    """A registered task function, typed by its parameters `P` (after the context)
    and its return type `R`."""

    def __init__(self, app: TaskApp, name: str, fn: Callable[..., Any]) -> None:
        self.app = app
        self.name = name
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._signature = inspect.signature(fn)

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def __call__(self, ctx: Any, *args: P.args, **kwargs: P.kwargs) -> Any:
        """The plain function, run here with the context you give it (tests)."""
        return self.fn(ctx, *args, **kwargs)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Call[P, R]:
        return Call(self.payload(*args, **kwargs))

    def payload(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON payload these arguments make (TypeError for a call that does not
        fit the function, as calling it would)."""
        bound = self._signature.bind(None, *args, **kwargs)
        first = next(iter(self._signature.parameters))
        return {k: v for k, v in bound.arguments.items() if k != first}

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        return self.options().submit(*args, **kwargs)

    def submit_many(self, calls: Iterable[Call[P, R]]) -> list[TaskHandle[R]]:
        """Many calls in one transaction (all or none)."""
        return self.options().submit_many(calls)

    def options(
        self,
        *,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        queue: str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
        connection: Any = None,
    ) -> Submitter[P, R]:
        """The submit options (see `TaskApp.submit`), for the calls that follow."""
        return Submitter(
            self,
            Options(
                idempotency_key,
                max_attempts,
                run_at,
                delay,
                queue,
                priority,
                concurrency_key,
                unique_key,
                connection,
            ),
        )


class Submitter(Generic[P, R]):
    """`Task.options(...)`: submits with those options."""

    def __init__(self, task: Task[P, R], options: Options) -> None:
        self.task = task
        self.o = options

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        o, app = self.o, self.task.app
        options = SubmitOptions.of(
            run_at=o.run_at,
            delay=o.delay,
            queue=o.queue,
            priority=o.priority,
            concurrency_key=o.concurrency_key,
            unique_key=o.unique_key,
        )
        snap, _ = app.submit_ex(
            self.task.name,
            self.task.payload(*args, **kwargs),
            o.idempotency_key,
            o.max_attempts,
            options=options,
            connection=o.connection,
        )
        return TaskHandle(app, snap.id)

    def submit_many(self, calls: Iterable[Call[P, R]]) -> list[TaskHandle[R]]:
        o, app = self.o, self.task.app
        ids = app.submit_many(
            self.task.name,
            [c.payload for c in calls],
            queue=o.queue,
            priority=o.priority,
            delay=o.delay,
            connection=o.connection,
        )
        return [TaskHandle(app, i) for i in ids]


class Register(Protocol):
    """What `@app.task(...)` is: it turns a function into a `Task`, typed by the
    function (an `async def` task's result is what its coroutine returns)."""

    @overload
    def __call__(self, fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[Any, P], R]) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any]) -> Task[Any, Any]: ...


def register_with(make: Callable[[Callable[..., Any]], str], app: TaskApp) -> Register:
    """A `Register` that records the function (`make` returns its name) and wraps it."""

    class _Register:
        def __call__(self, fn: Callable[..., Any]) -> Task[Any, Any]:
            return Task(app, make(fn), fn)

    return _Register()
