"""Outbox delivery to a real HTTP receiver on 127.0.0.1: at least once, with a stable
event id, one delivery record per URL."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasklab import State
from tasklab.core.policy import Backoff
from tasklab.service.outbox import Dispatcher
from tests.conftest import wait_for


class Receiver:
    """Records every POST; answers with the configured status."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.posts: list[tuple[str, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.posts.append((self.headers["Tasklab-Event-Id"], body))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None  # keep test output quiet

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def logical(self) -> set[str]:
        return {eid for eid, _ in self.posts}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_each_terminal_task_is_delivered_with_its_event_id(app, receiver):
    ids = [app.submit("t.echo", {"value": i}) for i in range(3)]
    cancelled = app.submit("t.echo", {"value": "x"})
    app.cancel(cancelled)
    for t in ids:
        app.run(t)
    d = Dispatcher(app, [receiver.url]).start()
    try:
        wait_for(lambda: len(receiver.logical()) == 4)
    finally:
        d.stop()
    for eid, body in receiver.posts:
        assert body["event_id"] == eid
        assert body["task"]["state"] in ("succeeded", "cancelled")
        assert app.store.outbox_for(body["task"]["id"])["event_id"] == eid
    assert app.store.counters()["notifications_delivered"] == 4
    assert app.store.notification_lag(receiver.url) == 0.0


def test_delivery_record_fails_after_send_resend_has_the_same_event_id(app, receiver):
    """docs/design.md §6: the receiver sees the same event twice and one logical notification."""
    tid = app.submit("t.echo", {"value": 1})
    app.run(tid)
    d = Dispatcher(app, [receiver.url])
    app.store.faults.arm("delivery_record")
    assert d.deliver_once() == 1  # sent; recording it failed
    assert d.deliver_once() == 1  # so it is sent again
    assert d.deliver_once() == 0  # recorded now: nothing pending
    d.stop()
    assert len(receiver.posts) == 2
    assert receiver.posts[0][0] == receiver.posts[1][0]
    assert len(receiver.logical()) == 1


def test_failed_delivery_is_retried_with_backoff(app):
    bad = Receiver(status=500)
    try:
        tid = app.submit("t.echo", {"value": 1})
        app.run(tid)
        d = Dispatcher(app, [bad.url], backoff=Backoff(base=0.2, jitter=0.0))
        assert d.deliver_once() == 1
        assert d.deliver_once() == 0  # not due yet
        bad.status = 200
        wait_for(lambda: d.deliver_once() == 1, interval=0.05)
        assert d.deliver_once() == 0
        d.stop()
        assert [e for e, _ in bad.posts] == [bad.posts[0][0]] * 2
        assert app.store.counters()["delivery_failures"] == 1
    finally:
        bad.close()


def test_each_url_gets_its_own_delivery(app, receiver):
    other = Receiver()
    try:
        app.run(app.submit("t.echo", {"value": 1}))
        d = Dispatcher(app, [receiver.url, other.url])
        assert d.deliver_once() == 2
        assert d.deliver_once() == 0
        d.stop()
        assert receiver.logical() == other.logical()
    finally:
        other.close()


def test_worker_with_webhooks_delivers(app, receiver):
    with app.worker(concurrency=1, webhooks=[receiver.url]):
        tid = app.submit("t.echo", {"value": 5})
        wait_for(lambda: receiver.logical())
    assert receiver.posts[0][1]["task"]["id"] == tid
    assert receiver.posts[0][1]["task"]["state"] == State.SUCCEEDED.value


def test_a_subscribed_url_gets_its_delivery_row_in_the_terminal_transaction(app, store_url):
    from tasklab.store import open_store

    url = "http://127.0.0.1:9/not-listening"
    assert app.store.subscribe([url]) == [url]
    tid = app.submit("t.echo", {"value": 1})
    app.run(tid)
    reader = open_store(store_url)  # a new connection: what was committed
    try:
        assert reader.webhooks() == {url: 1}
        (due,) = reader.outbox_pending(url, 10)
        assert due["task_id"] == tid and due["event_id"] == reader.outbox_for(tid)["event_id"]
        assert due["attempts"] == 0
    finally:
        reader.close()


def test_a_new_subscription_gets_the_history_once(app):
    for i in range(3):
        app.run(app.submit("t.echo", {"value": i}))
    assert app.store.subscribe(["http://a.example/hook"]) == ["http://a.example/hook"]
    assert app.store.subscribe(["http://a.example/hook"]) == []  # known: nothing queued again
    assert app.store.webhooks() == {"http://a.example/hook": 3}


