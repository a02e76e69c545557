"""Tasks used by the tests, importable by child processes as
`tests.helpers.sample_tasks:app`. The app's store is never opened: tests copy its
registry onto an app of their own."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasklab import TaskApp

app = TaskApp("sqlite:///never-opened.db")

_latches: dict[str, threading.Event] = {}
_started: dict[str, threading.Event] = {}
_lock = threading.Lock()


def latch(name: str) -> threading.Event:
    with _lock:
        return _latches.setdefault(name, threading.Event())


def started(name: str) -> threading.Event:
    with _lock:
        return _started.setdefault(name, threading.Event())


@app.task(name="t.hold")
def hold(ctx: Any, name: str, result: str = "done") -> str:
    """Seed 001's workload: wait on a latch (no checkpoint while waiting), then return.
    A cancel requested meanwhile is seen at the commit: the task ends cancelled."""
    started(name).set()
    latch(name).wait(30)
    return result


@app.task(name="t.hold_checkpoint")
def hold_checkpoint(ctx: Any, name: str) -> str:
    started(name).set()
    while not latch(name).wait(0.005):
        ctx.checkpoint()
    return "released"


@app.task(name="t.echo")
def echo(ctx: Any, value: Any = None) -> Any:
    return value


@app.task(name="t.affinity")
def affinity(ctx: Any) -> list[int]:
    """The CPUs the executing thread may run on."""
    return sorted(os.sched_getaffinity(0))


@app.task(name="t.noop")
def noop(ctx: Any) -> None:
    return None


@app.task(name="t.surrogate")
def surrogate(ctx: Any, where: str) -> str:
    """Lone surrogates (valid in a Python str, not in UTF-8) where the test asks."""
    bad = "bad \ud800 text"
    if where == "stream":
        ctx.stream(bad)
    if where == "raise":
        raise RuntimeError(bad)
    return bad


@app.task(name="t.boom")
def boom(ctx: Any, message: str = "boom") -> None:
    raise RuntimeError(message)


class Unreadable(Exception):
    def __str__(self) -> str:
        raise ZeroDivisionError("an exception whose message itself fails")


class NotAnError(BaseException):
    """A BaseException of the task's own (not Exception, not tasklab's)."""


def awkward(how: str) -> BaseException:
    """An exception awkward to describe or to end a task with: its `__str__` raises,
    its message is a megabyte, an exit, a Ctrl-C, a BaseException of its own."""
    made: dict[str, Callable[[], BaseException]] = {
        "unreadable": Unreadable,
        "huge": lambda: RuntimeError("m" * 1_000_000),
        "exit": lambda: SystemExit(3),
        "interrupt": KeyboardInterrupt,
        "other": lambda: NotAnError("other"),
    }
    return made[how]()


@app.task(name="t.awkward")
def raise_awkward(ctx: Any, how: str) -> None:
    raise awkward(how)


@app.task(name="t.async_awkward")
async def async_raise_awkward(ctx: Any, how: str) -> None:
    raise awkward(how)


swallowed: dict[str, int] = {}


@app.task(name="t.swallow")
def swallow(ctx: Any, name: str) -> str:
    """Catches Exception around checkpoint(): Cancelled is a BaseException, so it
    still stops the task. Had it been caught, `swallowed[name]` counts it: the task
    went on."""
    started(name).set()
    for _ in range(3000):
        try:
            ctx.checkpoint()
        except Exception:
            swallowed[name] = swallowed.get(name, 0) + 1
            continue
        time.sleep(0.005)
    return "never cancelled"


@app.task(name="t.not_json")
def not_json(ctx: Any) -> object:
    return {1, 2, 3}


class Flaky(Exception):
    pass


@app.task(name="t.flaky", max_attempts=3, retry_on=(Flaky,))
def flaky(ctx: Any, fail_times: int) -> int:
    if ctx.attempt <= fail_times:
        raise Flaky(f"attempt {ctx.attempt}")
    return ctx.attempt


@app.task(name="t.slow_deadline", timeout=0.3)
def slow_deadline(ctx: Any) -> str:
    for _ in range(1000):
        ctx.sleep(0.01)
    return "too late"


@app.task(name="t.stream")
def stream(ctx: Any, parts: list[str], pause: float = 0.0) -> str:
    for p in parts:
        ctx.checkpoint()
        ctx.stream(p)
        if pause:
            time.sleep(pause)
    return "".join(parts)


@app.task(name="t.effect", max_attempts=3, retry_safe=True, retry_on=(Flaky,))
def effect(ctx: Any, fail_after_effect: int = 0) -> Any:
    with ctx.effect("charge") as eff:
        _charge(eff, ctx.attempt)
    return _after_charge(eff, ctx.attempt, fail_after_effect)


def _charge(eff: Any, attempt: int) -> None:
    """Charge once: a retry finds the first attempt's charge in the journal."""
    if not eff.done:
        eff.set_result({"charged_on_attempt": attempt})


