"""The benchmarks' figures as tables (rich), for the CLI to print beside their
conditions."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tasklab.bench.queue import DEFAULT_WORKER, TWO_WORKERS
from tasklab.redact import redact


def queue_table(reports: list[Any]) -> Table:
    """`tasklab bench queue`: a column per run."""
    first = reports[0]
    runs = len(reports)
    table = Table(
        "figure",
        *(["value"] if runs == 1 else [f"run {i + 1}" for i in range(runs)]),
        title=f"tasklab bench queue — {redact(first.db)}, N={first.n}",
    )
    columns = [_queue_figures(r) for r in reports]
    for row, label in enumerate(label for label, _ in columns[0]):
        table.add_row(label, *(col[row][1] for col in columns))
    return table


def _queue_figures(r: Any) -> list[tuple[str, str]]:
    share = r.enqueue_one_per_s / max(r.single_commit_per_s, 1)
    lat = r.latency_ms
    return [
        ("single commit (store)", f"{r.single_commit_per_s:,}/s"),
        ("enqueue one at a time", f"{r.enqueue_one_per_s:,}/s ({share:.0%} of a commit)"),
        ("enqueue submit_many", f"{r.enqueue_batch_per_s:,}/s"),
        ("enqueue, 32 threads at once", f"{r.threads_submit_per_s:,}/s"),
        *(
            (
                f"drain, {c}" if not c.isdigit() else f"drain, concurrency {c}",
                f"{rate:,}/s{_busy(r.busy_share.get(c))}",
            )
            for c, rate in r.drain_per_s.items()
        ),
        *_scaling(r),
        ("latency p50/p95/p99", f"{lat['p50']} / {lat['p95']} / {lat['p99']} ms"),
        ("prune (terminal tasks)", f"{r.prune_per_s:,}/s"),
    ]


def _busy(share: float | None) -> str:
    return "" if share is None else f" (CPU {share:.0%} busy)"


def _scaling(r: Any) -> list[tuple[str, str]]:
    """Two default workers against one, and what one worker's drain left idle: at its
    CPU per task, the most a second could add (machine.py). Not a hard cap — the pair
    may spend less CPU per task (fuller batches) — but a machine one worker keeps busy
    has little left for a second."""
    one, two = r.drain_per_s.get(DEFAULT_WORKER), r.drain_per_s.get(TWO_WORKERS)
    if not one or two is None or r.db.startswith("sqlite"):
        return []  # SQLite writes one transaction at a time: its bound is not the CPU
    ratio = f"{two / one:.2f}×"
    busy = r.busy_share.get(DEFAULT_WORKER)
    if busy:
        bound = min(2.0, 1 / busy)
        ratio += f" (one worker left {1 - busy:.0%} of the CPU idle: {bound:.2f}× at its cost)"
    return [("two workers ÷ one", ratio)]


def backlog_table(r: Any) -> Table:
    """`tasklab bench queue --backlog N`: the rate of every window beside the
    empty-store rate."""
    table = Table(
        "figure", "value", title=f"tasklab bench queue --backlog {r.n:,} — {redact(r.db)}"
    )
    table.add_row("empty store, default worker", f"{r.empty_store_per_s:,}/s")
    for i, rate in enumerate(r.windows_per_s):
        vs = rate / max(r.empty_store_per_s, 1) - 1
        span = f"tasks {i * r.window:,}–{(i + 1) * r.window:,}"
        table.add_row(span, f"{rate:,}/s ({vs:+.0%})")
    table.add_row("slowest window vs empty store", f"-{r.worst_vs_empty:.0%}")
    table.add_row("enqueue (submit_many)", f"{r.enqueue_per_s:,}/s")
    table.add_row(
        "counts()", f"{r.counts_ms['queued']} ms queued, {r.counts_ms['finished']} ms finished"
    )
    return table


def runners_table(report: Any) -> Table:
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
    return table


def serve_table(report: Any) -> Table:
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
    return table


def dict_table(doc: dict[str, Any]) -> Table:
    """A flat table of a report's figures (nested ones as `a.b`), conditions aside."""
    table = Table("figure", "value", title=f"tasklab bench queue — {redact(str(doc.get('db')))}")

    def rows(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                rows(f"{prefix}{k}." if prefix else f"{k}.", v)
        elif (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, int | float) for v in value)
        ):
            table.add_row(prefix.rstrip("."), f"{value[0]:,} – {value[1]:,}")
        else:
            table.add_row(prefix.rstrip("."), str(value))

    for key, value in doc.items():
        if key not in ("conditions", "db"):
            rows(f"{key}.", value)
    return table
