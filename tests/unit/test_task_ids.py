"""Task ids: time-ordered, strictly increasing within a process (FIFO for one
submitter), never repeated by a forked child."""

from __future__ import annotations

import os
import time

import pytest

from tasklab.store.ids import _TaskIds


def test_ids_increase_within_a_millisecond_and_when_the_clock_steps_back(monkeypatch):
    ids = _TaskIds()
    clock = iter([1_700_000_000.0] * 50 + [1_699_999_999.0] * 50 + [1_700_000_001.0] * 50)
    monkeypatch.setattr(time, "time", lambda: next(clock))
    made = [ids() for _ in range(150)]
    assert made == sorted(made) and len(set(made)) == 150
    assert all(len(i) == 24 and int(i, 16) >= 0 for i in made)
    assert made[0][:12] == f"{1_700_000_000_000:012x}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # threads: the child only writes
def test_a_forked_child_does_not_repeat_its_parents_next_id(monkeypatch):
    ids = _TaskIds()
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)  # one millisecond for all
    ids()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, ids().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert child != ids()
