"""Hostile clients and resource limits: DNS rebinding, cross-site writes, connection
floods, slow headers, buffered bytes, a bad webhook URL, spoofed doorbells, passwords
in output — over real sockets and real processes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tasklab.edges.budget import ByteBudget
from tasklab.edges.jsonl.server import JsonLinesServer
from tasklab.service.outbox import Dispatcher
from tasklab.store.doorbell import Doorbell, trusted_uids, wait_ring
from tests.acceptance.test_sigkill import cli
from tests.conftest import make_app, wait_for
from tests.helpers.servers import ServiceThread
from tests.integration.test_outbox import Receiver

ECHO = {"task": "t.echo", "payload": {"value": 1}}


@pytest.fixture
def server(app):
    with ServiceThread(app, embed_worker=False, allowed_origins=["https://app.example"]) as s:
        yield s


def port(server: ServiceThread) -> int:
    return int(server.url.rsplit(":", 1)[1])


def total(url: str) -> int:
    fresh = make_app(url)
    try:
        return sum(fresh.counts().values())
    finally:
        fresh.close()


def test_a_foreign_host_header_is_refused(server, store_url):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        r = c.post("/tasks", json=ECHO, headers={"Host": "evil.example"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_host"
        assert c.get("/tasks/counts", headers={"Host": "rebound.example:8000"}).status_code == 400
        assert c.get("/", headers={"Host": "evil.example"}).status_code == 400
        assert c.get("/tasks/counts", headers={"Host": f"localhost:{port(server)}"}).is_success
    assert total(store_url) == 0


def test_a_cross_site_simple_request_creates_nothing(server, store_url):
    body = json.dumps(ECHO)
    with httpx.Client(base_url=server.url, timeout=10) as c:
        # what any web page can send without a preflight
        r = c.post(
            "/tasks",
            content=body,
            headers={"Content-Type": "text/plain", "Origin": "https://evil.example"},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "cross_origin"
        r = c.post("/tasks", content=body, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
        r = c.post("/tasks", json=ECHO, headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
        r = c.post("/tasks", json=ECHO, headers={"Origin": "null"})
        assert r.status_code == 403
        assert total(store_url) == 0
        # the dashboard (same origin), a non-browser client, an allowed origin: served
        same = c.post("/tasks", json=ECHO, headers={"Origin": server.url})
        plain = c.post("/tasks", json=ECHO)
        allowed = c.post("/tasks", json=ECHO, headers={"Origin": "https://app.example"})
        assert (same.status_code, plain.status_code, allowed.status_code) == (201, 201, 201)
        cancel = c.post("/tasks/x/cancel", headers={"Origin": "https://evil.example"})
        assert cancel.status_code == 403
    assert total(store_url) == 3


def idle_sockets(port_: int, n: int, stack: ExitStack) -> list[socket.socket]:
    return [
        stack.enter_context(socket.create_connection(("127.0.0.1", port_), timeout=5))
        for _ in range(n)
    ]


def read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_connections_beyond_the_caps_are_refused_with_an_answer(app):
    with (
        ServiceThread(
            app, embed_worker=False, max_connections=3, jsonl_max_connections=3
        ) as server,
        ExitStack() as stack,
    ):
        jport = server.jsonl_port
        idle = idle_sockets(jport, 3, stack)
        wait_for(lambda: server.service.jsonl.active_handlers == 3)
        extra = stack.enter_context(socket.create_connection(("127.0.0.1", jport), timeout=5))
        reply = json.loads(read_all(extra))
        assert reply["error"]["code"] == "too_many_connections"
        idle_http = idle_sockets(port(server), 3, stack)
        time.sleep(0.2)  # accepted by the loop (nothing to wait on: they are idle)
        extra = stack.enter_context(socket.create_connection(("127.0.0.1", port(server)), 5))
        assert read_all(extra).startswith(b"HTTP/1.1 503")
        for s in idle + idle_http:
            s.close()
        # room again: both servers answer
        wait_for(lambda: server.service.jsonl.active_handlers == 0)
        with httpx.Client(base_url=server.url, timeout=10) as c:
            assert wait_for(lambda: c.get("/healthz").status_code == 200)


def test_slow_headers_are_cut_off(app):
    with ServiceThread(app, embed_worker=False, header_timeout=0.5) as server:
        s = socket.create_connection(("127.0.0.1", port(server)), timeout=10)
        t0 = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for _ in range(20):  # a header byte every 0.1 s, never finishing
                s.sendall(b"X")
                time.sleep(0.1)
            assert read_all(s) == b""
        except (BrokenPipeError, ConnectionResetError):
            pass
        took = time.monotonic() - t0
        s.close()
        assert took < 3.0, f"a slowloris connection lived {took:.1f}s"
        # and an idle connection that never sends a byte is cut too
        idle = socket.create_connection(("127.0.0.1", port(server)), timeout=10)
        assert read_all(idle) == b""
        idle.close()


def test_partial_lines_cannot_buffer_past_the_budget(app):
    async def scenario() -> None:
        budget = ByteBudget(1_000_000)

        async def db(fn, *args):  # type: ignore[no-untyped-def]
            return await asyncio.to_thread(fn, *args)

        server = await JsonLinesServer(app, db, port=0, budget=budget).start()
        _, first = await asyncio.open_connection("127.0.0.1", server.port)
        first.write(b"x" * 700_000)  # no newline: held while it waits for the rest
        await first.drain()
        while budget.held < 700_000:
            await asyncio.sleep(0.01)
        reader, second = await asyncio.open_connection("127.0.0.1", server.port)
        second.write(b"y" * 700_000)
        await second.drain()
        reply = json.loads(await reader.readline())
        assert reply["error"]["code"] == "server_busy"
        first.close()
        second.close()
        await server.close(1.0)
        assert budget.held == 0

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_bad_webhook_url_is_refused_at_start_and_one_failing_delivery_stops_nothing(
    app, store_url
):
    with pytest.raises(ValueError, match="not a URL"):
        Dispatcher(app, ["http://[::1"])
    with pytest.raises(ValueError, match="http"):
        Dispatcher(app, ["ftp://example.com/x"])
    bad = cli("worker", "--db", store_url, "--webhook", "http://[::1", check=False)
    assert bad.returncode == 2 and "webhook URL" in bad.stderr
    good, broken = Receiver(), Receiver()
    try:
        ids = [app.submit("t.echo", {"value": i}) for i in range(3)]
        for t in ids:
            app.run(t)
        d = Dispatcher(app, [broken.url, good.url])
        real_stream = d._client.stream

        def stream(method, url, **kw):  # type: ignore[no-untyped-def]
            if url == broken.url:
                raise RuntimeError("not an httpx error")
            return real_stream(method, url, **kw)

        d._client.stream = stream  # type: ignore[method-assign]
        d.start()
        try:
            wait_for(lambda: len(good.logical()) == 3)
            assert d._thread is not None and d._thread.is_alive()
        finally:
            d.stop()
        assert app.store.counters()["delivery_failures"] >= 3
    finally:
        good.close()
        broken.close()


def test_a_password_in_the_database_url_is_never_printed():
    url = "postgresql://tasklab:hunter2@127.0.0.1:1/nowhere"
    out = cli("status", "x", "--db", url, check=False)  # the pool tries for 10 s
    assert out.returncode != 0
    assert "hunter2" not in out.stderr + out.stdout and "***" in out.stderr


# ---- doorbells -----------------------------------------------------------------------


SPOOF = """
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
sent = 0
for _ in range(200):
    try:
        s.sendto(b"!", sys.argv[1].encode().replace(b"@", b"\\0", 1))
        sent += 1
    except BlockingIOError:
        break  # the receiver's queue is full
