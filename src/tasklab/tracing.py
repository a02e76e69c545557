"""OpenTelemetry spans, with the optional extra `tasklab[otel]` (the API; your
application brings the SDK and its exporters). Without it, or with no tracer provider
set, everything here is a no-op costing one check.

One trace crosses processes: `tasklab.submit` runs where the task is submitted and
the W3C trace context current there (`traceparent`, `tracestate`) is stored with the
task; the worker reads it back and records, as children of that context,
`tasklab.claim` (from the claim's moment to the run's start), `tasklab.execute` (the
attempt, current while your function runs, so your own spans nest under it) and
`tasklab.commit` (the attempt's terminal or retry write) under it. The execute span's
status is an error when the attempt failed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

try:  # the optional extra
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - exercised where the extra is not installed
    trace = None  # type: ignore[assignment]

NAME = "tasklab"
# A provider named by this variable is loaded by the API at its first lookup; read
# once (the environment a process starts with: reading it costs a microsecond). One
# set later is still seen as soon as anything in the process asks the API for it.
_ENV_NAMES_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


_provider_set = False


def enabled() -> bool:
    """True once the application set a tracer provider (the API's default proxy
    records nothing: then no span is made and no context stored).

    Asked on every submit and every attempt, so it answers from a flag once a
    provider is set (the API lets a process set one only once), and until then
    from the API's own global instead of the full lookup, which reads the
    environment (a microsecond a call: 8 % of the CPU of 32 threads submitting)."""
    global _provider_set
    if _provider_set:
        return True
    if trace is None:
        return False
    if getattr(trace, "_TRACER_PROVIDER", True) is None and not _ENV_NAMES_PROVIDER:
        return False
    _provider_set = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _provider_set


def _tracer() -> Any:
    return trace.get_tracer(NAME)


def current_context() -> str | None:
    """The current trace context as stored text (W3C headers as JSON), or None."""
    if not enabled():
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


_NO_SPAN = nullcontext()


def submit_span(task: str, n: int = 1) -> AbstractContextManager[Any]:
    """Around a submit: the context stored with its tasks is this span's. Untraced, a
    shared no-op: a generator's context manager would cost 32 submitting threads a
    microsecond and a half each, under one GIL."""
    if not enabled():
        return _NO_SPAN
    span: AbstractContextManager[Any] = _tracer().start_as_current_span(
        "tasklab.submit",
        kind=trace.SpanKind.PRODUCER,
        attributes={"tasklab.task": task, "tasklab.count": n},
    )
    return span


class ExecutionSpan:
    """The execute span of one attempt, parented by the submitter's stored context,
    after a claim span that covers the time from the claim to the run's start."""

    def __init__(self, stored: str | None, attributes: dict[str, Any], claimed: float) -> None:
        self._span: Any = None
        self._token: Any = None
        self.context: Any = None
        if not enabled():
            return
        from opentelemetry import context as otel_context

        parent = propagate.extract(json.loads(stored)) if stored else None
        tracer = _tracer()
        start_ns = time.time_ns() - int(max(0.0, time.monotonic() - claimed) * 1e9)
        tracer.start_span(
            "tasklab.claim", context=parent, start_time=start_ns, attributes=attributes
        ).end()
        self._span = tracer.start_span(
            "tasklab.execute",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
        )
        self.context = trace.set_span_in_context(self._span, parent)
        self._token = otel_context.attach(self.context)

    @contextmanager
    def commit(self) -> Iterator[None]:
        """Around the attempt's terminal or retry write, a child of this span."""
        if self._span is None:
            yield
            return
        with _tracer().start_as_current_span("tasklab.commit", context=self.context):
            yield

    def end(self, state: str | None, error: str | None = None) -> None:
        if self._span is None:
            return
        from opentelemetry import context as otel_context

        self._span.set_attribute("tasklab.state", state or "lost")
        if error is not None or state in (None, "failed"):
            self._span.set_status(Status(StatusCode.ERROR, error or state or "lost"))
        self._span.end()
        try:
            otel_context.detach(self._token)
        except ValueError:  # detached in another context (an async task's end)
            pass