def _after_charge(eff: Any, attempt: int, fail_after_effect: int) -> Any:
    if attempt <= fail_after_effect:
        raise Flaky("after the effect")
    return {"charge": eff.result, "previous": eff.previous, "attempt": attempt}


@app.task(name="t.async_effect", max_attempts=3, retry_safe=True, retry_on=(Flaky,))
async def async_effect(ctx: Any, fail_after_effect: int = 0) -> Any:
    """Every method of the async context: the same on every runner."""
    await ctx.checkpoint()
    await ctx.emit({"attempt": ctx.attempt})
    await ctx.stream("a")
    await ctx.heartbeat()
    async with ctx.effect("charge") as eff:
        _charge(eff, ctx.attempt)
    return _after_charge(eff, ctx.attempt, fail_after_effect)


@app.task(name="t.tx", transactional=True)
def tx(ctx: Any, value: int) -> int:
    ctx.emit({"in_tx": value})
    return value * 2


@app.task(name="t.tx_settings", transactional=True)
def tx_settings(ctx: Any) -> dict[str, str]:
    """The planner settings a transactional body's own queries run with."""
    return {
        name: ctx.connection.execute(f"SHOW {name}").fetchone()[name]
        for name in ("enable_seqscan", "jit")
    }


@app.task(name="t.tx_sleep", transactional=True)
def tx_sleep(ctx: Any, seconds: float) -> float:
    """Idles in its run's transaction (no statement) for `seconds`."""
    time.sleep(seconds)
    return seconds


@app.task(name="t.tx_ready", transactional=True)
def tx_ready(ctx: Any, marker: str) -> str:
    """Announces `ready` from inside the run's transaction, then waits to be killed;
    its `finally` would leave a marker file if it ever ran."""
    try:
        if os.environ.get("TASKLAB_TEST_HOLD") == "1":
            print("ready", flush=True)
            time.sleep(60)
        return "finished"
    finally:
        Path(marker).write_text("finally ran")


@app.task(name="t.leased_ready")
def leased_ready(ctx: Any, marker: str) -> str:
    try:
        print("ready", flush=True)
        time.sleep(60)
        return "finished"
    finally:
        Path(marker).write_text("finally ran")


@app.task(name="t.retry_safe_ready", retry_safe=True, max_attempts=2)
def retry_safe_ready(ctx: Any) -> int:
    if ctx.attempt == 1:
        print("ready", flush=True)
        time.sleep(60)
    return ctx.attempt


@app.task(name="t.busy")
def busy(ctx: Any, seconds: float) -> str:
    """Never reaches a checkpoint: a thread cannot be stopped."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)
    return "finished"


def main_run(url: str, task_id: str) -> None:
    """Child-process entry: run one task with this module's tasks registered."""
    child = TaskApp(url)
    for t in app.registry.all():
        child.registry.add(t)
    child.run(task_id)
    print("returned", flush=True)


if __name__ == "__main__":
    main_run(sys.argv[1], sys.argv[2])
    os._exit(0)


# ---- tasks that work on every runner (thread, process, async): file latches ----------


def _wait_file(path: Path, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.005)


@app.task(name="t.file_hold")
def file_hold(ctx: Any, dir: str, result: str = "done") -> str:
    """Touch `started`, wait for `release` (no checkpoint meanwhile), return."""
    d = Path(dir)
    (d / "started").touch()
    _wait_file(d / "release")
    return result


@app.task(name="t.file_hold_checkpoint")
def file_hold_checkpoint(ctx: Any, dir: str) -> str:
    d = Path(dir)
    (d / "started").touch()
    while not (d / "release").exists():
        ctx.checkpoint()
        time.sleep(0.005)
    return "released"


@app.task(name="t.spin")
def spin(ctx: Any, dir: str) -> str:
    """CPU work that never reaches a checkpoint."""
    (Path(dir) / "started").touch()
    end = time.monotonic() + 60
    n = 0
    while time.monotonic() < end:
        n += 1
    return str(n)


@app.task(name="t.pid")
def pid(ctx: Any, dir: str) -> int:
    (Path(dir) / "pid").write_text(str(os.getpid()))
    _wait_file(Path(dir) / "release")
    return os.getpid()


@app.task(name="t.async_sleep")
async def async_sleep(ctx: Any, dir: str) -> str:
    import asyncio

    (Path(dir) / "started").touch()
    await asyncio.sleep(60)
    return "slept"


