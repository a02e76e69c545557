"""One attempt of one task, from its claim to its settled state.

The task function runs outside any transaction. Its events are buffered and written
in order (by the monitor every `flush_interval`, or at once past `flush_bytes`), the
last of them in the same transaction as the outcome. Every write is fenced; the first
one that finds the authority gone marks the execution lost: it publishes nothing more
and its task function is told to stop at its next checkpoint.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from tasklab.core.context import TaskContext
from tasklab.core.ending import AttemptFacts, Ending, call_ending, outcome_of
from tasklab.core.models import JSON, Claim, EffectRecord, Outcome, iso
from tasklab.core.registry import TaskDef
from tasklab.core.states import CancelReason, State
from tasklab.core.timeline import attempt_event, outcome_events
from tasklab.errors import LeaseLost, SessionLost, TasklabError
from tasklab.stopflag import StopFlag
from tasklab.store.roles import Effects, Leases, TaskReads, Waits
from tasklab.tracing import ExecutionSpan

if TYPE_CHECKING:
    from tasklab.engine import Engine


class _ExecutionStore(Leases, Effects, TaskReads, Waits, Protocol):
    """The store roles used here: fenced writes, the effect journal, the stored events,
    signals and spawns."""


def _now(fn: Callable[..., Any], *args: Any) -> None:
    fn(*args)


class Execution:
    """Implements the context's port for a leased claim."""

    connection: Any = None

    def __init__(self, engine: Engine, claim: Claim, task: TaskDef) -> None:
        self.engine = engine
        self.store: _ExecutionStore = engine.store
        self.claim = claim
        self.task = task
        self.data_dir = engine.data_dir
        self.task_id = claim.task_id
        self.attempt = claim.attempt
        self.cancel_flag = StopFlag()
        self.cancel_reason: CancelReason | None = None
        self.lost = False
        self.started = time.monotonic()
        self.last_beat = self.started
        # The local lease deadline: past it without a confirmed renewal, the authority
        # is treated as lost (a partition, a paused process) — see Settings.local_lease.
        renewed = max(claim.sent_at or self.started, engine.monitor.renewal_of(claim))
        self.deadline = renewed + engine.settings.local_lease
        first = (
            ["resumed", {"attempt": claim.attempt, "after": claim.resumed}]
            if claim.resumed
            else ["attempt", attempt_event(claim, engine.settings.lease)]
        )
        self._buf: list[list[Any]] = [first]
        self._buf_bytes = 0
        self._buf_since: float | None = self.started
        self._buf_lock = threading.Lock()
        self._write_lock = threading.Lock()  # keeps flushes and the finish in order
        self._written = 0  # this attempt's events known committed
        # a batch whose append lost its session: committed or not, found out before
        # anything else is written (never lost, never written twice)
        self._unsure: list[tuple[str, JSON]] | None = None
        # An async execution must not write from the event loop: it flushes in a thread.
        self.inline_flush = True
        self.stop_hooks: list[Callable[[], None]] = []
        self.span: ExecutionSpan | None = None  # tracing.py, set by Monitor.watching
        self.settled: State | None = None
        self._journal: dict[str, EffectRecord] | None = None

    # ---- the port ------------------------------------------------------------------
    def cancel_requested(self) -> bool:
        if self.cancel_flag.is_set() or self.lost:
            return True
        # checked here too, not only by the monitor: a process resumed after a pause
        # must not pass one more checkpoint before it knows its lease is gone
        return self.past_deadline(time.monotonic())

    def wait_cancel(self, timeout: float) -> bool:
        left = self.deadline - time.monotonic()
        return self.cancel_flag.wait(max(0.0, min(timeout, left))) or self.cancel_requested()

    def past_deadline(self, now: float) -> bool:
        """True (and the authority lost) once the local lease deadline has passed."""
        if now < self.deadline or self.lost:
            return self.lost
        self.lost = True  # nothing more is published by this execution
        self.request_stop(None)
        # counted off this thread: the database may be what cannot be reached
        self.engine.monitor.in_background(self.engine.count, "lease_deadline_stops")
        return True

    def request_stop(self, reason: CancelReason | None) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        first = not self.cancel_flag.is_set()
        self.cancel_flag.set()
        if first:
            for hook in self.stop_hooks:
                hook()

    def add_event(self, etype: str, data: JSON) -> None:
        size = len(json.dumps(data))
        with self._buf_lock:
            self._buf.append([etype, data])
            self._note(size)
        self._maybe_flush()

    def add_text(self, text: str) -> None:
        with self._buf_lock:
            last = self._buf[-1] if self._buf else None
            if last is not None and last[0] == "chunk":
                last[1] = {"text": last[1]["text"] + text}
            else:
                self._buf.append(["chunk", {"text": text}])
            self._note(len(text.encode()))
        self._maybe_flush()

    def _note(self, size: int) -> None:
        self._buf_bytes += size
        if self._buf_since is None:
            self._buf_since = time.monotonic()

    @property
    def flush_needed(self) -> bool:
        return self._buf_bytes >= self.engine.settings.flush_bytes

    def _maybe_flush(self) -> None:
        if self.inline_flush and self.flush_needed:
            try:
                self.flush()
            except LeaseLost:
                raise
            except TasklabError:
                pass  # kept in the buffer: the next flush or the terminal write tries again

    def heartbeat(self) -> None:
        self.beat()
        if self.lost:
            raise LeaseLost(f"task {self.task_id}: the lease is gone")

    def effect_get(self, key: str) -> EffectRecord:
        # A re-run replays its finished steps and waits: answered from one read of the
        # journal (what is done or a wait's record never changes), the rest asked.
        if self._journal is None:
            self._journal = {
                r.key: r
                for r in self.store.effect_records(self.task_id)
                if r.status in ("done", "wait")
            }
        known = self._journal.get(key)
        return known if known is not None else self.store.effect_get(self.task_id, key)

    def effect_start(self, key: str) -> None:
        self.flush()
        self._fenced(self.store.effect_start, self.claim, key)

    def effect_done(self, key: str, result: JSON) -> None:
        self.flush()  # what the effect or step emitted is stored before it counts as done
        self._fenced(self.store.effect_done, self.claim, key, result)

    def durable(self, op: str, **args: Any) -> Any:
        """The durable methods' reads and the spawn (core/durable.py), JSON in and out
        so that a process child's calls are forwarded as they are."""
        if op == "now":
            return iso(self.store.now())
        if op == "signal_get":
            found = self.store.signal_get(self.task_id, str(args["name"]))
            return {"found": found is not None, "data": found[0] if found else None}
        if op == "snapshots":
            return [self.store.get(str(i)).to_json(payload=False) for i in args["ids"]]
        if op == "spawn":
            item = self.engine.prepare_child(
                self.task_id, str(args["task"]), args["payload"], str(args["key"])
            )
            snap, _ = self._fenced(self.store.spawn, self.claim, item)
            return snap.id
        raise ValueError(f"unknown durable operation {op!r}")

    # ---- writes --------------------------------------------------------------------
    def _take(self) -> list[tuple[str, JSON]]:
        with self._buf_lock:
            events = [(t, d) for t, d in self._buf]
            self._buf.clear()
            self._buf_bytes = 0
            self._buf_since = None
        return events

    def flush_due(self, now: float) -> bool:
        since = self._buf_since
        return since is not None and now - since >= self.engine.settings.flush_interval

    def flush(self) -> None:
        with self._write_lock:
            if self.lost:
                self._take()
                return
            self._resolve_unsure()
            events = self._take()
            if not events:
                return
            try:
                self._fenced(self.store.append_events, self.claim, events)
            except SessionLost:
                self._unsure = events
                raise
            except LeaseLost:
                raise
            except TasklabError:
                self._put_back(events)  # the store refused it whole: nothing was written
                raise
            self._written += len(events)

    def _put_back(self, events: list[tuple[str, JSON]]) -> None:
        with self._buf_lock:
            self._buf[:0] = [[t, d] for t, d in events]
            self._note(sum(len(json.dumps(d)) for _, d in events))

    def _resolve_unsure(self) -> None:
        """Did the append that lost its session commit? Only this attempt writes events
        with its attempt number, so counting them tells (raises while the store is
        still away, keeping the batch unsure)."""
        if self._unsure is None:
            return
        stored = self._stored_events()
        if stored == self._written:
            self._put_back(self._unsure)  # not written: write it again
        else:
            self._written = stored  # written (the whole batch: one transaction)
        self._unsure = None

    def _stored_events(self) -> int:
        count, after = 0, 0
        while True:
            page = self.store.events(self.task_id, after=after, limit=1000)
            count += sum(1 for e in page if e.attempt == self.attempt)
            if len(page) < 1000:
                return count
            after = page[-1].seq

    def beat(self) -> None:
        if self.lost:
            return
        sent = self.last_beat = time.monotonic()
        try:
            state = self.store.heartbeat(self.claim, self.engine.settings.lease)
        except TasklabError:
            return  # a failed renewal is retried next time; the deadline decides
        if state is None:
            self._lose()
            return
        # renewed: the database's lease runs from after `sent`, so this is safe
        self.deadline = max(self.deadline, sent + self.engine.settings.local_lease)
        if state is State.CANCEL_REQUESTED:
            self.request_stop(None)

    def _fenced(self, write: Any, *args: Any) -> Any:
        try:
            return write(*args)
        except LeaseLost:
            self._lose()
            raise

    def _lose(self) -> None:
        if not self.lost:
            self.lost = True
            self.request_stop(None)
            self.engine.count_stale_write()

    # ---- running -------------------------------------------------------------------
    def run(
        self, ended: Callable[[], None] | None = None, answered: Answered | None = None
    ) -> State | None:
        """Run the task function and settle its outcome. Returns the committed state,
        or None when nothing could be committed (lost authority or failed write).
        With `answered`, the terminal write is handed over instead of waited for: this
        returns None at once and `answered` hears the state after the commit."""
        ending = call_ending(self.task.fn, TaskContext(self), **self.claim.payload)
        if ended is not None:
            ended()
        return self.settle_ending(ending, answered)

    def facts(self) -> AttemptFacts:
        """What the ending → outcome mapping needs of this attempt, as of now."""
        return AttemptFacts(
            self.task.retry_on,
            self.attempt,
            self.claim.max_attempts,
            self.engine.settings.backoff,
            self.cancel_flag.is_set(),
            self.cancel_reason,
        )

    def settle_ending(self, ending: Ending, answered: Answered | None = None) -> State | None:
        outcome = outcome_of(ending, self.facts())
        if outcome is None:
            return _told(answered, None)
        return self.settle(outcome, answered)

    def settle(self, outcome: Outcome, answered: Answered | None = None) -> State | None:
        for etype, data in outcome_events(outcome, self.attempt):
            self.add_event(etype, data)
        with self._write_lock:
            if self.lost:
                return _told(answered, None)
            try:
                self._resolve_unsure()
                events = self._take()
                if answered is None or self.span is not None:  # a span covers its commit
                    self.settled = self._finish(outcome, events)
                    return _told(answered, self.settled)
            except Exception as exc:
                self._write_failed(exc)
                return _told(answered, None)
        # handed over outside the lock: a lone sender leads, writing others' tasks too
        answer = partial(self._committed, answered)
        self.engine.finisher.finish_later(self.claim, outcome, events, answer)
        return None

    def _finish(self, outcome: Outcome, events: list[tuple[str, JSON]]) -> State:
        if self.span is None:
            return self.engine.finisher.finish(self.claim, outcome, events)
        with self.span.commit():
            return self.engine.finisher.finish(self.claim, outcome, events)

    def _committed(self, answered: Answered, result: State | BaseException) -> None:
        """A handed-over terminal write, answered in the thread that wrote it. The
        monitor lets go here: the execution's own thread may still be writing other
        tasks' batches (no heartbeat or local deadline of this one is due any more)."""
        self.engine.monitor.remove(self)
        if isinstance(result, BaseException):
            # counted off that thread: it writes other tasks' terminal writes too
            self._write_failed(result, self.engine.monitor.in_background)
        else:
            self.settled = result
        answered(self.settled)

    def _write_failed(self, exc: BaseException, run: Callable[..., None] = _now) -> None:
        stale = isinstance(exc, LeaseLost)
        if stale and self.lost:
            return  # already lost, and counted
        self.lost = True
        self.request_stop(None)
        if stale:
            run(self.engine.count_stale_write)
        else:
            # No fake state: the task stays live until its lease expires and the
            # reaper or exclusive recovery settles it as outcome_unknown.
            run(self.engine.count, "terminal_write_failures")


Answered = Callable[[State | None], None]


def _told(answered: Answered | None, state: State | None) -> State | None:
    if answered is not None:
        answered(state)
    return state
