"""Whether the asyncio runner kept the store off its event loop.

A loop's measured lag mixes two things on a shared 2-core VM: a loop blocked by a sync
call (a bug) and a loop thread the machine did not schedule (CI once read 0.46 s of it
in a test whose loop never blocked). The property itself is plain: no store call is
made on the loop's thread. Every store call passes its closing gate (store/gate.py),
so recording the calling thread there sees each one."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tasklab.runners.aio import LOOP_THREAD


class _RecordingGate:
    def __init__(self, gate: Any) -> None:
        self.gate = gate
        self.on_loop: list[str] = []

    def use(self) -> Any:
        if threading.current_thread().name == LOOP_THREAD:
            self.on_loop.append("".join(traceback.format_stack(limit=8)))
        return self.gate.use()

    def __getattr__(self, name: str) -> Any:  # close(), closed: the real gate's
        return getattr(self.gate, name)


@contextmanager
def store_calls_on_the_loop(app: Any) -> Iterator[list[str]]:
    """`with store_calls_on_the_loop(app) as calls:` … `assert not calls` (each entry
    is the stack of one store call made on the loop thread)."""
    store = app.store
    recording = _RecordingGate(store._gate)
    store._gate = recording
    try:
        yield recording.on_loop
    finally:
        store._gate = recording.gate