print("sent" if sent else "none", flush=True)
"""


@pytest.mark.skipif(os.getuid() != 0, reason="sending as another user needs root")
def test_a_doorbell_ignores_rings_from_other_users(tmp_path):
    db = tmp_path / "x.db"
    db.touch()
    bell = Doorbell(db)
    sock = bell.listen()
    assert sock is not None and bell._own is not None
    try:
        trusted = trusted_uids(db)
        address = "@" + bell._address(bell._own)[1:]
        spoof = subprocess.run(
            [sys.executable, "-c", SPOOF, address], capture_output=True, text=True, timeout=30
        )
        assert spoof.stdout.strip() == "sent", spoof.stderr
        assert wait_ring(sock, 1.0, trusted) is None  # read and dropped
        assert wait_ring(sock, 0.05, trusted) is False  # nothing left behind
        bell.interrupt()  # our own ring counts
        assert wait_ring(sock, 1.0, trusted) is True
    finally:
        bell.unlisten(sock)
        bell.close()


def test_the_bells_directory_is_not_world_writable_under_umask_000(tmp_path):
    db = tmp_path / "y.db"
    old = os.umask(0)
    try:
        db.touch()
        bell = Doorbell(db)
        sock = bell.listen()
    finally:
        os.umask(old)
    try:
        mode = stat.S_IMODE(os.stat(bell.dir).st_mode)
        assert mode & 0o007 == 0, oct(mode)
        marker = stat.S_IMODE(os.stat(bell.dir / str(bell._own)).st_mode)
        assert marker & 0o022 == 0, oct(marker)
    finally:
        bell.unlisten(sock)
        bell.close()


__all__ = ["Path", "threading"]
