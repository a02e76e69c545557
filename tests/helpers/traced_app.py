"""An app whose process records OpenTelemetry spans with the SDK's in-memory exporter
and writes them, at exit, as JSON lines to $TASKLAB_TEST_SPANS (a worker stopped by
SIGTERM exits normally, so its spans are written). Imported by `tasklab worker --app`
and by the submitting script of tests/integration/test_tracing.py."""

from __future__ import annotations

import atexit
import json
import os
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tasklab import TaskApp

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

app = TaskApp()


@app.task(name="t.traced")
def traced(ctx: Any, value: int) -> int:
    with trace.get_tracer("user-code").start_as_current_span("inside"):
        return value * 2


@app.task(name="t.traced_fail")
def traced_fail(ctx: Any) -> None:
    raise RuntimeError("no luck")


def spans() -> list[dict[str, Any]]:
    out = []
    for s in exporter.get_finished_spans():
        out.append(
            {
                "name": s.name,
                "trace_id": format(s.context.trace_id, "032x"),
                "span_id": format(s.context.span_id, "016x"),
                "parent": format(s.parent.span_id, "016x") if s.parent else None,
                "status": s.status.status_code.name,
                "attributes": dict(s.attributes or {}),
                "start": s.start_time,
                "end": s.end_time,
            }
        )
    return out


@atexit.register
def _dump() -> None:
    path = os.environ.get("TASKLAB_TEST_SPANS")
    if path:
        with open(path, "w") as fh:
            for s in spans():
                fh.write(json.dumps(s) + "\n")
