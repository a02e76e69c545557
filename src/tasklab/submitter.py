"""Submits from many threads at once (a web app's request threads) share commits.

`submit` is one durable commit per call; 32 threads calling it at once would queue
for 32 disk flushes. Through the group commit (groupcommit.py) they write one
transaction per round instead, each caller answered after the commit that holds its
task. A batch that fails as a whole (one idempotency conflict, one bad row) is written
again one task per transaction, so one bad submit never fails the others; a batch
whose session was lost may have committed, so every caller hears `SessionLost` (a
retry with an idempotency key is safe) instead of its task being inserted twice.
"""

from __future__ import annotations

from tasklab.core.models import NewTask, Submission, TaskSnapshot
from tasklab.errors import SessionLost
from tasklab.groupcommit import GroupCommit
from tasklab.store.roles import Submits

Submitted = tuple[TaskSnapshot, bool]


class Submitter:
    def __init__(self, store: Submits, max_batch: int = 256) -> None:
        self.store = store
        self._group: GroupCommit[NewTask, Submission] = GroupCommit(
            lambda items: (self._write(items), None), max_batch=max_batch
        )

    def submit(self, item: NewTask) -> Submission:
        """One task, in whichever transaction concurrent callers share. Its snapshot is
        made in this thread, if asked for, not in the one that wrote the batch."""
        return self._group(item)

    def write(self, items: list[NewTask]) -> list[Submitted | BaseException]:
        """Many tasks in one transaction, each answered (an exception for one that
        failed alone). Also the servers' asyncio batches write through this."""
        return [a if isinstance(a, BaseException) else a.pair() for a in self._write(items)]

    def _write(self, items: list[NewTask]) -> list[Submission | BaseException]:
        if len(items) > 1:
            try:
                return list(self.store.submissions(items))
            except SessionLost as exc:
                return [exc] * len(items)
            except Exception:  # noqa: S110 - find out which one, one at a time
                pass
        out: list[Submission | BaseException] = []
        for item in items:
            try:
                out.append(self.store.submissions([item])[0])
            except Exception as exc:
                out.append(exc)
        return out
