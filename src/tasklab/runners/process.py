"""`ProcessTaskRunner`: CPU-bound tasks in worker processes of the runner's own.

`concurrent.futures.ProcessPoolExecutor` cannot kill one task without breaking the
pool, so each slot owns one child process (spawned, one task at a time). The parent
keeps the claim: it heartbeats, buffers and writes events, and settles the outcome;
the child only runs the function. Messages cross the pipe as JSON (nothing is
unpickled). A cancel request is sent to the child, which stops at its next checkpoint;
after the grace period the child is terminated, the task ends `failed/terminated`, and
a fresh child takes the slot. A child that dies on its own (SIGKILL from outside) is
settled like a lost lease: retried if retry-safe, else `failed/outcome_unknown`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from tasklab.core.ending import Ending, outcome_of
from tasklab.core.models import Claim, Expired, Outcome
from tasklab.core.policy import expiry_outcome
from tasklab.core.registry import TaskDef
from tasklab.core.states import ErrorCode, State
from tasklab.errors import LeaseLost, TasklabError
from tasklab.execution import Execution
from tasklab.runners.base import BaseRunner

if TYPE_CHECKING:
    from tasklab.engine import EngineLike

SLOT_PREFIX = "tasklab-process-slot"


def send(conn: Connection, msg: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(msg, allow_nan=False).encode())


def recv(conn: Connection) -> dict[str, Any]:
    return json.loads(conn.recv_bytes())  # type: ignore[no-any-return]


class Child:
    """One worker process and the parent's end of its socket pair.

    Started as `python -m tasklab.runners._child FD PARENT_PID` (not multiprocessing's
    spawn, which re-imports the parent's `__main__`), with the parent's `sys.path` so
    that the task modules of `--app` import the same way. The child dies with this
    process (see `_child.die_with_parent`): a SIGKILLed worker leaves no task body
    running beside the retry its lease allows.
    """

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tasklab.runners._child",
                str(theirs.fileno()),
                str(os.getpid()),  # the child exits the moment this process dies
            ],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C is the parent's to handle
        )
        theirs.close()
        self.conn = Connection(ours.detach())

    def send(self, msg: dict[str, Any]) -> None:
        send(self.conn, msg)

    def poll(self, timeout: float) -> dict[str, Any] | None:
        """The next message, None on timeout; EOFError if the child is gone."""
        if self.conn.poll(timeout):
            return recv(self.conn)
        if not self.alive:
            raise EOFError("the child process exited")
        return None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, *, kill: bool = False) -> None:
        if self.alive:
            if kill:
                self.proc.terminate()
            else:
                try:
                    self.send({"op": "exit"})
                except OSError:
                    self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(2)
        self.conn.close()


class ProcessTaskRunner(BaseRunner):
    kind = "process"

    def __init__(self, app: EngineLike, workers: int = 1, backlog: int = 0) -> None:
        super().__init__(app, workers, backlog)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=SLOT_PREFIX)
        self._children: dict[int, Child] = {}
        self._children_lock = threading.Lock()
        self._abandoning = False
        self.terminated = 0

    # ---- the slot's child ----------------------------------------------------------
    def _child(self) -> Child:
        key = threading.get_ident()
        with self._children_lock:
            child = self._children.get(key)
        if child is None or not child.alive:
            if child is not None:
                child.stop(kill=True)
            child = Child()
            with self._children_lock:
                self._children[key] = child
        return child

    def _replace_child(self) -> None:
        key = threading.get_ident()
        with self._children_lock:
            child = self._children.pop(key, None)
        if child is not None:
            child.stop(kill=True)

    def warm_up(self) -> None:
        """Start every slot's child now (a benchmark should not time process spawns)."""
        barrier = threading.Barrier(self.workers)

        def start() -> None:
            self._child()
            barrier.wait()

        for f in [self._pool.submit(start) for _ in range(self.workers)]:
            f.result()

    # ---- work ----------------------------------------------------------------------
    def _start_task(self, task_id: str) -> Future[Any]:
        return self._pool.submit(self._run_task_id, task_id)

    def _start_claim(self, claim: Claim) -> Future[Any]:
        return self._pool.submit(self._run_claim, claim)

    def _run_task_id(self, task_id: str) -> Any:
        return self.engine.run(task_id, self._run_claim)

    def _run_claim(self, claim: Claim) -> State | None:
        spec = self.engine.registry.get(claim.task)
        if spec.transactional:
            return self.engine.execute(claim)
        with self.engine.monitor.watching(Execution(self.engine, claim, spec)) as ex:
            outcome = self._drive(ex, spec)
            return None if outcome is None else ex.settle(outcome)

    def _drive(self, ex: Execution, spec: TaskDef) -> Outcome | None:
        run = {
            "op": "run",
            "fn": spec.qualified,
            "task_id": ex.task_id,
            "attempt": ex.attempt,
            "payload": ex.claim.payload,
            "data_dir": _str(ex.data_dir),
            "deadline": ex.deadline,  # monotonic clocks are one clock on one machine
        }
        child = self._child()
        try:
            child.send(run)
        except OSError:  # an idle child that died: the task has not started, use a new one
            self._replace_child()
            child = self._child()
            child.send(run)
        cancel_sent: float | None = None
        settings = self.engine.settings
        told = ex.deadline
        while True:
            if ex.deadline != told:  # renewed: the child checks the deadline itself,
                told = ex.deadline  # so that it stops even while we are paused
                child.send({"op": "lease", "deadline": told})
            if cancel_sent is None and ex.cancel_requested():
                child.send({"op": "cancel"})
                cancel_sent = time.monotonic()
            # lost authority (a partition, a pause): inside the lease's margin
            grace = settings.lost_grace if ex.lost else settings.process_grace
            if cancel_sent is not None and time.monotonic() - cancel_sent > grace:
                self._replace_child()
                self.terminated += 1
                return Outcome.failed(
                    ErrorCode.TERMINATED,
                    f"still running {grace:g}s after it was asked to stop; its process "
                    "was terminated (its finally blocks did not run)",
                )
            try:
                msg = child.poll(0.02)
            except (EOFError, OSError):
                self._replace_child()
                if self._abandoning:  # we killed it: that much is known
                    self.terminated += 1
                    return Outcome.failed(
                        ErrorCode.TERMINATED,
                        "still running when its worker shut down; its process was "
                        "terminated (its finally blocks did not run)",
                    )
                return self._died(ex)
            if msg is None:
                continue
            ending = self._handle(child, ex, msg)
            if ending is not None:
                return outcome_of(ending, ex.facts())

    def _handle(self, child: Child, ex: Execution, msg: dict[str, Any]) -> Ending | None:
        op = msg["op"]
        if op == "event":
            ex.add_event(msg["type"], msg["data"])
        elif op == "text":
            ex.add_text(msg["text"])
        elif op == "call":
            child.send(self._call(ex, msg))
        elif op == "done":
            return Ending.from_wire(msg)
        return None

    @staticmethod
    def _call(ex: Execution, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            if msg["name"] == "effect_get":
                rec = ex.effect_get(msg["key"])
                return {
                    "op": "reply",
                    "status": rec.status,
                    "result": rec.result,
                    "attempt": rec.attempt,
                }
            if msg["name"] == "effect_start":
                ex.effect_start(msg["key"])
            elif msg["name"] == "effect_done":
                ex.effect_done(msg["key"], msg["result"])
            elif msg["name"] == "heartbeat":
                ex.heartbeat()
            elif msg["name"] == "durable":
                return {"op": "reply", "value": ex.durable(msg["what"], **msg["args"])}
            return {"op": "reply"}
        except LeaseLost as exc:
            return {"op": "reply", "lost": str(exc)}
        except TasklabError as exc:  # a bad spawn, a child id unknown: the task's to see
            return {"op": "reply", "error": str(exc)}

    def _died(self, ex: Execution) -> Outcome:
        """The child vanished mid-task: we know as little as after a lost lease."""
        state = State.CANCEL_REQUESTED if ex.cancel_flag.is_set() else State.RUNNING
        expired = Expired(
            ex.task_id,
            ex.claim.epoch,
            state,
            ex.attempt,
            ex.claim.max_attempts,
            ex.task.retry_safe,
            False,
        )
        return expiry_outcome(expired, self.engine.settings.backoff)

    # ---- lifetime ------------------------------------------------------------------
    def _stop_children(self, kill: bool) -> None:
        with self._children_lock:
            children = list(self._children.values())
            self._children.clear()
        for child in children:
            child.stop(kill=kill)

    def _shutdown_executor(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._stop_children(kill=False)

    def _abandon_executor(self) -> None:
        """Unlike threads, these tasks can be stopped: terminate their processes, and
        give the slot threads the finalization deadline to commit `failed/terminated`
        (a write still unfinished by then is left to the lease)."""
        self._abandoning = True
        running = [f for f, _ in self.in_flight()]
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._stop_children(kill=True)
        wait(running, timeout=self.engine.settings.finalization)

    def __enter__(self) -> ProcessTaskRunner:
        super().__enter__()
        return self


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


__all__ = ["ProcessTaskRunner"]
