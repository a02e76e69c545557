"""`tasklab bench runners`: the same wordfreq work on thread, process and asyncio
runners with 1 and 2 workers (seed 001 leaves this measurement to later: here it is).

Method: a generated corpus (default 24 MB, deterministic) split into files in a data
directory; each run submits one wordfreq task per file and runs them all through the
runner used directly; wall time from first submit to last result; CPU time of this
process plus the runner's child processes (read from /proc); the median of `repeat`
runs. Per-task overhead: a one-word wordfreq task, many times, on one worker.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasklab.app import TaskApp
from tasklab.config import Settings

KINDS = ("thread", "process", "async")


@dataclass
class RunnerFigure:
    kind: str
    workers: int
    wall_s: float
    cpu_s: float
    speedup: float = 1.0
    overhead_ms: float = 0.0


@dataclass
class RunnersReport:
    corpus_mb: float
    files: int
    repeat: int
    conditions: dict[str, Any] = field(default_factory=dict)
    figures: list[RunnerFigure] = field(default_factory=list)


def make_corpus(directory: Path, megabytes: float, files: int, seed: int = 36) -> list[str]:
    rnd = random.Random(seed)
    vocab = [f"{rnd.choice('bcdfghklmnprst')}{rnd.choice('aeiou')}{i}" for i in range(5000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf-like, like real text
    per_file = int(megabytes * 1024 * 1024 / files)
    names = []
    for i in range(files):
        words: list[str] = []
        size = 0
        while size < per_file:
            batch = rnd.choices(vocab, weights, k=5000)
            words += batch
            size += sum(len(w) + 1 for w in batch)
        name = f"corpus-{i}.txt"
        (directory / name).write_text(" ".join(words))
        names.append(name)
    return names


def _cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def _runner_pids(runner: Any) -> list[int]:
    children = getattr(runner, "_children", {})
    return [os.getpid()] + [c.proc.pid for c in children.values()]


def _one_run(
    app: TaskApp, kind: str, workers: int, payloads: list[dict[str, Any]]
) -> tuple[float, float]:
    from tasklab.runners import make_runner

    ids = app.submit_many("wordfreq", payloads)
    runner = make_runner(kind, app, workers=workers, backlog=len(ids))
    with runner:
        if hasattr(runner, "warm_up"):
            runner.warm_up()
        pids = _runner_pids(runner)
        cpu0, t0 = _cpu_seconds(pids), time.perf_counter()
        futures = [runner.submit(t) for t in ids]
        results = [f.result(timeout=600) for f in futures]
        wall = time.perf_counter() - t0
        cpu = _cpu_seconds(pids) - cpu0
    bad = [r for r in results if r.state.value != "succeeded"]
    if bad:
        raise RuntimeError(f"{kind} runner: {bad[0].state} {bad[0].error}")
    return wall, cpu


def _overhead_ms(app: TaskApp, kind: str, n: int) -> float:
    from tasklab.runners import make_runner

    ids = app.submit_many("wordfreq", [{"text": "x"}] * n)
    with make_runner(kind, app, workers=1, backlog=n) as runner:
        if hasattr(runner, "warm_up"):
            runner.warm_up()
        t0 = time.perf_counter()
        for f in [runner.submit(t) for t in ids]:
            f.result(timeout=120)
        return (time.perf_counter() - t0) / n * 1000


def run(
    megabytes: float = 24.0,
    files: int = 8,
    repeat: int = 3,
    kinds: tuple[str, ...] = KINDS,
    overhead_tasks: int = 200,
    durability: str = "normal",
) -> RunnersReport:
    workdir = Path(tempfile.mkdtemp(prefix="tasklab-bench-"))
    data = workdir / "data"
    data.mkdir()
    names = make_corpus(data, megabytes, files)
    app = TaskApp(
        f"sqlite:///{workdir / 'bench.db'}", data_dir=data, settings=Settings(durability=durability)
    )
    payloads = [{"path": n, "top": 10} for n in names]
    report = RunnersReport(
        corpus_mb=round(sum((data / n).stat().st_size for n in names) / 1024 / 1024, 1),
        files=files,
        repeat=repeat,
        conditions={
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "store": f"SQLite, synchronous={durability}",
            "method": "runner used directly; median wall of the repeats; CPU = this "
            "process + runner children",
        },
    )
    for kind in kinds:
        base = None
        for workers in (1, 2):
            walls, cpus = [], []
            for _ in range(repeat):
                wall, cpu = _one_run(app, kind, workers, payloads)
                walls.append(wall)
                cpus.append(cpu)
            fig = RunnerFigure(
                kind, workers, round(statistics.median(walls), 3), round(statistics.median(cpus), 2)
            )
            base = base or fig.wall_s
            fig.speedup = round(base / fig.wall_s, 2)
            if workers == 1:
                fig.overhead_ms = round(_overhead_ms(app, kind, overhead_tasks), 2)
            report.figures.append(fig)
    app.close()
    return report


def chart(report: RunnersReport, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    kinds = [k for k in KINDS if any(f.kind == k for f in report.figures)]
    width = 0.38
    for i, workers in enumerate((1, 2)):
        walls = [
            next(f.wall_s for f in report.figures if f.kind == k and f.workers == workers)
            for k in kinds
        ]
        bars = ax.bar(
            [x + (i - 0.5) * width for x in range(len(kinds))],
            walls,
            width,
            label=f"{workers} worker{'s' if workers > 1 else ''}",
        )
        for bar, k in zip(bars, kinds, strict=True):
            sp = next(f.speedup for f in report.figures if f.kind == k and f.workers == workers)
            ax.annotate(
                f"{sp:.2f}×",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("wall seconds (median)")
    ax.set_title(f"wordfreq over {report.corpus_mb} MB in {report.files} tasks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
