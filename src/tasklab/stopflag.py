"""An execution's stop request: set once, checked often, rarely waited for."""

from __future__ import annotations

import threading


class StopFlag:
    """`threading.Event`'s is_set / set / wait for an execution's stop request, without
    building an Event (a Condition and its locks) for each of thousands of short tasks
    that never wait on it: the Event is made the first time someone waits."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float) -> bool:
        if self._set:
            return True
        with _FLAG_EVENTS:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if self._set:  # set() ran before the event existed: it could not wake it
            event.set()
        return event.wait(timeout)


_FLAG_EVENTS = threading.Lock()
