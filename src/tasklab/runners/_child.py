"""The child side of the process runner: run one task function at a time.

The main thread runs the function; a reader thread takes the parent's messages (a
cancel sets a flag the checkpoints see; replies answer the context's calls).
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import json
import os
import queue
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from tasklab.core.context import TaskContext
from tasklab.core.ending import call_ending
from tasklab.core.models import EffectRecord
from tasklab.errors import InvalidPayload, LeaseLost
from tasklab.runners.async_context import AsyncTaskContext


def _send(conn: Connection, msg: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(msg, allow_nan=False).encode())


class ChildPort:
    """The context port inside the child: events go to the parent, which holds the
    claim and does every fenced write."""

    connection: Any = None

    def __init__(
        self,
        conn: Connection,
        msg: dict[str, Any],
        cancel: threading.Event,
        replies: queue.Queue[dict[str, Any]],
    ) -> None:
        self._conn = conn
        self.task_id = msg["task_id"]
        self.attempt = msg["attempt"]
        self.data_dir = msg.get("data_dir")
        self._cancel = cancel
        self._replies = replies
        self.deadline = float(msg.get("deadline") or "inf")

    def cancel_requested(self) -> bool:
        # the local lease deadline too: the parent may be paused (SIGSTOP, a frozen VM)
        return self._cancel.is_set() or time.monotonic() >= self.deadline

    def wait_cancel(self, timeout: float) -> bool:
        left = self.deadline - time.monotonic()
        return self._cancel.wait(max(0.0, min(timeout, left))) or self.cancel_requested()

    def add_event(self, etype: str, data: Any) -> None:
        _send(self._conn, {"op": "event", "type": etype, "data": data})

    def add_text(self, text: str) -> None:
        _send(self._conn, {"op": "text", "text": text})

    def _call(self, name: str, **args: Any) -> dict[str, Any]:
        _send(self._conn, {"op": "call", "name": name, **args})
        reply = self._replies.get()
        if "lost" in reply:
            raise LeaseLost(reply["lost"])
        return reply

    def heartbeat(self) -> None:
        self._call("heartbeat")

    def effect_get(self, key: str) -> EffectRecord:
        r = self._call("effect_get", key=key)
        return EffectRecord(key, r["status"], r.get("result"), r.get("attempt"))

    def effect_start(self, key: str) -> None:
        self._call("effect_start", key=key)

    def effect_done(self, key: str, result: Any) -> None:
        self._call("effect_done", key=key, result=result)

    def durable(self, op: str, **args: Any) -> Any:
        reply = self._call("durable", what=op, args=args)  # "op" is the message's own
        if "error" in reply:
            raise InvalidPayload(reply["error"])
        return reply["value"]


def _resolve(qualified: str) -> Any:
    module, _, name = qualified.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    from tasklab.typed import Task

    return obj.fn if isinstance(obj, Task) else obj  # what @app.task made of it


def _run(port: ChildPort, msg: dict[str, Any]) -> dict[str, Any]:
    ctx = TaskContext(port)

    def call() -> object:
        fn = _resolve(msg["fn"])
        if asyncio.iscoroutinefunction(fn):
            return asyncio.run(fn(AsyncTaskContext(ctx), **msg["payload"]))
        return fn(ctx, **msg["payload"])

    return {"op": "done", **call_ending(call).to_wire()}


PR_SET_PDEATHSIG = 1
ORPHANED = 70  # exit status of a child whose parent is gone


def die_with_parent(parent: int) -> None:
    """Never outlive the parent: it holds the claim, and without it a task body that
    went on would run beside the retry the store allows (or under an
    `outcome_unknown` that claims nothing about it). Linux kills us the moment the
    parent dies (`PR_SET_PDEATHSIG`); everywhere, the reader below exits on EOF."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(ORPHANED)


def main(conn: Connection, parent: int | None = None) -> None:
    # The parent decides when a task stops (it runs us in our own session, too).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        die_with_parent(parent)
    runs: queue.Queue[dict[str, Any] | None] = queue.Queue()
    replies: queue.Queue[dict[str, Any]] = queue.Queue()
    cancel = threading.Event()
    current: list[ChildPort] = []

    def reader() -> None:
        try:
            while True:
                msg = json.loads(conn.recv_bytes())
                if msg["op"] == "cancel":
                    cancel.set()
                elif msg["op"] == "lease":
                    for port in current:
                        port.deadline = float(msg["deadline"])
                elif msg["op"] == "reply":
                    replies.put(msg)
                elif msg["op"] == "run":
                    runs.put(msg)
                elif msg["op"] == "exit":
                    break
        except (EOFError, OSError):
            # The parent is gone (or dropped us): stop now, mid-task too, before the
            # task body can start another side effect. No finally block runs.
            os._exit(ORPHANED)
        runs.put(None)

    threading.Thread(target=reader, name="tasklab-child-reader", daemon=True).start()
    while (msg := runs.get()) is not None:
        cancel.clear()
        port = ChildPort(conn, msg, cancel, replies)
        current[:] = [port]
        _send(conn, _run(port, msg))


if __name__ == "__main__":
    main(Connection(int(sys.argv[1])), int(sys.argv[2]) if len(sys.argv) > 2 else None)
