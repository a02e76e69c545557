"""Shutdown with tasks that never reach a checkpoint, in real worker processes.

The rule: drain (`--drain-timeout`), request cancellation, a short grace, then the
process exits 0 within drain + finalization + 2 s on every runner. A task that
returns before the exit gets its terminal write; what still runs is left to its lease
(threads) or terminated and recorded `failed/terminated` (process runner). Nothing
writes through a store after it is closed (that crashed SQLite with SIGSEGV).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.acceptance.test_sigkill import APP, ROOT, TASKLAB, cli, env, snapshot
from tests.conftest import make_app, wait_for

DRAIN = 2.0
FINALIZATION = 5.0  # Settings.finalization


def submit(url: str, task: str, payload: dict) -> str:
    args = ["submit", task, "--payload", json.dumps(payload), "--db", url, *APP]
    return cli(*args).stdout.strip()


def start_worker(url: str, runner: str, drain: float, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            *TASKLAB,
            "worker",
            "--db",
            url,
            "--runner",
            runner,
            "--drain-timeout",
            str(drain),
            *extra,
            *APP,
        ],
        cwd=ROOT,
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "ready" in proc.stderr.readline()  # type: ignore[union-attr]
    return proc


def state(url: str, tid: str) -> str:
    return snapshot(url, tid)["state"]


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["thread", "process", "async"])
def test_a_worker_exits_in_time_and_a_task_that_returns_meanwhile_is_written(
    store_url, tmp_path, runner
):
    stuck = submit(store_url, "t.busy", {"seconds": 25})
    late = submit(store_url, "t.file_hold", {"dir": str(tmp_path)})  # returns on `release`
    proc = start_worker(store_url, runner, DRAIN, "--concurrency", "2")
    try:
        wait_for(lambda: state(store_url, stuck) == state(store_url, late) == "running", 30)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # past the drain the worker asks both to stop; `late` then returns, in the grace
        wait_for(lambda: state(store_url, late) == "cancel_requested", 30)
        (tmp_path / "release").touch()
        _, errors = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, errors
    # the bound: drain, the grace (2 s) and the finalization deadline, nothing else
    assert took <= DRAIN + FINALIZATION + 2, f"exit took {took:.1f}s"
    # returned during the grace, after its cancel request: its terminal write landed
    assert state(store_url, late) == "cancelled"
    after = snapshot(store_url, stuck)
    if runner == "process":  # a process can be stopped: it was, and that is known
        assert after["state"] == "failed" and after["error"]["code"] == "terminated"
    else:  # a thread cannot: left to its lease, and the log says so
        assert after["state"] == "cancel_requested"
        assert "left to their leases" in errors


@pytest.mark.slow
def test_twenty_sigterms_of_a_process_worker_each_exit_zero(store_url, tmp_path):
    """Tasks that never checkpoint on the process runner: at each SIGTERM the slot
    threads settle `terminated` while the worker closes its store."""
    # SQLite (where the crash was): 4 workers at once on files of their own, 5 rounds
    # each; PostgreSQL: one database, so one worker at a time
    rounds, parallel = (5, 4) if store_url.startswith("sqlite") else (2, 1)

    def one_worker(i: int) -> list[int]:
        url = store_url
        if url.startswith("sqlite"):
            url = f"sqlite:///{tmp_path / f'w{i}.db'}"
        codes = []
        # submitted and watched in this process (a CLI process per poll made this test
        # the slowest of the suite); the outcome is read by a new process below
        app = make_app(url)
        for r in range(rounds):
            dirs = [tmp_path / f"w{i}-{r}-{k}" for k in range(2)]
            for d in dirs:
                d.mkdir()
            # never a checkpoint, and (unlike a spin) no CPU: 8 children on 2 cores
            ids = [app.submit("t.file_hold", {"dir": str(d)}) for d in dirs]
            proc = start_worker(url, "process", 0, "--concurrency", "2")
            try:
                # started in a child, not only claimed: a claim whose child has not
                # taken it yet is given back `queued` by the stop (CI saw one), which is
                # the shutdown rule of test_worker.py, not this test's case
                wait_for(lambda dirs=dirs: all((d / "started").exists() for d in dirs), 30)
                proc.send_signal(signal.SIGTERM)
                _, errors = proc.communicate(timeout=30)
            finally:
                proc.kill()
                proc.wait()
            codes.append(proc.returncode)
            if proc.returncode == 0:  # and the terminal writes were not lost
                for t in ids:
                    snap = snapshot(url, t)
                    assert snap["state"] == "failed", (snap, errors)
                    assert snap["error"]["code"] == "terminated"
        app.close()
        return codes

    with ThreadPoolExecutor(parallel) as pool:
        codes = [c for cs in pool.map(one_worker, range(parallel)) for c in cs]
    assert codes == [0] * (rounds * parallel)


__all__ = ["Path"]
