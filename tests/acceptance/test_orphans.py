"""A process-runner worker that is SIGKILLed leaves no task body running.

Its children run the task bodies while it holds the claims; once it is gone, a body
that went on would run beside the retry that the store allows (retry-safe tasks) or
under an `outcome_unknown` that says nothing about it. Checked with real processes:
the worker is killed mid-task and the bodies' own tick logs are read afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.acceptance.test_sigkill import APP, ROOT, TASKLAB, cli, env, snapshot
from tests.conftest import wait_for


def alive(pid: int) -> bool:
    """Running, not a zombie nobody reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def ticks(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, at = line.split()
        out.append((int(pid), float(at)))
    return out


def test_sigkilled_process_worker_leaves_no_child_running(store_url, tmp_path):
    ids = [
        cli(
            "submit",
            "t.ticker",
            "--payload",
            json.dumps({"dir": str(tmp_path), "seconds": 4}),
            "--db",
            store_url,
            *APP,
        ).stdout.strip()
        for _ in range(2)
    ]
    worker = subprocess.Popen(
        [
            *TASKLAB,
            "worker",
            "--db",
            store_url,
            "--runner",
            "process",
            "--concurrency",
            "2",
            "--lease",
            "30",
            *APP,
        ],
        cwd=ROOT,
        env=env(),
        stderr=subprocess.DEVNULL,
    )
    try:
        # both bodies are running and ticking
        wait_for(lambda: len({p for p, _ in ticks(tmp_path / "ticks")}) == 2, timeout=30)
        pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
    finally:
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(10) == -9
    killed_at = time.time()
    # within 1 s no child of the worker is alive
    deadline = time.monotonic() + 1.0
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [p for p in pids if alive(p)], "a child outlived its worker by over 1 s"
    # and no body logged a tick after the kill (watched for another second)
    time.sleep(1.0)
    late = [(p, at) for p, at in ticks(tmp_path / "ticks") if at > killed_at]
    assert late == [], f"task bodies went on after their worker was killed: {late}"
    for tid in ids:  # the store says what it knows: still running, for the lease to end
        assert snapshot(store_url, tid)["state"] == "running"
    for p in pids:
        if alive(p):
            os.kill(p, signal.SIGKILL)
