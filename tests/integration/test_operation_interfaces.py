"""Retries, bulk actions and search on every interface (SPEC §9), over real sockets and
a real CLI process, on both stores; bad input answered with a clear error that changes
nothing."""

from __future__ import annotations

import json

import pytest

from tasklab.edges.jsonl.server import JsonLinesServer
from tests.acceptance.test_sigkill import APP, cli
from tests.integration.test_jsonl import db, request, run
from tests.integration.test_queue_interfaces import client  # noqa: F401 (the fixture)


def _failed(app, n: int = 3) -> list[str]:  # type: ignore[no-untyped-def]
    ids = [app.submit("t.boom", {"message": str(i)}) for i in range(n)]
    app.run_pending()
    return ids


def test_http_retry_one_task(client, app):  # noqa: F811
    (tid,) = _failed(app, 1)
    r = client.post(f"/tasks/{tid}/retry")
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["retry_of"], made["state"], made["task"]) == (tid, "queued", "t.boom")
    again = client.post(f"/tasks/{tid}/retry", json={"idempotency_key": "k1"})
    assert (
        client.post(f"/tasks/{tid}/retry", json={"idempotency_key": "k1"}).json()["id"]
        == (again.json()["id"])
    )
    live = client.post(f"/tasks/{made['id']}/retry")
    assert live.status_code == 409 and live.json()["error"]["code"] == "task_live"
    assert client.post(f"/tasks/{'0' * 24}/retry").status_code == 404
    bad = client.post(f"/tasks/{tid}/retry", json={"colour": "red"})
    assert bad.status_code == 422 and "colour" in bad.json()["error"]["message"]
    assert app.counts()["queued"] == 2


def test_http_bulk_cancel_and_retry(client, app):  # noqa: F811
    _failed(app, 3)
    queued = [app.submit("t.echo", {"value": i}) for i in range(4)]
    r = client.post("/tasks/cancel", json={"filter": {"task": "t.echo"}, "dry_run": True})
    assert r.status_code == 200 and r.json() == {"matched": 4}
    assert app.counts()["queued"] == 4
    r = client.post("/tasks/cancel", json={"filter": {"task": "t.echo"}, "batch": 3})
    assert r.json() == {"matched": 4, "cancelled": 4, "cancel_requested": 0, "unchanged": 0}
    assert {app.query(t).state.value for t in queued} == {"cancelled"}
    dry = client.post("/tasks/retry", json={"filter": {"state": "failed"}, "dry_run": True})
    assert dry.json() == {"matched": 3}
    done = client.post("/tasks/retry", json={"filter": {"state": "failed"}})
    assert done.json() == {"matched": 3, "retried": 3, "skipped": 0}
    assert app.counts()["queued"] == 3


