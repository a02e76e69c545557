"""The HTTP API over real loopback sockets, on both stores."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tasklab import State
from tasklab.edges.watching import sse_events
from tests.conftest import make_app, wait_for
from tests.helpers.servers import ServiceThread


@pytest.fixture
def server(app):
    with ServiceThread(app) as s:
        yield s


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def read_stream(client, url, headers=None, stop_after=None, method="GET", body=None):
    """(events, end snapshot or None) — stops early after `stop_after` events."""
    events, end = [], None
    with client.stream(method, url, headers=headers or {}, json=body) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for etype, data in sse_events(resp.iter_lines()):
            doc = json.loads(data)
            if etype == "end":
                end = doc
                break
            events.append(doc)
            if stop_after is not None and len(events) >= stop_after:
                break
    return events, end


def test_submit_query_list_counts_cancel(client, app):
    r = client.post("/tasks", json={"task": "t.echo", "payload": {"value": 1}})
    assert r.status_code == 201
    snap = r.json()
    assert snap["state"] in ("queued", "running", "succeeded") and snap["task"] == "t.echo"
    same = client.post(
        "/tasks",
        json={"task": "t.echo", "payload": {"value": 2}},
        headers={"Idempotency-Key": "k1"},
    )
    again = client.post(
        "/tasks", json={"task": "t.echo", "payload": {"value": 2}, "idempotency_key": "k1"}
    )
    assert (same.status_code, again.status_code) == (201, 200)
    assert same.json()["id"] == again.json()["id"]
    conflict = client.post(
        "/tasks", json={"task": "t.echo", "payload": {"value": 3}, "idempotency_key": "k1"}
    )
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_conflict"
    assert client.get(f"/tasks/{snap['id']}").json()["id"] == snap["id"]
    wait_for(lambda: client.get(f"/tasks/{snap['id']}").json()["state"] == "succeeded")
    page = client.get("/tasks", params={"limit": 1}).json()
    assert len(page["items"]) == 1 and page["next_cursor"] and "payload" not in page["items"][0]
    rest = client.get("/tasks", params={"limit": 10, "cursor": page["next_cursor"]}).json()
    assert {i["id"] for i in rest["items"]} | {page["items"][0]["id"]} == {
        snap["id"],
        same.json()["id"],
    }
    assert set(client.get("/tasks/counts").json()) == {s.value for s in State}
    out = client.post(f"/tasks/{snap['id']}/cancel").json()
    assert out["request_accepted"] is False and out["task"]["state"] == "succeeded"
    by_state = client.get("/tasks", params={"state": "succeeded"}).json()["items"]
    assert all(i["state"] == "succeeded" for i in by_state)


def test_task_types_and_openapi(client):
    types = {t["name"]: t for t in client.get("/task-types").json()["items"]}
    assert types["wordfreq"]["schema"]["properties"]["top"]["default"] == 10
    assert "t.echo" in types
    spec = client.get("/openapi.json").json()
    for path in [
        "/tasks",
        "/tasks/{task_id}",
        "/tasks/{task_id}/events",
        "/tasks/stream",
        "/tasks/{task_id}/cancel",
        "/tasks/counts",
        "/task-types",
    ]:
        assert path in spec["paths"]
    assert client.get("/healthz").json()["ok"] is True
    metrics = client.get("/metrics").text
    assert "tasklab_tasks{" in metrics and "tasklab_rejected_stale_writes" in metrics


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{bad", 422, "bad_request"),
        (b"\xff\xfe", 422, "bad_request"),
        (b"[]", 422, "bad_request"),
        (b'{"payload": {}}', 422, "bad_request"),
        (b'{"task": "nope", "payload": {}}', 422, "unknown_task"),
        (b'{"task": "t.echo", "payload": [1]}', 422, "invalid_payload"),
        (b'{"task": "t.echo", "payload": {"zzz": 1}}', 422, "invalid_payload"),
        (b'{"task": "wordfreq", "payload": {"path": "../../etc/passwd"}}', 422, "invalid_payload"),
        (
            b'{"task": "t.echo", "payload": {"value": "' + b"x" * (1024 * 1024 + 10) + b'"}}',
            422,
            "invalid_payload",
        ),  # fits the body limit, not the payload limit
        (
            b'{"task": "t.echo", "payload": {"value": "' + b"x" * (1024 * 1024 + 8192) + b'"}}',
            413,
            "too_large",
        ),
    ],
)
def test_bad_bodies_get_clear_errors_and_store_nothing(client, app, body, status, code):
    r = client.post("/tasks", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]
    assert sum(app.counts().values()) == 0


def test_unknown_ids_are_404(client):
    assert client.get("/tasks/nope").status_code == 404
    assert client.post("/tasks/nope/cancel").json()["error"]["code"] == "not_found"
    assert client.get("/tasks/nope/events").status_code == 404
    assert client.get("/tasks", params={"state": "weird"}).status_code == 422
    assert client.get("/tasks", params={"cursor": "%%%"}).status_code == 422


def test_sse_replays_then_streams_live_then_end(client, app):
    text = " ".join(f"w{i}" for i in range(40))
    tid = client.post(
        "/tasks", json={"task": "stream_text", "payload": {"text": text, "tokens_per_second": 200}}
    ).json()["id"]
    events, end = read_stream(client, f"/tasks/{tid}/events")
    assert end is not None and end["state"] == "succeeded" and end["result"] == text
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "attempt" and events[0]["attempt"] == 1
    assert "".join(e["data"]["text"] for e in events if e["type"] == "chunk") == text
    # resume: after seq 2 by header and by query, nothing twice, nothing missing
    by_header, _ = read_stream(client, f"/tasks/{tid}/events", {"Last-Event-ID": "2"})
    by_query, _ = read_stream(client, f"/tasks/{tid}/events?after=2")
    assert by_header == by_query == events[2:]


def test_sse_resume_mid_stream_has_no_gap_and_no_duplicate(client, app):
    text = " ".join(f"t{i}" for i in range(60))
    tid = client.post(
        "/tasks", json={"task": "stream_text", "payload": {"text": text, "tokens_per_second": 100}}
    ).json()["id"]
    first, end = read_stream(client, f"/tasks/{tid}/events", stop_after=3)
    assert end is None
    rest, end = read_stream(
        client, f"/tasks/{tid}/events", {"Last-Event-ID": str(first[-1]["seq"])}
    )
    seqs = [e["seq"] for e in first + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert end["state"] == "succeeded"
    assert "".join(e["data"]["text"] for e in first + rest if e["type"] == "chunk") == text


def test_live_events_reach_a_server_that_does_not_run_the_task(store_url):
    server_app, worker_app = make_app(store_url), make_app(store_url)
    with (
        ServiceThread(server_app, embed_worker=False) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        tid = client.post(
            "/tasks",
            json={
                "task": "stream_text",
                "payload": {"text": "a b c d e f g h", "tokens_per_second": 40},
            },
        ).json()["id"]
        with worker_app.worker(concurrency=1):
            events, end = read_stream(client, f"/tasks/{tid}/events")
    assert end["state"] == "succeeded" and len(events) >= 2
    server_app.close()
    worker_app.close()


def test_request_bound_disconnect_cancels_and_keeps_partial_events(client, app, store_url):
    text = " ".join(f"x{i}" for i in range(200))
    body = {"task": "stream_text", "payload": {"text": text, "tokens_per_second": 50}}
    with client.stream("POST", "/tasks/stream", json=body) as resp:
        tid = resp.headers["tasklab-task-id"]
        lines = resp.iter_lines()
        seen = []
        for _etype, data in sse_events(lines):
            seen.append(json.loads(data))
            if len(seen) >= 3:
                break
    # the connection is closed here: the task must end cancelled/client_disconnected
    fresh = make_app(store_url)  # verify from a new connection
    snap = wait_for(lambda: (s := fresh.query(tid)).terminal and s)
    assert snap.state is State.CANCELLED and snap.cancel_reason.value == "client_disconnected"
    kept = "".join(e.data["text"] for e in fresh.events(tid) if e.type == "chunk")
    assert kept and text.startswith(kept) and kept != text
    fresh.close()


def test_request_bound_success_then_disconnect_stays_succeeded(client, app):
    body = {"task": "stream_text", "payload": {"text": "one two", "tokens_per_second": 1000}}
    _events, end = read_stream(client, "/tasks/stream", method="POST", body=body)
    assert end["state"] == "succeeded"
    time.sleep(0.2)  # the client is gone now
    assert app.query(end["id"]).state is State.SUCCEEDED
    assert app.query(end["id"]).result == "one two"


def test_stream_limit_gives_503(app):
    with (
        ServiceThread(app, max_streams=1) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        tid = client.post("/tasks", json={"task": "t.hold", "payload": {"name": "lim"}}).json()[
            "id"
        ]
        with client.stream("GET", f"/tasks/{tid}/events") as first:
            assert first.status_code == 200
            second = client.get(f"/tasks/{tid}/events")
            assert second.status_code == 503
            assert second.json()["error"]["code"] == "too_many_streams"
        from tests.helpers.sample_tasks import latch

        latch("lim").set()


def test_server_shutdown_ends_open_streams_cleanly_and_keeps_queued_tasks(app):
    server = ServiceThread(app, embed_worker=False).__enter__()
    client = httpx.Client(base_url=server.url, timeout=10)
    tid = client.post("/tasks", json={"task": "t.echo", "payload": {"value": 1}}).json()["id"]
    result: dict = {}

    def follow() -> None:
        result["events"], result["end"] = read_stream(client, f"/tasks/{tid}/events")

    t = threading.Thread(target=follow)
    t.start()
    wait_for(lambda: server.service.state.streams.open == 1)  # the stream is open
    report = server.stop()
    t.join(10)
    assert not t.is_alive()
    assert result["end"] is None  # ended without `end`: the client reconnects later
    assert app.query(tid).state is State.QUEUED
    assert report["jsonl"]["cancelled_handlers"] == 0
    client.close()


def test_token_auth(app):
    with (
        ServiceThread(app, token="s3cret") as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        assert client.get("/healthz").status_code == 200
        assert client.get("/").status_code == 200  # the page itself carries no data
        denied = client.post("/tasks", json={"task": "t.echo", "payload": {"value": 1}})
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "unauthorized"
        assert client.get("/tasks").status_code == 401
        assert client.get("/metrics").status_code == 401
        assert client.get("/tasks", headers={"Authorization": "Bearer nope"}).status_code == 401
        ok = client.get("/tasks", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert client.post("/ui/login", json={"token": "wrong"}).status_code == 401
        login = client.post("/ui/login", json={"token": "s3cret"})
        assert login.status_code == 200
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert client.get("/tasks").status_code == 200  # the session cookie now
        assert sum(app.counts().values()) == 0


def test_non_loopback_bind_needs_a_token(app):
    from tasklab.edges.serve import ServeOptions, check_binding

    with pytest.raises(ValueError, match="TASKLAB_TOKEN"):
        check_binding(ServeOptions(host="0.0.0.0"))
    check_binding(ServeOptions(host="0.0.0.0", token="t"))
    check_binding(ServeOptions(host="::1"))


def test_a_serving_process_counts_as_an_executor_even_without_a_worker(app):
    from tasklab import WorkerAlive

    with ServiceThread(app, embed_worker=False):
        with pytest.raises(WorkerAlive):
            app.recover_running()
    assert app.recover_running() == []


def test_a_submit_whose_answer_was_lost_is_503_and_a_keyed_retry_finds_it(client, app):
    """The commit happened, the answer did not come back (a broken session): the client
    is told to try again, and the same idempotency key makes that retry safe."""
    body = {"task": "t.echo", "payload": {"value": 5}, "idempotency_key": "order-5"}
    app.store.faults.arm("submit_answer")
    lost = client.post("/tasks", json=body)
    assert lost.status_code == 503 and lost.headers["retry-after"] == "1"
    assert lost.json()["error"]["code"] == "store_error"
    retry = client.post("/tasks", json=body)
    assert retry.status_code == 200  # it was there: found, not made again
    page = client.get("/tasks").json()
    assert [item["id"] for item in page["items"]] == [retry.json()["id"]]


def test_a_client_that_hangs_up_after_sending_still_gets_its_task(app, store_url):
    """Over a real socket: the whole request is sent, the client closes before reading
    the answer — the task is committed all the same (the answer is lost, not the task)."""
    import socket

    with ServiceThread(app, embed_worker=False) as server:
        port = int(server.url.rsplit(":", 1)[1])
        body = json.dumps({"task": "t.echo", "payload": {"value": "hung up"}}).encode()
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(
                b"POST /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        fresh = make_app(store_url)  # verify from a new connection
        try:
            (item,) = wait_for(lambda: fresh.list(limit=10).items)
            assert fresh.query(item.id).payload == {"value": "hung up"}
        finally:
            fresh.close()


def test_new_submissions_answer_503_while_the_server_shuts_down(app):
    with (
        ServiceThread(app, embed_worker=False) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        server.loop.call_soon_threadsafe(server.service.state.closing.set)
        wait_for(lambda: client.get("/healthz").json()["closing"])
        for path in ("/tasks", "/tasks/stream"):
            r = client.post(path, json={"task": "t.echo", "payload": {"value": 1}})
            assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
        assert sum(app.counts().values()) == 0


@pytest.mark.parametrize("taken", ["http", "jsonl"])
def test_a_port_taken_fails_the_start_and_leaves_nothing_running(app, taken):
    """A listener is bound before anything starts, and a start that fails undoes what
    it began. Before, with the HTTP port taken, the embedded worker's claim loop and
    the scheduler went on running beside the error and the server's executor presence
    stayed held (exclusive recovery refused: WorkerAlive)."""
    import asyncio
    import socket

    from tasklab.edges.serve import ServeOptions, Service

    held = socket.create_server(("127.0.0.1", 0))
    port = held.getsockname()[1]
    before = {t.name for t in threading.enumerate()}
    opts = ServeOptions(
        port=port if taken == "http" else 0,
        jsonl_port=port if taken == "jsonl" else 0,
        concurrency=2,
    )
    try:
        with pytest.raises(OSError, match=f"bind on address \\('127.0.0.1', {port}\\)"):
            asyncio.run(Service(app, opts).start())
    finally:
        held.close()
    wait_for(lambda: {t.name for t in threading.enumerate()} <= before, timeout=5)
    assert app.recover_running() == []  # WorkerAlive while a presence is left behind