@app.task(name="t.async_upstream")
async def async_upstream(ctx: Any, dir: str) -> str:
    """Seed 003 §2: a relay over an upstream generator, closed with aclosing."""
    import asyncio
    from contextlib import aclosing

    log = Path(dir) / "log"

    async def upstream():  # type: ignore[no-untyped-def]
        try:
            yield "first chunk"
            await asyncio.Event().wait()
            yield "never"
        finally:
            with log.open("a") as fh:
                fh.write("upstream closed\n")

    async with aclosing(upstream()) as chunks:
        async for chunk in chunks:
            await ctx.stream(chunk)
            (Path(dir) / "started").touch()
    return "done"


@app.task(name="t.async_swallow")
async def async_swallow(ctx: Any, dir: str) -> str:
    """`except Exception` does not catch CancelledError."""
    import asyncio

    (Path(dir) / "started").touch()
    try:
        await asyncio.sleep(60)
    except Exception:
        (Path(dir) / "swallowed").touch()  # it went on: the test fails on this file
        return "swallowed"
    return "slept"


@app.task(name="t.async_echo")
async def async_echo(ctx: Any, value: Any = None) -> Any:
    await ctx.emit({"echo": value})
    return value


@app.task(name="t.mark", retry_safe=True, max_attempts=50)
def mark(ctx: Any, n: int, ms: float = 2.0) -> int:
    """A short retry-safe task: an event, a few ms of work, its attempt as the result."""
    ctx.emit({"n": n, "attempt": ctx.attempt})
    time.sleep(ms / 1000)
    return int(ctx.attempt)


@app.task(name="t.mark_unsafe", max_attempts=50)
def mark_unsafe(ctx: Any, n: int, ms: float = 2.0) -> int:
    ctx.emit({"n": n, "attempt": ctx.attempt})
    time.sleep(ms / 1000)
    return int(ctx.attempt)


@app.task(name="t.slow_steps")
def slow_steps(ctx: Any, steps: int = 100) -> int:
    """Checkpoints every 0.3 s: a cancel request stays visible for a moment."""
    for i in range(steps):
        ctx.checkpoint()
        ctx.emit({"done": i, "total": steps})
        time.sleep(0.3)
    return steps


@app.task(name="t.ticker", retry_safe=True, max_attempts=3)
def ticker(ctx: Any, dir: str, seconds: float = 4.0) -> int:
    """A task body that logs `<pid> <time>` every 50 ms (a side effect per tick) and
    checkpoints between ticks; its pid goes to `pids/<pid>`."""
    d = Path(dir)
    (d / "pids").mkdir(exist_ok=True)
    (d / "pids" / str(os.getpid())).touch()
    end = time.monotonic() + seconds
    ticks = 0
    while time.monotonic() < end:
        with (d / "ticks").open("a") as fh:
            fh.write(f"{os.getpid()} {time.time():.6f}\n")
        ticks += 1
        ctx.checkpoint()
        time.sleep(0.05)
    return ticks


def _tick(dir: str, attempt: int) -> None:
    with (Path(dir) / "ledger").open("a") as fh:
        fh.write(f"{attempt} {os.getpid()} {time.time():.6f}\n")


@app.task(name="t.ledger", retry_safe=True, max_attempts=3)
def ledger(ctx: Any, dir: str, seconds: float, first: float = 0.0) -> dict[str, int]:
    """Ticks a ledger every 0.2 s for `seconds` (`first` on the first attempt, if
    given), a side effect each, checkpointing before every tick: each tick is a
    checkpoint passed."""
    end = time.monotonic() + (first if first and ctx.attempt == 1 else seconds)
    ticks = 0
    while time.monotonic() < end:
        ctx.checkpoint()
        _tick(dir, ctx.attempt)
        ticks += 1
        time.sleep(0.2)
    return {"attempt": ctx.attempt, "ticks": ticks}


@app.task(name="t.ledger_async", retry_safe=True, max_attempts=3)
async def ledger_async(ctx: Any, dir: str, seconds: float, first: float = 0.0) -> dict[str, int]:
    import asyncio

    end = time.monotonic() + (first if first and ctx.attempt == 1 else seconds)
    ticks = 0
    while time.monotonic() < end:
        await ctx.checkpoint()
        _tick(dir, ctx.attempt)
        ticks += 1
        await asyncio.sleep(0.2)
    return {"attempt": ctx.attempt, "ticks": ticks}


emitter_end: dict[str, str] = {}


@app.task(name="t.emitter", retry_safe=True, max_attempts=3)
def emitter(ctx: Any, name: str) -> int:
    """Emits a progress event every 10 ms, checkpointing before each; records how it
    ended (the exception's name, or "returned")."""
    i = 0
    try:
        while i < 3000:
            ctx.checkpoint()
            ctx.emit({"i": i})
            i += 1
            time.sleep(0.01)
    except BaseException as exc:
        emitter_end[name] = type(exc).__name__
        raise
    emitter_end[name] = "returned"
    return i


