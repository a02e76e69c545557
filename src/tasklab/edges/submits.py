"""Group commit of the servers' submits.

Every submit is a durable commit, and a commit costs a disk flush (SQLite FULL) or a
round trip to PostgreSQL. Submits that arrive while one is being written wait and go
together in the next transaction: one thread hop and one commit per batch instead of
per request. A lone submit pays nothing extra. An invalid submit is answered alone
and a batch whose transaction fails (an idempotency conflict, say) is written again
one submit per transaction (tasklab/submitter.py), so one bad submit never fails the
others; every caller gets its own answer and nothing is announced before its commit.
"""

from __future__ import annotations

import asyncio

from tasklab._types import ToThread
from tasklab.app import TaskApp
from tasklab.core.models import NewTask, TaskSnapshot
from tasklab.core.queueing import NO_OPTIONS, SubmitOptions

Submitted = tuple[TaskSnapshot, bool]
_Request = tuple[str, object, str | None, int | None, SubmitOptions]


class SubmitBatcher:
    def __init__(
        self,
        app: TaskApp,
        db: ToThread,
        max_batch: int = 256,
    ) -> None:
        self.app = app
        self.db = db
        self.max_batch = max_batch
        self._pending: list[tuple[_Request, asyncio.Future[Submitted]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(
        self,
        task: str,
        payload: object,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        options: SubmitOptions = NO_OPTIONS,
    ) -> Submitted:
        """Like `TaskApp.submit_ex`, sharing a transaction with concurrent submits."""
        fut: asyncio.Future[Submitted] = asyncio.get_running_loop().create_future()
        self._pending.append(((task, payload, idempotency_key, max_attempts, options), fut))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_all())
        return await fut

    async def _write_all(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                try:
                    results = await self.db(self._commit, [req for req, _ in batch])
                except BaseException as exc:  # the loop is going away: nobody is left waiting
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    raise
                for (_, fut), result in zip(batch, results, strict=True):
                    if fut.done():  # the caller went away; the task is committed all the same
                        continue
                    if isinstance(result, BaseException):
                        fut.set_exception(result)
                    else:
                        fut.set_result(result)
        finally:
            self._writer = None
            for _, fut in self._pending:  # only after a failure above
                if not fut.done():
                    fut.set_exception(RuntimeError("the submit writer stopped"))
            self._pending.clear()

    def _commit(self, requests: list[_Request]) -> list[Submitted | BaseException]:
        """In a worker thread: validate each, then one transaction for the valid ones
        (Submitter.write: a failing batch is written again one by one)."""
        prepared: list[NewTask | BaseException] = []
        for task, payload, key, attempts, options in requests:
            try:
                prepared.append(self.app.prepare(task, payload, key, attempts, options=options))
            except Exception as exc:
                prepared.append(exc)
        items = [p for p in prepared if isinstance(p, NewTask)]
        written = iter(self.app.submit_prepared(items) if items else [])
        return [p if isinstance(p, BaseException) else next(written) for p in prepared]
