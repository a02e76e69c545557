"""Prometheus metrics, read from the store at scrape time so that every process
reports the same recovery-health figures (the counters live in the store)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tasklab.redact import redact

if TYPE_CHECKING:
    from tasklab.app import TaskApp


class StoreCollector(Collector):
    def __init__(self, app: TaskApp, webhooks: list[str] | None = None) -> None:
        self.app = app
        self.webhooks = webhooks or []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        counts = self.app.counts()
        by_state = GaugeMetricFamily("tasklab_tasks", "Tasks by state.", labels=["state"])
        for state, n in counts.items():
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily("tasklab_queue_depth", "Queued tasks.", value=counts["queued"])
        yield from _per_queue(self.app.queues())
        for name, value in self.app.counters().items():
            yield CounterMetricFamily(f"tasklab_{name}", f"Store counter {name}.", value=value)
        lag = GaugeMetricFamily(
            "tasklab_notification_lag_seconds",
            "Age of the oldest undelivered notification.",
            labels=["url"],
        )
        for url in self.webhooks:
            lag.add_metric([redact(url)], self.app.notification_lag(url))
        yield lag


def _per_queue(queues: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Depth, running tasks, claims so far and pause per queue (claims/s is the
    counter's rate)."""
    depth = GaugeMetricFamily("tasklab_queue_queued", "Queued tasks per queue.", labels=["queue"])
    running = GaugeMetricFamily(
        "tasklab_queue_running", "Running tasks per queue.", labels=["queue"]
    )
    claims = CounterMetricFamily("tasklab_queue_claims", "Claims per queue.", labels=["queue"])
    paused = GaugeMetricFamily("tasklab_queue_paused", "1 while paused.", labels=["queue"])
    for q in queues:
        name = [str(q["name"])]
        depth.add_metric(name, q["queued"])
        running.add_metric(name, q["running"])
        claims.add_metric(name, q["claimed"])
        paused.add_metric(name, 1 if q["paused"] else 0)
    yield from (depth, running, claims, paused)


class Metrics:
    """One registry per app: store-backed collectors plus this process's own figures."""

    def __init__(self, app: TaskApp, webhooks: list[str] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreCollector(app, webhooks))
        self.task_duration = Histogram(
            "tasklab_task_duration_seconds",
            "Execution time of attempts run here.",
            ["task", "state"],
            registry=self.registry,
        )
        self.cancelled_handlers = Counter(
            "tasklab_cancelled_server_handlers",
            "Server handlers cancelled at shutdown.",
            ["server"],
            registry=self.registry,
        )
        self.sse_streams = Gauge("tasklab_sse_streams", "Open SSE streams.", registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
