"""The outbox dispatcher: delivers terminal notifications to webhooks, at least once.

The notification row was inserted in the terminal transaction, so it exists exactly
when the terminal state does (never for a write that lost its authority). Delivery is a
POST of `{event_id, task: snapshot}` with the header `Tasklab-Event-Id`; a 2xx records
the delivery, anything else is retried with backoff. If recording fails after a
successful send, the next round sends again with the same event id: receivers dedupe
by it. Every dispatcher delivers any pending notification, so several may run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from tasklab.core.policy import Backoff
from tasklab.engine import as_engine
from tasklab.errors import TasklabError
from tasklab.redact import redact
from tasklab.store.roles import Outbox, Signals, TaskReads

if TYPE_CHECKING:
    from tasklab.engine import EngineLike

log = logging.getLogger("tasklab.outbox")
BODY_READ = 65_536  # bytes of a receiver's answer read to keep its connection


class _DispatchStore(Outbox, TaskReads, Signals, Protocol):
    """The store roles used here: the outbox rows, the task each one tells of, wake-ups."""


def check_webhook_url(url: str) -> str:
    """The URL if it is an absolute http(s) URL with a host; else ValueError (checked
    at start, so that one bad URL is a message, not a dead dispatcher)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ValueError(f"webhook URL {redact(str(url))!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"webhook URL {redact(url)!r} must be http:// or https:// with a host")
    return url


class Dispatcher:
    @property
    def store(self) -> _DispatchStore:
        return self.engine.store

    def __init__(
        self,
        app: EngineLike,
        urls: list[str],
        *,
        batch: int = 100,
        timeout: float = 5.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.engine = as_engine(app)
        self.urls = [check_webhook_url(u) for u in urls]
        self.batch = batch
        self.backoff = backoff or Backoff(base=1.0, cap=300.0)
        self.timeout = timeout
        self._client = httpx.Client(timeout=timeout)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._subscribed = False

    def start(self) -> Dispatcher:
        self._subscribe()
        self._thread = threading.Thread(target=self._loop, name="tasklab-outbox", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.store.wake()
        if self._thread is not None:
            self._thread.join(10)
        self._client.close()

    def _loop(self) -> None:
        store = self.store
        while not self._stop.is_set():
            token = store.change_token()
            try:
                sent = self.deliver_once()
            except TasklabError as exc:
                log.warning("outbox: %s", exc)
                sent = 0
            except Exception as exc:  # nothing may stop the dispatcher: one line, go on
                log.error("outbox: a round failed: %s: %s", type(exc).__name__, redact(str(exc)))
                sent = 0
            if not sent:
                store.wait_change(token, 1.0)

    def _subscribe(self) -> None:
        if not self._subscribed:
            self.store.subscribe(self.urls)
            self._subscribed = True

    def deliver_once(self) -> int:
        """One round over every URL; returns how many sends were attempted."""
        self._subscribe()
        attempted = 0
        for url in self.urls:
            for item in self.store.outbox_pending(url, self.batch):
                if self._stop.is_set():
                    return attempted
                attempted += 1
                self._deliver(url, item)
        return attempted

    def _skim(self, resp: httpx.Response) -> None:
        """The status is the answer; the body is read only so that its connection may
        serve the next delivery — up to `BODY_READ` bytes within the timeout, then the
        connection is closed instead. Before, a receiver answering with an endless body
        (or trickling one) held the dispatcher, and every URL after it, for ever."""
        deadline, read = time.monotonic() + self.timeout, 0
        try:
            for chunk in resp.iter_raw():
                read += len(chunk)
                if read > BODY_READ or time.monotonic() > deadline:
                    return
        except httpx.HTTPError:
            return  # the status has come: what follows it changes nothing

    def _deliver(self, url: str, item: dict[str, Any]) -> None:
        event_id = str(item["event_id"])
        snapshot = self.store.get(str(item["task_id"]))
        body = json.dumps({"event_id": event_id, "task": snapshot.to_json()})
        error: str | None = None
        try:
            with self._client.stream(
                "POST",
                url,
                content=body,
                headers={"Content-Type": "application/json", "Tasklab-Event-Id": event_id},
            ) as resp:
                if not 200 <= resp.status_code < 300:
                    error = f"HTTP {resp.status_code}"
                self._skim(resp)
        except Exception as exc:  # any failure of one delivery is that delivery's
            error = f"{type(exc).__name__}: {redact(str(exc))}"
        attempts = int(item.get("attempts") or 0) + 1
        ok = error is None
        delay = 0.0 if ok else self.backoff.delay(attempts)
        try:
            self.store.record_delivery(event_id, url, ok, delay, error)
        except TasklabError as exc:
            # Sent but not recorded: it will be sent again, with the same event id.
            log.warning("outbox: delivery of %s to %s not recorded: %s", event_id, url, exc)
            return
        self.engine.count("notifications_delivered" if ok else "delivery_failures")
