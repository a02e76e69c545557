"""SPEC §7 on every interface, over real sockets and a real CLI process, on both
stores: the submit fields, the queue and schedule endpoints and commands, and bad
input answered with a clear error that stores nothing."""

from __future__ import annotations

import json

import httpx
import pytest

from tasklab.edges.jsonl.server import JsonLinesServer
from tests.acceptance.test_sigkill import APP, cli
from tests.helpers.servers import ServiceThread
from tests.integration.test_jsonl import db, request, run


@pytest.fixture
def client(app):
    with (
        ServiceThread(app, embed_worker=False) as server,
        httpx.Client(base_url=server.url, timeout=10) as c,
    ):
        yield c


def test_http_submit_fields_and_snapshot(client, app):
    r = client.post(
        "/tasks",
        json={
            "task": "t.echo",
            "payload": {"value": 1},
            "queue": "mail",
            "priority": 7,
            "delay": 60,
            "unique_key": "u1",
        },
    )
    assert r.status_code == 201, r.text
    snap = r.json()
    assert (snap["queue"], snap["priority"], snap["unique_key"]) == ("mail", 7, "u1")
    assert snap["run_after"] > snap["created_at"]
    again = client.post("/tasks", json={"task": "t.echo", "payload": {}, "unique_key": "u1"})
    assert again.status_code == 200 and again.json()["id"] == snap["id"]
    at = client.post(
        "/tasks", json={"task": "t.echo", "payload": {}, "run_at": "2030-01-01T00:00:00+01:00"}
    )
    assert at.status_code == 201 and at.json()["run_after"] == "2029-12-31T23:00:00.000Z"
    listed = client.get("/tasks").json()["items"]
    assert {i["queue"] for i in listed} == {"mail", "default"}


@pytest.mark.parametrize(
    "extra",
    [
        {"priority": 101},
        {"priority": "high"},
        {"queue": "a b"},
        {"delay": -5},
        {"run_at": "2030-01-01T00:00:00"},
        {"run_at": "tomorrow"},
        {"run_at": "2030-01-01T00:00:00Z", "delay": 1},
        {"concurrency_key": "k"},
        {"unique_key": ""},
    ],
)
def test_http_bad_submit_fields_are_422_and_store_nothing(client, app, extra):
    r = client.post("/tasks", json={"task": "t.echo", "payload": {}, **extra})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_payload", r.text
    assert r.json()["error"]["message"]
    assert sum(app.counts().values()) == 0


def test_http_queue_endpoints(client, app):
    app.submit("t.echo", {"value": 1}, queue="mail")
    r = client.put("/queues/mail", json={"concurrency": 2, "rate": "100/s"})
    assert r.status_code == 200, r.text
    assert (r.json()["concurrency"], r.json()["rate"], r.json()["queued"]) == (2, "100/s", 1)
    assert client.put("/queues/mail", json={"rate": None}).json()["concurrency"] == 2
    assert client.post("/queues/mail/pause").json()["paused"] is True
    assert client.get("/queues").json()["items"][0]["paused"] is True
    assert client.post("/queues/mail/resume").json()["paused"] is False
    for body in ({"rate": "fast"}, {"concurrency": 0}, {"concurrency": "2"}, {"limit": 1}, [1]):
        bad = client.put("/queues/mail", json=body)
        assert bad.status_code == 422, (body, bad.text)
    assert client.post("/queues/bad%20name/pause").status_code == 422
    assert client.get("/queues").json()["items"][0]["concurrency"] == 2  # unchanged


def test_http_schedules(client, app):
    app.schedule("nightly", "t.echo", cron="0 3 * * *", payload={"value": 1})
    (doc,) = client.get("/schedules").json()["items"]
    assert (doc["name"], doc["task"], doc["expression"]) == ("nightly", "t.echo", "0 3 * * *")
    assert doc["next_tick"] and doc["last_task_id"] is None
    assert client.delete("/schedules/nightly").status_code == 204
    assert client.delete("/schedules/nightly").status_code == 404
    assert client.get("/schedules").json()["items"] == []


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"priority": 500}, "invalid_payload"),
        ({"run_at": "2030-01-01T00:00:00"}, "invalid_payload"),
        ({"delay": "soon"}, "invalid_payload"),
        ({"queue": "ümlaut"}, "invalid_payload"),
    ],
)
def test_jsonl_bad_submit_fields(app, fields, code):
    reply = _jsonl_submit(app, fields)
    assert reply["ok"] is False and reply["error"]["code"] == code
    assert sum(app.counts().values()) == 0


