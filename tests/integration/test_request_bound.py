"""Request-bound tasks (`POST /tasks/stream`) under load, at their limits and at
shutdown — over real loopback sockets, on both stores."""

from __future__ import annotations

import json
import threading
import time

import httpx

from tasklab import State
from tasklab.edges.watching import sse_events
from tests.conftest import make_app, wait_for
from tests.helpers.sample_tasks import latch, started
from tests.helpers.servers import ServiceThread


def open_stream(client: httpx.Client, name: str) -> tuple[httpx.Response, str]:
    """A request-bound `t.hold_checkpoint` whose body has started."""
    req = client.build_request(
        "POST", "/tasks/stream", json={"task": "t.hold_checkpoint", "payload": {"name": name}}
    )
    resp = client.send(req, stream=True)
    assert resp.status_code == 200, resp.read()
    assert started(name).wait(10)
    return resp, resp.headers["tasklab-task-id"]


def test_many_sync_streams_leave_the_api_answering_and_every_hang_up_cancels(app, store_url):
    # more open streams than the database thread limiter (32) has slots
    n = 33
    with ServiceThread(app, concurrency=n, embed_worker=False) as server:
        clients = [httpx.Client(base_url=server.url, timeout=10) for _ in range(n)]
        streams = [open_stream(c, f"many-{i}") for i, c in enumerate(clients)]
        with httpx.Client(base_url=server.url, timeout=10) as api:
            t0 = time.monotonic()
            counts = api.get("/tasks/counts")
            took = time.monotonic() - t0
        assert counts.status_code == 200 and counts.json()["running"] == n
        # generous (a slow 2-core machine): the starved server took 13.5 s here
        assert took < 3.0, f"GET /tasks/counts took {took:.1f}s with {n} open streams"
        for resp, _ in streams:  # every client hangs up
            resp.close()
        for c in clients:
            c.close()
        fresh = make_app(store_url)  # verify from a new connection
        ids = [tid for _, tid in streams]
        wait_for(lambda: all(fresh.query(t).terminal for t in ids), timeout=30)
        ends = {(fresh.query(t).state, fresh.query(t).cancel_reason) for t in ids}
        fresh.close()
    assert {(s.value, r.value if r else None) for s, r in ends} == {
        ("cancelled", "client_disconnected")
    }


def test_request_bound_work_beyond_concurrency_is_refused_before_anything_is_made(app):
    with (
        ServiceThread(app, concurrency=1, embed_worker=False) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        resp, _tid = open_stream(client, "conc-1")
        second = client.post(
            "/tasks/stream", json={"task": "t.hold_checkpoint", "payload": {"name": "conc-2"}}
        )
        assert second.status_code == 503 and second.json()["error"]["code"] == "queue_full"
        assert sum(app.counts().values()) == 1  # the refused one created nothing
        latch("conc-1").set()
        resp.close()


def test_a_stream_limit_refusal_creates_no_task(app):
    with (
        ServiceThread(app, max_streams=1, concurrency=4, embed_worker=False) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        resp, _tid = open_stream(client, "lim-1")
        for _ in range(3):  # a client retrying
            again = client.post(
                "/tasks/stream", json={"task": "t.hold_checkpoint", "payload": {"name": "lim-2"}}
            )
            assert again.status_code == 503
            assert again.json()["error"]["code"] == "too_many_streams"
        assert sum(app.counts().values()) == 1
        latch("lim-1").set()
        resp.close()


def test_at_shutdown_a_request_bound_stream_ends_with_its_committed_snapshot(app, store_url):
    server = ServiceThread(app, embed_worker=False, drain_timeout=5.0).__enter__()
    client = httpx.Client(base_url=server.url, timeout=10)
    resp, tid = open_stream(client, "shut-1")
    got: dict = {}

    def follow() -> None:
        for etype, data in sse_events(resp.iter_lines()):
            if etype == "end":
                got["end"] = json.loads(data)

    reader = threading.Thread(target=follow)
    reader.start()
    server.stop()
    reader.join(10)
    client.close()
    assert "end" in got, "the stream was cut without its end event"
    assert got["end"]["state"] == "cancelled" and got["end"]["cancel_reason"] == "shutdown"
    fresh = make_app(store_url)
    assert fresh.query(tid).state is State.CANCELLED
    fresh.close()
