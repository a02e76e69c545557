"""The bench's CPU meter and the scaling line it supports (bench/machine.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tasklab.bench.machine import BusyMeter, cpu_times
from tasklab.bench.tables import _scaling

# user nice system idle iowait irq softirq steal guest guest_nice
BEFORE = "cpu  1000 0 500 8000 100 0 50 10 300 0\ncpu0 ...\n"
AFTER = "cpu  1600 0 700 8500 100 0 90 10 500 0\ncpu0 ...\n"


def test_cpu_times_sums_the_first_eight_fields_and_counts_iowait_as_idle(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text(BEFORE)
    # guest time is already inside user: counting it again would inflate the total
    assert cpu_times(stat) == (1000 + 500 + 8000 + 100 + 50 + 10, 8000 + 100)


def test_busy_share_is_the_busy_part_of_the_cpu_time_in_between(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text(BEFORE)
    with BusyMeter(stat) as meter:
        stat.write_text(AFTER)
    # 600 user + 200 system + 40 softirq busy, 500 idle: 840 of 1340
    assert meter.share == round(840 / 1340, 3)


def test_without_proc_stat_the_share_is_unknown_not_zero(tmp_path: Path):
    missing = tmp_path / "absent"
    assert cpu_times(missing) is None
    with BusyMeter(missing) as meter:
        pass
    assert meter.share is None
    odd = tmp_path / "odd"
    odd.write_text("intr 1 2 3\n")
    assert cpu_times(odd) is None


def _report(db: str, one: float, two: float, busy: float | None) -> SimpleNamespace:
    return SimpleNamespace(
        db=db,
        drain_per_s={"default worker": one, "two default workers": two},
        busy_share={"default worker": busy, "two default workers": 0.95},
    )


def test_the_scaling_line_states_the_ratio_and_what_one_worker_left_idle():
    report = _report("postgresql://x/bench", 4000, 4600, 0.8)
    assert _scaling(report) == [
        ("two workers ÷ one", "1.15× (one worker left 20% of the CPU idle: 1.25× at its cost)")
    ]
    # a machine one worker leaves mostly idle caps the pair at twice one, not more
    lean = _report("postgresql://x/bench", 2000, 3900, 0.25)
    assert _scaling(lean) == [
        ("two workers ÷ one", "1.95× (one worker left 75% of the CPU idle: 2.00× at its cost)")
    ]
    unknown = _report("postgresql://x/bench", 2000, 3000, None)
    assert _scaling(unknown) == [("two workers ÷ one", "1.50×")]


def test_sqlite_gets_no_scaling_line_its_bound_is_one_writer():
    assert _scaling(_report("sqlite:///b.db", 8000, 7000, 0.6)) == []
