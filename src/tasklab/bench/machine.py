"""How busy the machine's CPUs were while a benchmark ran (Linux `/proc/stat`).

A drain's rate says little on its own about whether more workers would help: the
database server and the workers share the machine, and if one worker's drain already
keeps its cores busy, a second can only fill what is left. `busy_share` of one worker
is that bound: at the same CPU per task, N workers reach at most 1 / busy_share times
one (two workers ≥ 1.6× one needs one worker to leave ≥ 38 % of the machine idle).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

_STAT = Path("/proc/stat")


def cpu_times(stat: Path = _STAT) -> tuple[int, int] | None:
    """(all CPU time, idle time) since boot in clock ticks, over every CPU; None where
    there is no `/proc/stat` to read."""
    try:
        first = stat.read_text().split("\n", 1)[0]
    except OSError:
        return None
    name, *fields = first.split()
    if name != "cpu" or len(fields) < 5:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    ticks = [int(f) for f in fields[:8]]
    return sum(ticks), ticks[3] + ticks[4]


class BusyMeter:
    """`with BusyMeter() as m: ...`; then `m.share`: the part of the machine's CPU time
    (every core) spent busy meanwhile, by any process — 0 to 1, None if unknown. The
    kernel counts in ticks (10 ms at the usual USER_HZ of 100), charged to whatever a
    core is doing at each: a run of a few ticks reads coarsely, even 0 for a run that
    mostly waited on fsync (iowait is idle). The bench's drains last seconds."""

    def __init__(self, stat: Path = _STAT) -> None:
        self._stat = stat
        self._start: tuple[int, int] | None = None
        self.share: float | None = None

    def __enter__(self) -> BusyMeter:
        self._start = cpu_times(self._stat)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        end = cpu_times(self._stat)
        if self._start is None or end is None:
            return
        total, idle = end[0] - self._start[0], end[1] - self._start[1]
        if total > 0:
            self.share = round(1 - idle / total, 3)
