"""Durable functions over HTTP and the CLI, on both stores: signals (201, 200 for the
same name, 409 for an ended task, 404, 422), children by `parent_id`, the journal,
and an SSE stream of a task that waits: it stays open across the wait and goes on,
gapless, when the task resumes."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tasklab.edges.watching import sse_events
from tests.acceptance.test_sigkill import APP, cli
from tests.conftest import wait_for
from tests.helpers.servers import ServiceThread


@pytest.fixture
def served(app):
    with (
        ServiceThread(app, concurrency=4) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        yield app, client


def test_signal_endpoint_children_and_journal(served):
    app, client = served
    tid = client.post("/tasks", json={"task": "t.flow", "payload": {"n": 2}}).json()["id"]
    wait_for(lambda: (app.query(tid).wait or {}).get("kind") == "signal", 10)
    shown = client.get(f"/tasks/{tid}").json()
    assert shown["state"] == "waiting" and shown["wait"]["signal"] == "go"
    first = client.post(f"/tasks/{tid}/signals/go", json={"data": {"ok": 1}})
    assert first.status_code == 201 and first.json()["created"] is True
    again = client.post(f"/tasks/{tid}/signals/go", json={"data": {"ok": 2}})
    assert again.status_code == 200 and again.json()["data"] == {"ok": 1}
    wait_for(lambda: app.query(tid).terminal, 10)
    assert app.query(tid).result == ["first", {"ok": 1}, [0, 10]]
    ended = client.post(f"/tasks/{tid}/signals/late", json={"data": None})
    assert ended.status_code == 409 and ended.json()["error"]["code"] == "task_terminal"
    assert client.post("/tasks/nope/signals/go").status_code == 404
    for bad in ({"nope": 1}, [1]):
        assert client.post(f"/tasks/{tid}/signals/x", json=bad).status_code == 422
    assert client.post(f"/tasks/{tid}/signals/bad%20name").status_code == 422
    kids = client.get("/tasks", params={"parent_id": tid}).json()["items"]
    assert len(kids) == 2 and {k["parent_id"] for k in kids} == {tid}
    journal = client.get(f"/tasks/{tid}/journal").json()
    assert [(e["kind"], e["name"], e["status"]) for e in journal["journal"]][:1] == [
        ("step", "first", "done")
    ]
    assert [e["kind"] for e in journal["journal"]].count("wait") == 3
    assert [s["name"] for s in journal["signals"]] == ["go"]
    assert {c["id"] for c in journal["children"]} == {k["id"] for k in kids}


def test_a_waiting_tasks_stream_stays_open_and_goes_on_after_the_resume(served):
    _, client = served
    tid = client.post("/tasks", json={"task": "t.flow", "payload": {"n": 1}}).json()["id"]
    seen: list[dict] = []
    end: list[dict] = []

    def follow() -> None:
        with client.stream("GET", f"/tasks/{tid}/events") as resp:
            for etype, data in sse_events(resp.iter_lines()):
                if etype == "end":
                    end.append(json.loads(data))
                    return
                seen.append(json.loads(data))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    wait_for(lambda: sum(1 for e in seen if e["type"] == "waiting") == 2, 10)  # sleep, signal
    assert not end  # the stream is still open while the task waits
    client.post(f"/tasks/{tid}/signals/go", json={"data": "on"})
    reader.join(15)
    assert end and end[0]["state"] == "succeeded"
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))  # gapless, once each
    types = [e["type"] for e in seen]
    assert types[0] == "attempt" and types.count("resumed") == 3


def test_cli_signal_and_children(store_url):
    db = ["--db", store_url]
    tid = cli("submit", "t.flow", "--payload", '{"n": 1}', *db, *APP).stdout.strip()
    done = cli("signal", tid, "go", "--data", '{"x": 1}', *db, *APP, "--json")
    assert json.loads(done.stdout) == {"name": "go", "data": {"x": 1}, "created": True}
    again = cli("signal", tid, "go", "--data", "2", *db, *APP)
    assert again.returncode == 0 and "already sent" in again.stdout
    for bad in (["signal", "nope", "go"], ["signal", tid, "go", "--data", "{bad"]):
        failed = cli(*bad, *db, *APP, check=False)
        assert failed.returncode == 2 and failed.stderr.startswith("error: ")
    cancelled = cli("cancel", tid, *db, *APP, "--json")
    assert json.loads(cancelled.stdout)["task"]["state"] == "cancelled"
    late = cli("signal", tid, "late", *db, *APP, check=False)
    assert late.returncode == 2 and "task_terminal" in late.stderr
    listed = json.loads(cli("list", "--parent", tid, *db, *APP, "--json").stdout)
    assert listed["items"] == []


def test_a_request_bound_task_cannot_wait(served):
    """No worker resumes a request-bound task, so its wait fails it (never stuck)."""
    app, client = served
    with client.stream(
        "POST", "/tasks/stream", json={"task": "t.flow", "payload": {"n": 1}}
    ) as resp:
        assert resp.status_code == 200
        tid = resp.headers["tasklab-task-id"]
        ended = [json.loads(d) for t, d in sse_events(resp.iter_lines()) if t == "end"]
    assert ended[0]["state"] == "failed" and "cannot wait" in ended[0]["error"]["message"]
    assert app.query(tid).state.value == "failed"
