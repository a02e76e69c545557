"""Reading the ledger that `t.run_log` tasks write: executions as intervals of wall-clock
time, and the most that overlapped. An execution whose process was SIGKILLed has no
end line: it ended when its process died (the caller says when)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    n: int
    pid: int
    start: float
    end: float
    key: str
    task_id: str


def runs(path: Path, killed_at: dict[int, float] | None = None) -> list[Run]:
    """Every execution in the ledger; one without an end ends at its pid's kill time
    (or now, for a process that is still alive)."""
    import time

    killed_at = killed_at or {}
    open_: dict[tuple[str, int], tuple[int, float, str]] = {}
    out: list[Run] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        kind, n, pid, at, key, task_id = line.split()
        slot = (task_id, int(pid))
        if kind == "start":
            open_[slot] = (int(n), float(at), key)
        else:
            _, start, key = open_.pop(slot)
            out.append(Run(int(n), int(pid), start, float(at), key, task_id))
    for (task_id, pid), (n_, start, key) in open_.items():
        out.append(Run(n_, pid, start, killed_at.get(pid, time.time()), key, task_id))
    return out


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that overlap at one moment (touching ends do
    not overlap)."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = best = 0
    for _, step in edges:  # at equal times the end (-1) sorts first
        now += step
        best = max(best, now)
    return best


def most_at_once_per_key(found: list[Run]) -> dict[str, int]:
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in found:
        by_key[r.key].append((r.start, r.end))
    return {k: most_at_once(v) for k, v in by_key.items()}
