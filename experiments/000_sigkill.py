"""Seed 000: where does a SIGKILL land relative to the transaction boundary?

    python experiments/000_sigkill.py [--db URL]

A: a child runs a transactional task and is SIGKILLed after printing "ready" inside
   the transaction → after restart the task is still queued, and runs to succeeded.
B: a child commits a leased claim (running), prints "ready" and is SIGKILLed → after
   restart the task is running; exclusive recovery marks it failed/outcome_unknown.
Neither proves how many times an external side effect happened.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tasklab import TaskApp

ROOT = Path(__file__).resolve().parents[1]


def fresh_app(url: str) -> TaskApp:
    from tests.helpers.sample_tasks import app as sample

    app = TaskApp(url)
    for t in sample.registry.all():
        app.registry.add(t)
    return app


def run_and_kill(url: str, tid: str, hold: bool) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TASKLAB_TEST_HOLD="1" if hold else "0")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.sample_tasks", url, tid],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    with child:
        line = child.stdout.readline().strip()  # type: ignore[union-attr]
        print(f"  child {child.pid} said {line!r}; sending SIGKILL")
        child.send_signal(signal.SIGKILL)
        return child.wait()


def main() -> None:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default=f"sqlite:///{tempfile.mkdtemp()}/exp000.db")
    args = parser.parse_args()
    marker = Path(tempfile.mkdtemp()) / "finally"

    print("A: SIGKILL inside a transactional run")
    with fresh_app(args.db) as app:
        tid = app.submit("t.tx_ready", {"marker": str(marker)})
    print(f"  exit code {run_and_kill(args.db, tid, hold=True)}; finally ran: {marker.exists()}")
    with fresh_app(args.db) as app:  # a new process would see the same
        print(f"  after restart: {app.query(tid).state}")
        os.environ["TASKLAB_TEST_HOLD"] = "0"
        print(f"  run again: {app.run(tid).state}")

    print("B: SIGKILL after a committed leased claim")
    with fresh_app(args.db) as app:
        tid = app.submit("t.leased_ready", {"marker": str(marker) + "-b"})
    print(f"  exit code {run_and_kill(args.db, tid, hold=True)}")
    with fresh_app(args.db) as app:
        print(f"  after restart: {app.query(tid).state}")
        print(f"  exclusive recovery resolved: {app.recover_running()}")
        snap = app.query(tid)
        print(
            f"  now: {snap.state} / {snap.error.code if snap.error else None}: "
            f"{snap.error.message if snap.error else ''}"
        )


if __name__ == "__main__":
    main()
