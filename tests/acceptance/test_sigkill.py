"""Seed 000's two SIGKILLs, in real child processes, checked from new processes.

A: killed inside a transactional run → the uncommitted claim rolls back: still
   `queued`, and it runs again to `succeeded`.
B: killed after a leased claim committed `running` → still `running`; exclusive
   recovery (refused while another executor lives) → `failed/outcome_unknown`.
Neither case proves how many times an external side effect happened, and a SIGKILLed
process runs no `finally` block.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKLAB = [sys.executable, "-m", "tasklab.edges.cli"]
APP = ["--app", "tests.helpers.sample_tasks:app"]


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT)
    e.pop("TASKLAB_FAULTS", None)
    e.update(extra)
    return e


def cli(
    *args: str, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `tasklab` command in a child process."""
    return subprocess.run(
        [*TASKLAB, *args],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
        input=stdin,
    )


def snapshot(url: str, tid: str) -> dict:
    return json.loads(cli("status", tid, "--db", url, "--json", *APP).stdout)


def submit(url: str, task: str, payload: dict) -> str:
    return cli("submit", task, "--payload", json.dumps(payload), "--db", url, *APP).stdout.strip()


def start_child(url: str, tid: str, **extra: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.sample_tasks", url, tid],
        cwd=ROOT,
        env=env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = child.stdout.readline()  # type: ignore[union-attr]
    if line.strip() != "ready":
        _, err = child.communicate(timeout=30)
        pytest.fail(f"child did not get ready: {err}")
    return child


def kill9(child: subprocess.Popen[str]) -> None:
    with child:
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -9


class Worker:
    """`tasklab worker` in a child process; leaves only after a graceful SIGTERM."""

    def __init__(self, url: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [*TASKLAB, "worker", "--db", url, *extra, *APP],
            cwd=ROOT,
            env=env(),
            stderr=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> Worker:
        assert "ready" in self.proc.stderr.readline()  # type: ignore[union-attr]
        return self

    def __exit__(self, *exc: object) -> None:
        with self.proc:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(20) == 0


def test_sigkill_inside_a_transactional_run_leaves_it_queued(store_url, tmp_path):
    marker = tmp_path / "finally"
    tid = submit(store_url, "t.tx_ready", {"marker": str(marker)})
    kill9(start_child(store_url, tid, TASKLAB_TEST_HOLD="1"))
    assert not marker.exists()  # no finally block ran in the killed process
    snap = snapshot(store_url, tid)
    assert snap["state"] == "queued" and snap["attempt"] == 0
    # re-runnable: a new process runs it to the end
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.sample_tasks", store_url, tid],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    snap = snapshot(store_url, tid)
    assert snap["state"] == "succeeded" and snap["result"] == "finished"
    assert snap["attempt"] == 1


def test_sigkill_after_a_leased_claim_then_exclusive_recovery(store_url, tmp_path):
    marker = tmp_path / "finally"
    tid = submit(store_url, "t.leased_ready", {"marker": str(marker)})
    kill9(start_child(store_url, tid))
    assert not marker.exists()
    snap = snapshot(store_url, tid)
    assert snap["state"] == "running" and snap["attempt"] == 1

    # recovery refuses while another executor is alive
    with Worker(store_url):
        refused = cli("recover", "--db", store_url, *APP, check=False)
        assert refused.returncode != 0 and "worker_alive" in refused.stderr
        assert snapshot(store_url, tid)["state"] == "running"

    recovered = cli("recover", "--db", store_url, "--json", *APP)
    assert json.loads(recovered.stdout)["resolved"] == [tid]
    snap = snapshot(store_url, tid)
    assert snap["state"] == "failed"
    assert snap["error"]["code"] == "outcome_unknown"
    assert "unknown" in snap["error"]["message"]
    assert snap["result"] is None


def test_retry_safe_task_killed_is_requeued_and_succeeds_on_attempt_2(store_url):
    tid = submit(store_url, "t.retry_safe_ready", {})
    kill9(start_child(store_url, tid))
    # the killed child's lease (30 s) has not expired: exclusive recovery resolves it now
    recovered = json.loads(cli("recover", "--db", store_url, "--json", *APP).stdout)
    assert recovered["resolved"] == [tid]
    snap = snapshot(store_url, tid)
    assert snap["state"] == "queued" and snap["error"]["code"] == "outcome_unknown"
    with Worker(store_url):
        deadline = time.monotonic() + 20
        while snapshot(store_url, tid)["state"] != "succeeded":
            assert time.monotonic() < deadline
            time.sleep(0.2)
    snap = snapshot(store_url, tid)
    assert snap["result"] == 2 and snap["attempt"] == 2 and snap["error"] is None


@pytest.mark.parametrize("lease", ["1"])
def test_reaper_requeues_a_killed_retry_safe_task_after_its_lease(store_url, lease):
    """No exclusive recovery here: a live worker's reaper sees the expired lease."""
    env_lease = {"TASKLAB_LEASE": lease}
    tid = submit(store_url, "t.retry_safe_ready", {})
    kill9(start_child(store_url, tid, **env_lease))
    with Worker(store_url, "--lease", lease):
        deadline = time.monotonic() + 30
        while snapshot(store_url, tid)["state"] != "succeeded":
            assert time.monotonic() < deadline, snapshot(store_url, tid)
            time.sleep(0.2)
    snap = snapshot(store_url, tid)
    assert snap["attempt"] == 2 and snap["result"] == 2
    stats = json.loads(cli("stats", "--db", store_url, "--json", *APP).stdout)
    assert stats["counters"]["expired_leases"] >= 1