def test_notifications_made_while_no_dispatcher_runs_wait_for_it(app, receiver):
    Dispatcher(app, [receiver.url]).start().stop()  # subscribed, then gone
    ids = [app.submit("t.echo", {"value": i}) for i in range(3)]
    for tid in ids:
        app.run(tid)
    assert app.store.webhooks() == {receiver.url: 3}
    d = Dispatcher(app, [receiver.url])
    assert d.deliver_once() == 3
    d.stop()
    assert {body["task"]["id"] for _, body in receiver.posts} == set(ids)
    assert app.store.webhooks() == {receiver.url: 0}


def test_a_removed_webhook_is_forgotten_with_what_it_had_to_receive(app):
    url = "http://b.example/hook"
    app.store.subscribe([url])
    app.run(app.submit("t.echo", {"value": 1}))
    assert app.store.unsubscribe(url) is True
    app.run(app.submit("t.echo", {"value": 2}))
    assert app.store.webhooks() == {}
    assert app.store.outbox_pending(url, 10) == []
    assert app.store.unsubscribe(url) is False


def test_the_dispatchers_poll_reads_only_what_is_due(tmp_path):
    """SQLite's plan: an index range over due deliveries, not every notification."""
    import sqlite3

    from tasklab.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "plan.db")
    try:
        with sqlite3.connect(tmp_path / "plan.db") as conn:
            plan = " ".join(
                row[-1]
                for row in conn.execute(
                    "EXPLAIN QUERY PLAN " + store.q["outbox_pending"], {"url": "u", "limit": 5}
                )
            )
    finally:
        store.close()
    assert "USING INDEX deliveries_due (url=? AND next_attempt_at<?)" in plan
    assert "outbox" not in plan


def test_a_delivery_recorded_after_its_url_was_removed_still_names_its_task(app, receiver):
    """A dispatcher mid-delivery when its URL is unsubscribed records the attempt on a
    row of its own; subscribed again, that row must still say which task it tells of
    (it once said nothing, and the dispatcher could not send it)."""
    url = receiver.url
    app.store.subscribe([url])
    tid = app.submit("t.echo", {"value": 1})
    app.run(tid)
    (due,) = app.store.outbox_pending(url, 10)
    app.store.unsubscribe(url)  # while the send is in flight
    app.store.record_delivery(due["event_id"], url, False, 0.0, "HTTP 503")
    app.store.subscribe([url])
    (again,) = app.store.outbox_pending(url, 10)
    assert again["task_id"] == tid
    d = Dispatcher(app, [url])
    assert d.deliver_once() == 1
    d.stop()
    assert [body["task"]["id"] for _, body in receiver.posts] == [tid]


class EndlessReceiver:
    """Answers every POST with 200 and then a body that never ends: trickled (a byte a
    chunk, every 0.2 s, each read well inside any timeout) or flooded."""

    def __init__(self, flood: bool) -> None:
        self.flood = flood
        self.posts = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(v for k, v in _headers(head) if k == b"content-length"))
            while len(body) < length:
                body += conn.recv(65536)
            self.posts += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"x" * 65536 if self.flood else b"x"
            try:
                while not self.closed.is_set():
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    if not self.flood:
                        time.sleep(0.2)
            except OSError:
                return  # the dispatcher hung up: what it should do

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


def _headers(head: bytes) -> list[tuple[bytes, bytes]]:
    lines = head.split(b"\r\n")[1:]
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(b":") for line in lines)]


@pytest.mark.parametrize("flood", [False, True], ids=["trickled", "flooded"])
def test_a_receiver_with_an_endless_answer_holds_up_no_delivery(app, receiver, flood):
    """The status is the answer. The dispatcher used to read a receiver's whole body
    first: one answering 200 and then an endless body held it — and every URL after
    that one — for ever (a trickle never trips a read timeout), and a flood grew its
    memory without bound."""
    endless = EndlessReceiver(flood)
    try:
        app.run(app.submit("t.echo", {"value": 1}))
        d = Dispatcher(app, [endless.url, receiver.url], timeout=1.0)
        started = time.monotonic()
        assert d.deliver_once() == 2
        assert time.monotonic() - started < 5.0
        assert endless.posts == 1 and len(receiver.logical()) == 1
        assert d.deliver_once() == 0  # both recorded as delivered
        d.stop()
        assert app.store.counters()["notifications_delivered"] == 2
    finally:
        endless.close()