def test_jsonl_submit_fields(app):
    reply = _jsonl_submit(app, {"queue": "q1", "priority": -3})
    assert reply["ok"] is True
    assert (reply["task"]["queue"], reply["task"]["priority"]) == ("q1", -3)


def test_cli_queues_schedules_and_bad_input(store_url):
    db = ["--db", store_url]
    tid = cli(
        "submit",
        "t.echo",
        "--payload",
        "{}",
        "--queue",
        "mail",
        "--priority",
        "5",
        "--delay",
        "5m",
        *db,
        *APP,
    ).stdout.strip()
    shown = json.loads(cli("status", tid, *db, "--json", *APP).stdout)
    assert (shown["queue"], shown["priority"]) == ("mail", 5)
    out = cli("queues", "set", "mail", "--concurrency", "3", "--rate", "10/s", *db, "--json").stdout
    assert json.loads(out)[0]["concurrency"] == 3
    assert cli("queues", "pause", "mail", *db).returncode == 0
    listed = json.loads(cli("queues", "list", *db, "--json").stdout)
    assert listed[0]["paused"] is True and listed[0]["queued"] == 1
    assert "mail" in cli("queues", "list", *db).stdout
    assert cli("queues", "resume", "mail", *db).returncode == 0
    assert cli("queues", "set", "mail", "--rate", "none", *db).returncode == 0
    for bad in (
        ["submit", "t.echo", "--delay", "-5s", *db, *APP],
        ["submit", "t.echo", "--run-at", "2030-01-01T00:00:00", *db, *APP],
        ["submit", "t.echo", "--priority", "1000", *db, *APP],
        ["submit", "t.echo", "--queue", "a b", *db, *APP],
        ["queues", "set", "mail", "--rate", "fast", *db],
        ["queues", "set", "mail", "--concurrency", "x", *db],
        ["queues", "set", "mail", *db],
        ["queues", "pause", "a b", *db],
        ["schedules", "remove", "nope", *db],
    ):
        done = cli(*bad, check=False)
        assert done.returncode == 2, (bad, done.stderr)
        assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert json.loads(cli("stats", *db, "--json").stdout)["counts"]["queued"] == 1
    assert json.loads(cli("schedules", "list", *db, "--json").stdout) == []


def test_per_queue_metrics(client, app):
    app.submit_many("t.echo", [{"value": i} for i in range(3)], queue="mail")
    app.pause("mail")
    (claimed,) = app.store.claim(["t.echo"], 1, "w", 30.0, queues=["mail", "default"]) or [None]
    text = client.get("/metrics").text
    assert 'tasklab_queue_queued{queue="mail"} 3.0' in text
    assert 'tasklab_queue_paused{queue="mail"} 1.0' in text
    assert 'tasklab_queue_claims_total{queue="mail"} 0.0' in text
    assert claimed is None  # paused: nothing claimed
    app.resume("mail")
    app.store.forget_queue_view()
    assert len(app.store.claim(["t.echo"], 2, "w", 30.0)) == 2
    text = client.get("/metrics").text
    assert 'tasklab_queue_running{queue="mail"} 2.0' in text
    assert 'tasklab_queue_claims_total{queue="mail"} 2.0' in text


def _jsonl_submit(app, fields: dict) -> dict:  # type: ignore[no-untyped-def]
    """One submit frame with these fields over a real socket; the reply."""
    line = json.dumps({"op": "submit", "task": "t.echo", "payload": {}, **fields}).encode()

    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0).start()
        try:
            return await request(server.port, line + b"\n")
        finally:
            await server.close(0)

    return json.loads(run(scenario()))
