"""Limits hold across real worker processes (SPEC §7), on both stores: a queue's
concurrency, a per-key limit, a rate, pause — read from the tasks' own ledger of what
ran when, and through SIGKILLs (a reaped lease gives its slot back, a limit is never
exceeded)."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

from tests.acceptance.test_sigkill import APP, ROOT, TASKLAB, env
from tests.conftest import make_app, wait_for
from tests.helpers.chaos import kill_as_they_end
from tests.helpers.ledger import most_at_once, most_at_once_per_key, runs


def spawn(url: str, *extra: str, concurrency: int = 4, lease: float = 2.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            *TASKLAB,
            "worker",
            "--db",
            url,
            "--lease",
            str(lease),
            "--concurrency",
            str(concurrency),
            *extra,
            *APP,
        ],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "ready" in proc.stderr.readline()  # type: ignore[union-attr]
    return proc


def stop(procs: list[subprocess.Popen[str]]) -> list[int]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = [p.wait(30) for p in procs]
    for p in procs:
        p.stderr.close()  # type: ignore[union-attr]
    return codes


def drained(app, ids, timeout=60.0):  # type: ignore[no-untyped-def]
    wait_for(lambda: all(app.query(t).terminal for t in ids), timeout)


def test_a_queue_limit_holds_across_three_workers_and_is_reached(store_url, tmp_path: Path):
    app = make_app(store_url)
    app.configure_queue("mail", concurrency=2)
    path = tmp_path / "ledger"
    ids = [
        app.submit("t.run_log", {"path": str(path), "n": i, "ms": 60}, queue="mail")
        for i in range(30)
    ]
    workers = [spawn(store_url) for _ in range(3)]
    try:
        drained(app, ids)
    finally:
        assert stop(workers) == [0, 0, 0]
    found = runs(path)
    assert len(found) == 30
    assert most_at_once([(r.start, r.end) for r in found]) == 2  # never more, and reached
    app.close()


def test_a_per_key_limit_never_overlaps_within_a_key_but_keys_run_side_by_side(
    store_url, tmp_path: Path
):
    app = make_app(store_url)
    path = tmp_path / "ledger"
    ids = [
        app.submit(
            "t.run_log_keyed",
            {"path": str(path), "n": i, "ms": 40, "key": f"k{i % 3}"},
            concurrency_key=f"k{i % 3}",
        )
        for i in range(24)
    ]
    workers = [spawn(store_url) for _ in range(2)]
    try:
        drained(app, ids)
    finally:
        assert stop(workers) == [0, 0]
    found = runs(path)
    assert len(found) == 24
    assert most_at_once_per_key(found) == {"k0": 1, "k1": 1, "k2": 1}
    assert most_at_once([(r.start, r.end) for r in found]) >= 2  # keys side by side
    app.close()


def test_a_sigkilled_worker_gives_its_limited_slot_back_when_its_lease_is_reaped(
    store_url, tmp_path: Path
):
    app = make_app(store_url)
    app.configure_queue("solo", concurrency=1)
    path = tmp_path / "ledger"
    first = app.submit("t.run_log", {"path": str(path), "n": 0, "ms": 3000}, queue="solo")
    victim = spawn(store_url, "--queue", "solo")
    wait_for(lambda: app.query(first).state.value == "running")
    second = app.submit("t.run_log", {"path": str(path), "n": 1, "ms": 10}, queue="solo")
    other = spawn(store_url, "--queue", "solo")
    try:
        time.sleep(0.5)
        assert app.query(second).state.value == "queued"  # the slot is held
        victim.send_signal(signal.SIGKILL)
        killed = time.time()
        assert victim.wait(10) == -9
        # the lease (2 s) expires, the reaper requeues the first task and frees the slot
        drained(app, [first, second], timeout=30)
    finally:
        assert stop([other]) == [0]
        victim.stderr.close()  # type: ignore[union-attr]
    found = runs(path, killed_at={victim.pid: killed})
    assert most_at_once([(r.start, r.end) for r in found]) == 1
    solo = next(q for q in app.queues() if q["name"] == "solo")
    assert solo["running"] == 0 and solo["queued"] == 0
    app.close()


def test_chaos_in_limited_queues_with_keys_never_exceeds_a_limit(store_url, tmp_path: Path):
    """4 workers, random SIGKILLs, 1,000 tasks in two limited queues, half of them
    with per-key limits: every task ends terminal, and at no moment did a queue or a
    key run more than its limit (the ledger, with each killed process's end)."""
    app = make_app(store_url)
    app.configure_queue("lim_a", concurrency=3)
    app.configure_queue("lim_b", concurrency=5)
    path = tmp_path / "ledger"
    ids = app.submit_many(
        "t.run_log", [{"path": str(path), "n": i, "ms": 30} for i in range(250)], queue="lim_a"
    )
    ids += app.submit_many(
        "t.run_log", [{"path": str(path), "n": i, "ms": 30} for i in range(250, 500)], queue="lim_b"
    )
    for i in range(500, 1000):
        key = f"c{i % 7}"
        queue = "lim_a" if i % 2 else "lim_b"
        payload = {"path": str(path), "n": i, "ms": 30, "key": f"{queue}/{key}"}
        ids.append(app.submit("t.run_log_keyed", payload, queue=queue, concurrency_key=key))
    rnd = random.Random(7)
    # two-second leases: a live worker whose renewal a loaded machine delays past a
    # one-second lease loses its task while still running it (at-least-once), and the
    # ledger then sees one run too many at once — the suspected cause of this test's
    # one failure in a full-suite run on two slow cores
    workers = [spawn(store_url, lease=2.0) for _ in range(4)]
    try:  # a kill each time another ~10 % of the tasks has ended: six in every run
        at = [50, 150, 250, 350, 450, 550]
        killed = kill_as_they_end(
            app, len(ids), workers, lambda: spawn(store_url, lease=2.0), at, rnd
        )
    finally:
        codes = stop(workers)
    assert codes == [0, 0, 0, 0]
    assert len(killed) == 6
    assert all(app.query(t).terminal for t in ids)
    found = runs(path, killed_at=killed)
    by_queue = {"lim_a": [], "lim_b": []}  # type: ignore[var-annotated]
    for r in found:
        queue = "lim_a" if (r.n % 2 if r.n >= 500 else r.n < 250) else "lim_b"
        by_queue[queue].append((r.start, r.end))  # a killed run until its kill
    assert most_at_once(by_queue["lim_a"]) <= 3
    assert most_at_once(by_queue["lim_b"]) <= 5
    keyed = [r for r in found if r.key != "-"]
    assert max(most_at_once_per_key(keyed).values()) == 1
    # the killed runs count too: none of them overlapped its key's other runs
    assert all(n <= 1 for n in most_at_once_per_key(keyed).values())
    assert all(q["running"] == 0 for q in app.queues())
    app.close()


def test_a_rate_limit_across_two_workers_and_pause_resume(store_url, tmp_path: Path):
    app = make_app(store_url)
    app.configure_queue("rated", rate="5/s")
    path = tmp_path / "ledger"
    ids = [
        app.submit("t.run_log", {"path": str(path), "n": i, "ms": 1}, queue="rated")
        for i in range(20)
    ]
    workers = [spawn(store_url) for _ in range(2)]
    try:
        drained(app, ids, timeout=30)
        starts = sorted(r.start for r in runs(path))
        # a token bucket of 5, refilled at 5/s: a burst of 5, then one per 0.2 s
        span = starts[-1] - starts[0]
        assert 2.6 <= span <= 6.0, span
        for i, t in enumerate(starts):
            within = sum(1 for u in starts[i:] if u - t < 1.0)
            assert within <= 5 + 5 + 1, (i, within)  # burst + a second's refill (+ jitter)
        # pause: no claims from that queue within a second, running tasks go on
        app.configure_queue("rated", rate=None)
        app.pause("rated")
        paused_at = time.time()
        later = [
            app.submit("t.run_log", {"path": str(path), "n": 100 + i, "ms": 1}, queue="rated")
            for i in range(5)
        ]
        time.sleep(1.5)
        assert all(app.query(t).state.value == "queued" for t in later)
        app.resume("rated")
        drained(app, later, timeout=10)
    finally:
        assert stop(workers) == [0, 0]
    assert all(r.start > paused_at + 1.0 for r in runs(path) if r.n >= 100)
    app.close()
