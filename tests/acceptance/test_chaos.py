"""Four worker processes, 2,000 short tasks, random SIGKILLs (workers restarted by the
test). Afterwards every task is terminal, with one notification, gapless events, and
no attempt that wrote after a newer attempt began."""

from __future__ import annotations

import random
import signal
import subprocess
from collections import defaultdict

from tasklab import State
from tests.acceptance.test_sigkill import APP, ROOT, TASKLAB, env
from tests.conftest import make_app
from tests.helpers.chaos import kill_as_they_end

N = 2000
WORKERS = 4


def spawn(url: str) -> subprocess.Popen[str]:
    """A worker process, returned once it is ready (its signal handlers are set)."""
    proc = subprocess.Popen(
        [*TASKLAB, "worker", "--db", url, "--lease", "1", "--concurrency", "4", *APP],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "ready" in proc.stderr.readline()  # type: ignore[union-attr]
    return proc


def reap(proc: subprocess.Popen[str]) -> int:
    code = proc.wait(30)
    proc.stderr.close()  # type: ignore[union-attr]
    return code


def test_random_sigkills_of_workers_leave_a_truthful_store(store_url):
    app = make_app(store_url)
    half = N // 2
    ids = app.submit_many("t.mark", [{"n": i, "ms": 70} for i in range(half)])
    ids += app.submit_many("t.mark_unsafe", [{"n": i, "ms": 70} for i in range(half, N)])
    rnd = random.Random(2026)
    workers = [spawn(store_url) for _ in range(WORKERS)]
    # a kill each time another ~10 % of the tasks has ended: eight in every run, however
    # fast the drain (inside pytest-timeout's 120 s: this test fails with its own message)
    try:
        at = [N * k // 10 for k in range(1, 9)]
        killed = kill_as_they_end(app, N, workers, lambda: spawn(store_url), at, rnd)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [reap(w) for w in workers]
    assert codes == [0] * WORKERS
    assert len(killed) == 8
    counts = app.counts()
    assert counts["queued"] == counts["running"] == counts["cancel_requested"] == 0, counts

    store = app.store
    by_state: dict[str, int] = defaultdict(int)
    for tid in ids:
        snap = store.get(tid)
        by_state[snap.state.value] += 1
        assert snap.terminal
        assert store.outbox_for(tid) is not None
        events = store.events(tid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        attempts = [e.attempt for e in events]
        assert attempts == sorted(attempts), "an older attempt wrote after a newer one"
        if snap.state is State.SUCCEEDED:
            assert snap.result == snap.attempt  # the result is the last attempt's
            assert events[-1].attempt == snap.attempt
        else:
            assert snap.error.code == "outcome_unknown"
            assert snap.task == "t.mark_unsafe" or snap.attempt == 50
    assert by_state["succeeded"] >= half  # every retry-safe task got through
    outbox_rows = sum(1 for t in ids if store.outbox_for(t))
    assert outbox_rows == N
    app.close()