@pytest.mark.parametrize(
    "body",
    [
        {"filter": {}},
        {"filter": {"state": "succeeded"}},
        {"filter": {"state": "nope"}},
        {"filter": {"colour": "red"}},
        {"filter": {"created_after": "yesterday"}},
        {"filter": "t.echo"},
        {"filter": {"task": "t.echo"}, "dry_run": "yes"},
        {"filter": {"task": "t.echo"}, "batch": 0},
        {"filter": {"task": "t.echo"}, "everything": True},
        [],
    ],
)
def test_http_bad_bulk_bodies_are_422_and_change_nothing(client, app, body):  # noqa: F811
    app.submit("t.echo", {"value": 1})
    r = client.post("/tasks/cancel", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"]
    assert app.counts()["queued"] == 1


def test_http_search_filters(client, app):  # noqa: F811
    _failed(app, 2)
    app.submit("t.echo", {"value": 1}, queue="mail")
    ids = [i["id"] for i in client.get("/tasks", params={"state": "failed"}).json()["items"]]
    assert len(ids) == 2
    mail = client.get("/tasks", params={"queue": "mail"}).json()["items"]
    assert [i["queue"] for i in mail] == ["mail"]
    page = client.get("/tasks", params={"task": "t.boom", "limit": 1}).json()
    rest = client.get("/tasks", params={"task": "t.boom", "cursor": page["next_cursor"]}).json()
    assert [i["id"] for i in page["items"] + rest["items"]] == ids and rest["next_cursor"] is None
    prefix = client.get("/tasks", params={"id_prefix": ids[0][:20]}).json()["items"]
    assert [i["id"] for i in prefix] == [ids[0]]
    for params in ({"state": "nope"}, {"id_prefix": "zz"}, {"created_before": "soon"}):
        r = client.get("/tasks", params=params)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_payload", params


def _jsonl(app, *frames: dict) -> list[dict]:  # type: ignore[no-untyped-def]
    """Each frame on a connection of its own (one request per connection), in order."""

    async def scenario():  # type: ignore[no-untyped-def]
        server = await JsonLinesServer(app, db, port=0).start()
        try:
            return [await request(server.port, json.dumps(f).encode() + b"\n") for f in frames]
        finally:
            await server.close(0)

    return [json.loads(reply) for reply in run(scenario())]


def test_jsonl_retry_and_bulk_actions(app):
    (tid, *_) = _failed(app, 2)
    app.submit("t.echo", {"value": 1})
    replies = _jsonl(
        app,
        {"op": "retry", "id": tid},
        {"op": "cancel_where", "filter": {"task": "t.echo"}, "dry_run": True},
        {"op": "cancel_where", "filter": {"task": "t.echo"}},
        {"op": "retry_where", "filter": {"task": "t.boom"}},
        {"op": "retry_where", "filter": {}},
        {"op": "cancel_where"},
        {"op": "retry", "id": "0" * 24},
    )
    assert replies[0]["ok"] and replies[0]["task"]["retry_of"] == tid
    assert replies[1] == {"ok": True, "matched": 1}
    assert replies[2]["ok"] and replies[2]["cancelled"] == 1
    assert replies[3] == {"ok": True, "matched": 1, "retried": 1, "skipped": 0}  # one left
    assert [r["error"]["code"] for r in replies[4:]] == [
        "invalid_payload",
        "bad_request",
        "not_found",
    ]


def test_cli_retry_cancel_and_list_with_filters(store_url):
    dbs = ["--db", store_url]
    tid = cli("submit", "t.boom", "--payload", "{}", *dbs, *APP).stdout.strip()
    for _ in range(3):
        cli("submit", "t.echo", "--payload", "{}", "--queue", "mail", *dbs, *APP)
    assert cli("retry", tid, *dbs, *APP, check=False).returncode == 2  # queued: not ended
    assert json.loads(cli("cancel", "--queue", "mail", "--dry-run", "--json", *dbs).stdout) == {
        "matched": 3
    }
    unasked = cli("cancel", "--queue", "mail", *dbs, check=False, stdin="")
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    done = json.loads(cli("cancel", "--queue", "mail", "--yes", "--json", *dbs).stdout)
    assert done == {"matched": 3, "cancelled": 3, "cancel_requested": 0, "unchanged": 0}
    listed = json.loads(cli("list", "--state", "cancelled", "--json", *dbs).stdout)["items"]
    assert len(listed) == 3 and {i["queue"] for i in listed} == {"mail"}
    cli("cancel", tid, *dbs)
    new = cli("retry", tid, *dbs, *APP).stdout.strip()
    assert len(new) == 24 and new != tid
    shown = json.loads(cli("status", new, "--json", *dbs).stdout)
    assert shown["retry_of"] == tid
    again = json.loads(cli("retry", "--task", "t.echo", "--yes", "--json", *dbs).stdout)
    assert again == {"matched": 3, "retried": 3, "skipped": 0}
    bad_input = [
        ["cancel", *dbs],  # nothing named
        ["cancel", tid, "--task", "t.echo", *dbs],  # both
        ["retry", "--state", "queued", "--yes", *dbs],
        ["list", "--created-after", "soon", *dbs],
        ["list", "--id-prefix", "xyz", *dbs],
    ]
    # the checks are the store's alike: every one on SQLite, one on PostgreSQL (each
    # call is a process start)
    for bad in bad_input if store_url.startswith("sqlite") else bad_input[2:3]:
        out = cli(*bad, check=False)
        assert out.returncode == 2, (bad, out.stderr)
        assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    assert json.loads(cli("stats", "--json", *dbs).stdout)["counts"]["queued"] == 4