@app.task(name="t.bad_emit")
def bad_emit(ctx: Any, kind: str) -> str:
    """Emits one good progress event, then one that is not JSON text."""
    ctx.emit({"good": True})
    bad: object = {"nan": float("nan"), "set": {1, 2}, "surrogate": "\ud800"}[kind]
    ctx.emit(bad)  # type: ignore[arg-type]
    return "emitted"


def _append(path: str, line: str) -> None:
    """One line to a ledger file, atomically (O_APPEND), surviving this process's
    SIGKILL the moment it is written (the kernel has it)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _ledgered(ctx: Any, path: str, n: int, ms: float, key: str | None) -> int:
    _append(path, f"start {n} {os.getpid()} {time.time():.6f} {key or '-'} {ctx.task_id}\n")
    time.sleep(ms / 1000)
    _append(path, f"end {n} {os.getpid()} {time.time():.6f} {key or '-'} {ctx.task_id}\n")
    return n


@app.task(name="t.run_log", retry_safe=True, max_attempts=50)
def run_log(ctx: Any, path: str, n: int, ms: float = 50.0, key: str | None = None) -> int:
    """Writes when it starts and ends to a ledger file: what ran when, across
    processes, read back by the tests of limits (tests/helpers/ledger.py)."""
    return _ledgered(ctx, path, n, ms, key)


@app.task(name="t.run_log_keyed", retry_safe=True, max_attempts=50, concurrency_limit=1)
def run_log_keyed(ctx: Any, path: str, n: int, ms: float = 50.0, key: str | None = None) -> int:
    """`t.run_log` with a per-key limit of one (submit it with a concurrency_key)."""
    return _ledgered(ctx, path, n, ms, key)


def _first() -> str:
    return "first"


@app.task(name="t.flow_child")
def flow_child(ctx: Any, i: int) -> int:
    return i * 10


@app.task(name="t.flow")
def flow(ctx: Any, n: int) -> list[Any]:
    """A step, a durable sleep, a signal, children spawned and joined (SPEC §8)."""
    first = ctx.step("first", _first)
    ctx.sleep_for(0.2)
    sig = ctx.wait_signal("go")
    kids = [ctx.spawn("t.flow_child", {"i": i}, key=str(i)) for i in range(n)]
    return [first, sig, [s["result"] for s in ctx.join(kids)]]


def _boundary(path: str, task_id: str, name: str, pause_at: str) -> None:
    """At the boundary the test chose, the first time only: say so and wait to be
    killed (a marker file remembers that this task paused here)."""
    if name != pause_at:
        return
    marker = Path(path) / f"{task_id}.{name}.paused"
    if marker.exists():
        return
    marker.write_text("")
    _append(str(Path(path) / "at"), f"{task_id} {name}\n")
    time.sleep(60)  # SIGKILLed here


def _stepped(path: str, task_id: str, step: str, pause_at: str) -> str:
    """A step's body: its own ledger line first (each call of a step is a line), then
    the boundary inside it."""
    _append(str(Path(path) / "calls"), f"{task_id} {step}\n")
    _boundary(path, task_id, f"in:{step}", pause_at)
    return step


@app.task(name="t.durable3", retry_safe=True, max_attempts=10)
def durable3(ctx: Any, path: str, pause_at: str, safe: bool = False) -> list[str]:
    """Three steps, a signal and a durable sleep between them, and a boundary to be
    killed at: in each step, between them, during the sleep, right after the signal."""
    done = [ctx.step("s1", _stepped, path, ctx.task_id, "s1", pause_at, retry_safe=safe)]
    _boundary(path, ctx.task_id, "after:s1", pause_at)
    ctx.wait_signal("go")
    _boundary(path, ctx.task_id, "after:signal", pause_at)
    done.append(ctx.step("s2", _stepped, path, ctx.task_id, "s2", pause_at, retry_safe=safe))
    _boundary(path, ctx.task_id, "after:s2", pause_at)
    ctx.sleep_for(3.0 if pause_at == "sleeping" else 0.0)
    done.append(ctx.step("s3", _stepped, path, ctx.task_id, "s3", pause_at, retry_safe=safe))
    return done


@app.task(name="t.progress_then_hold", retry_safe=True, max_attempts=2)
def progress_then_hold(ctx: Any, dir: str) -> str:
    """Three progress events per attempt; the first attempt then touches `started` and
    hangs (to be SIGKILLed), the second returns."""
    for i in range(3):
        ctx.emit({"attempt": ctx.attempt, "i": i})
    if ctx.attempt == 1:
        (Path(dir) / "started").touch()
        for _ in range(6000):  # the monitor flushes the events meanwhile
            ctx.checkpoint()
            time.sleep(0.01)
    return "done"
