"""Task and event ids, page cursors: pure, no database."""

from __future__ import annotations

import base64
import os
import re
import threading
import time

from tasklab.errors import InvalidPayload, TaskNotFound


class _TaskIds:
    """Time-ordered ids (ms since the epoch, then 48 random bits) so that `ORDER BY id`
    is creation order and keyset pagination needs no second column. Within one
    process they strictly increase (within a millisecond the random part counts up, as
    in ULID's monotonic mode; a clock stepping back does not reorder): tasks submitted
    one after another are claimed in that order. Across processes, tasks of the same
    millisecond are ordered by chance."""

    _RANDOM_BITS = 47  # the first of the 48 stays 0: room to count up within a ms

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = 0
        self._rand = 0
        # a forked child counting up from its parent's last id could repeat the
        # parent's next one: it draws afresh instead
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._ms = 0

    def __call__(self) -> str:
        ms = int(time.time() * 1000)
        with self._lock:
            if ms <= self._ms:
                ms, rand = self._ms, self._rand + 1
            else:
                rand = int.from_bytes(os.urandom(6)) >> (48 - self._RANDOM_BITS)
            self._ms, self._rand = ms, rand
        return f"{ms:012x}{rand:012x}"


new_task_id = _TaskIds()


def new_event_id() -> str:
    """Time-ordered too: outbox rows then append to the key's index instead of
    dirtying a random page of it in every commit (32 hex digits, like a uuid4)."""
    return f"{int(time.time() * 1000):012x}{os.urandom(10).hex()}"


_ID = re.compile(r"[0-9a-f]{24}")


def known_id(task_id: str) -> str:
    """`task_id` if it can name a task (24 hex digits, as `new_task_id` makes every
    one); `TaskNotFound` otherwise, without a database read. A caller's string may not
    even be text — a JSON `"\\ud800"`, a command line that is not UTF-8 — and would
    otherwise reach the driver as its encoding error."""
    if isinstance(task_id, str) and _ID.fullmatch(task_id):
        return task_id
    raise TaskNotFound(f"no task with id {task_id!r}")


def encode_cursor(task_id: str) -> str:
    return base64.urlsafe_b64encode(task_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = base64.b64decode(padded.encode(), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        value = ""
    if not _ID.fullmatch(value):
        raise InvalidPayload("cursor is not one this server handed out")
    return value
