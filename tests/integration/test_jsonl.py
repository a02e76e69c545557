"""The JSON-lines server over real sockets: seed 000's shutdown cases, bad input,
random bytes."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasklab import State
from tasklab.edges.jsonl.server import JsonLinesServer


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 30))


async def db(fn, *args):  # type: ignore[no-untyped-def]
    return await asyncio.to_thread(fn, *args)


async def request(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data


def test_complete_submit_during_normal_close_is_answered(app):
    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0).start()
        line = json.dumps({"op": "submit", "task": "t.echo", "payload": {"value": 1}})
        reply_task = asyncio.create_task(request(server.port, line.encode() + b"\n"))
        while server.active_handlers == 0:
            await asyncio.sleep(0.001)
        report = await server.close(drain_timeout=5)
        return json.loads(await reply_task), report

    reply, report = run(scenario())
    assert reply["ok"] is True and reply["task"]["state"] == "queued"
    assert report["cancelled_handlers"] == 0
    assert app.query(reply["id"]).state is State.QUEUED  # closing never touches it


def test_half_sent_line_with_zero_drain_is_cancelled(app):
    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0, read_timeout=30).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b'{"op": "submit", "task": "t.ec')
        await writer.drain()
        while server.active_handlers == 0:
            await asyncio.sleep(0.001)
        t0 = asyncio.get_running_loop().time()
        report = await server.close(drain_timeout=0)
        elapsed = asyncio.get_running_loop().time() - t0
        got = await reader.read()  # EOF
        writer.close()
        await writer.wait_closed()
        refused = False
        try:
            await asyncio.open_connection("127.0.0.1", server.port)
        except OSError:
            refused = True
        return report, elapsed, got, refused, server.active_handlers

    report, elapsed, got, refused, active = run(scenario())
    assert report["cancelled_handlers"] == 1 and elapsed < 1.0
    assert got == b"" and refused and active == 0
    assert sum(app.counts().values()) == 0


def test_late_handler_after_the_gate_submits_nothing(app):
    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0).start()
        entered, release = asyncio.Event(), asyncio.Event()

        async def barrier() -> None:
            entered.set()
            await release.wait()

        server.before_handle = barrier
        line = json.dumps({"op": "submit", "task": "t.echo", "payload": {"value": 1}})
        reply_task = asyncio.create_task(request(server.port, line.encode() + b"\n"))
        await entered.wait()  # accepted by the loop, not yet handled
        closing = asyncio.create_task(server.close(drain_timeout=5))
        await asyncio.sleep(0.05)  # the gate is closed now
        release.set()
        return await reply_task, await closing

    reply, report = run(scenario())
    assert reply == b""  # closed without reading or answering
    assert report["cancelled_handlers"] == 0
    assert sum(app.counts().values()) == 0


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"not json\n", "bad_request"),
        (b"[1,2]\n", "bad_request"),
        (b'{"op": "explode"}\n', "bad_request"),
        (b'{"op": "submit"}\n', "bad_request"),
        (b'{"op": "submit", "task": "nope", "payload": {}}\n', "unknown_task"),
        (b'{"op": "submit", "task": "t.echo", "payload": [1]}\n', "invalid_payload"),
        (b'{"op": "submit", "task": "t.echo", "payload": {"x": 1}}\n', "invalid_payload"),
        (b'{"op": "query", "id": "nope"}\n', "not_found"),
        (b'{"op": "cancel"}\n', "bad_request"),
        (b'\xff\xfe{"op": "query"}\n', "bad_request"),
        (
            b'{"op": "submit", "task": "t.echo", "payload": {"value": "'
            + b"x" * 2_000_000
            + b'"}}\n',
            "too_large",
        ),
    ],
)
def test_bad_lines_get_error_objects_and_store_nothing(app, line, code):
    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0).start()
        try:
            return await request(server.port, line)
        finally:
            await server.close(0)

    reply = json.loads(run(scenario()))
    assert reply["ok"] is False and reply["error"]["code"] == code
    assert reply["error"]["message"]
    assert sum(app.counts().values()) == 0


def test_slow_client_past_the_read_timeout(app):
    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0, read_timeout=0.2).start()
        try:
            return await request(server.port, b'{"op": "query"')
        finally:
            await server.close(0)

    reply = json.loads(run(scenario()))
    assert reply["error"]["code"] == "read_timeout"


def test_token_is_required_when_set(app):
    async def scenario(line: bytes):  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0, token="s3cret").start()
        try:
            return json.loads(await request(server.port, line))
        finally:
            await server.close(0)

    base = {"op": "submit", "task": "t.echo", "payload": {"value": 1}}
    denied = run(scenario(json.dumps(base).encode() + b"\n"))
    assert denied["error"]["code"] == "unauthorized"
    wrong = run(scenario(json.dumps({**base, "token": "nope"}).encode() + b"\n"))
    assert wrong["error"]["code"] == "unauthorized"
    assert sum(app.counts().values()) == 0
    ok = run(scenario(json.dumps({**base, "token": "s3cret"}).encode() + b"\n"))
    assert ok["ok"] is True


def test_query_and_cancel_ops(app):
    tid = app.submit("t.echo", {"value": 1})

    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0).start()
        try:
            q = json.loads(
                await request(server.port, json.dumps({"op": "query", "id": tid}).encode() + b"\n")
            )
            c = json.loads(
                await request(server.port, json.dumps({"op": "cancel", "id": tid}).encode() + b"\n")
            )
            return q, c
        finally:
            await server.close(0)

    q, c = run(scenario())
    assert q["task"]["state"] == "queued"
    assert c["request_accepted"] is True and c["task"]["state"] == "cancelled"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(junk=st.binary(max_size=300))
def test_random_bytes_never_crash_the_server_or_change_the_store(sqlite_app, junk):
    app, server_box = sqlite_app
    port = server_box["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(junk + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if data:
        reply = json.loads(data)
        assert reply["ok"] is False or reply.get("task", {}).get("task") is not None
    assert sum(app.counts().values()) == server_box["submitted"](data)


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory):  # type: ignore[no-untyped-def]
    import threading

    from tests.conftest import make_app

    app = make_app(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'f.db'}")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(
        JsonLinesServer(app, db, port=0, read_timeout=1).start(), loop
    ).result()
    created = {"n": 0}

    def submitted(data: bytes) -> int:
        # random bytes can, in principle, spell a valid submit; count those honestly
        if data and json.loads(data).get("ok") and "id" in json.loads(data):
            created["n"] += 1
        return created["n"]

    yield app, {"port": server.port, "submitted": submitted}
    asyncio.run_coroutine_threadsafe(server.close(0), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
    app.close()
