"""Seed 001: when does a thread pool finish its work? Prints the observed timeline.

    python experiments/001_thread_pool.py [--db sqlite:///x.db]

One worker, backlog 1: the first task waits on a latch, the second waits in the queue,
the third is refused (QueueFull). Cancelling the queued one answers {true,true}; the
running one {false,true} and it stays running until the latch is released. Shutdown
from another thread cancels what never started and waits for what runs; afterwards no
runner thread is alive.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from typing import Any

from tasklab import QueueFull, TaskApp, ThreadTaskRunner
from tasklab.runners.thread import THREAD_PREFIX

T0 = time.monotonic()


def say(what: str) -> None:
    print(f"{time.monotonic() - T0:7.3f}s  {what}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default=f"sqlite:///{tempfile.mkdtemp()}/exp001.db")
    args = parser.parse_args()
    app = TaskApp(args.db)
    latch, started = threading.Event(), threading.Event()

    @app.task(name="exp.hold")
    def hold(ctx: Any) -> str:
        started.set()
        latch.wait()
        return "done"

    text = "the quick brown fox jumps over the lazy dog the end"
    first, second = app.submit("exp.hold", {}), app.submit("wordfreq", {"text": text})
    third = app.submit("wordfreq", {"text": text})
    with ThreadTaskRunner(app, workers=1, backlog=1) as runner:
        f1 = runner.submit(first)
        started.wait()
        say(f"first running: {app.query(first).state}")
        f2 = runner.submit(second)
        say(f"second queued in the runner: {app.query(second).state}")
        try:
            runner.submit(third)
        except QueueFull as exc:
            say(f"third refused: {type(exc).__name__}({exc}); state {app.query(third).state}")
        c2 = runner.cancel(f2)
        say(
            f"cancel queued  -> future_cancelled={c2.future_cancelled} "
            f"request_accepted={c2.request_accepted}; state {app.query(second).state}"
        )
        c1 = runner.cancel(f1)
        say(
            f"cancel running -> future_cancelled={c1.future_cancelled} "
            f"request_accepted={c1.request_accepted}; state {app.query(first).state}"
        )
        time.sleep(0.2)
        say(f"latch still closed: first done={f1.done()} state {app.query(first).state}")
        latch.set()
        f1.result()
        snap = app.query(first)
        say(f"latch released: first {snap.state}, result {snap.result}")
        snap3 = runner.submit(third).result()
        say(f"third resubmitted: {snap3.state}, top {snap3.result['top'][:2]}")
    alive = [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]
    say(f"after shutdown, runner threads alive: {alive}")
    say("states: " + ", ".join(app.query(t).state for t in (first, second, third)))
    app.close()


if __name__ == "__main__":
    main()
