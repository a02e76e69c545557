"""Hostile input and hostile clients, over real loopback sockets, on both stores.

Every bad input gets a clear 4xx (HTTP) or an error object (JSON-lines), the store is
unchanged (read from a new connection), and the server goes on answering — never a
5xx, never a bare close, never a traceback per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasklab.errors import InvalidPayload, TaskNotFound
from tests.conftest import STORES, make_app
from tests.helpers import pg
from tests.helpers.servers import ServiceThread

DEEP = b"[" * 5000 + b"]" * 5000
HUGE = b"9" * 5000
TOKEN = "s3cret"


class Target:
    def __init__(self, url: str, tmp: Path) -> None:
        (tmp / "data").mkdir(exist_ok=True)
        self.app = make_app(url)
        self.app.data_dir = str(tmp / "data")
        self.service = ServiceThread(self.app, embed_worker=False, token=TOKEN).__enter__()
        self.url = url
        self.http = httpx.Client(
            base_url=self.service.url, timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}
        )

    def total(self) -> int:
        fresh = make_app(self.url)  # verify from a new connection
        try:
            return sum(fresh.counts().values())
        finally:
            fresh.close()

    def close(self) -> None:
        self.http.close()
        self.service.stop()
        self.app.close()


@pytest.fixture(scope="module", params=STORES)
def target(request, tmp_path_factory, pg_admin) -> Iterator[Target]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("hostile")
    if request.param == "sqlite":
        t = Target(f"sqlite:///{tmp / 'tasklab.db'}", tmp)
        yield t
        t.close()
        return
    if pg_admin is None:
        pytest.skip("PostgreSQL not available")
    with pg.fresh_database(pg_admin) as url:
        t = Target(url, tmp)
        yield t
        t.close()


def post(t: Target, path: str, body: bytes, **headers: str) -> httpx.Response:
    return t.http.post(path, content=body, headers={"content-type": "application/json", **headers})


def assert_refused(resp: httpx.Response, status: int | None = None) -> None:
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    if status is not None:
        assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] and err["message"]


SUBMIT = b'{"task": "t.echo", "payload": {"value": 1}'
BAD_SUBMITS = [
    SUBMIT + b', "max_attempts": "x"}',
    SUBMIT + b', "max_attempts": 5.5}',
    SUBMIT + b', "max_attempts": [1]}',
    SUBMIT + b', "max_attempts": true}',
    SUBMIT + b', "idempotency_key": 7}',
    SUBMIT + b', "idempotency_key": {"a": 1}}',
    SUBMIT + b', "idempotency_key": "\\ud800"}',
    b'{"task": "t.echo", "payload": {"value": ' + DEEP + b"}}",
    DEEP,
    b'{"task": "t.echo", "payload": {"value": ' + HUGE + b"}}",
    b'{"task": "wordfreq", "payload": {"path": "a\\u0000b"}}',
    b'{"task": "wordfreq", "payload": {"path": "' + b"x" * 5000 + b'"}}',
    b'{"task": "wordfreq", "payload": {"path": "' + b"x/" * 3000 + b'"}}',
    b'{"task": 7, "payload": {}}',
]


@pytest.mark.parametrize("body", BAD_SUBMITS, ids=range(len(BAD_SUBMITS)))
@pytest.mark.parametrize("path", ["/tasks", "/tasks/stream"])
def test_bad_submits_are_4xx_and_store_nothing(target, path, body):
    before = target.total()
    assert_refused(post(target, path, body))
    assert target.total() == before
    assert target.http.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "body", [b'{"token": "\\ud800"}', DEEP, b'{"token": ' + HUGE + b"}", b"[", b'{"token": 1}']
)
def test_bad_logins_are_4xx(target, body):
    assert_refused(post(target, "/ui/login", body))


def raw_http(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def port_of(t: Target) -> int:
    return int(t.service.url.rsplit(":", 1)[1])


def test_a_cookie_with_a_non_ascii_byte_is_a_401_on_every_protected_route(target):
    for path in [b"/tasks", b"/tasks/counts", b"/metrics", b"/openapi.json"]:
        reply = raw_http(
            port_of(target),
            b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Cookie: tasklab_session=\xff\xfe\r\nConnection: close\r\n\r\n",
        )
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]


@pytest.mark.parametrize("point", [str(2**63), "9" * 30, "-1", "x"])
def test_resume_points_beyond_a_seq_are_422(target, point):
    tid = target.http.post("/tasks", json={"task": "t.echo", "payload": {"value": 1}}).json()["id"]
    assert_refused(target.http.get(f"/tasks/{tid}/events", params={"after": point}), 422)
    assert_refused(target.http.get(f"/tasks/{tid}/events", headers={"Last-Event-ID": point}), 422)


def test_openapi_needs_the_token(target):
    assert httpx.get(target.service.url + "/openapi.json").status_code == 401
    assert "/tasks" in target.http.get("/openapi.json").json()["paths"]


# ---- JSON-lines -----------------------------------------------------------------------


def jsonl(t: Target, frame: bytes) -> dict:
    port = t.service.jsonl_port
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.endswith(b"\n"), f"a bare close for {frame[:60]!r}"
    return json.loads(data)


TOK = f'"token": "{TOKEN}"'.encode()
BAD_FRAMES = [
    DEEP + b"\n",
    b'{"op": "submit", "task": "t.echo", "payload": {"value": ' + DEEP + b"}, " + TOK + b"}\n",
    b'{"op": "submit", "task": "t.echo", "payload": {"value": ' + HUGE + b"}, " + TOK + b"}\n",
    b'{"op": "submit", "task": "t.echo", "payload": {}, "token": ' + HUGE + b"}\n",
    b'{"op": "submit", "task": "t.echo", "payload": {}, "token": "\\ud800"}\n',
    b'{"op": "submit", "task": "t.echo", "payload": {}, "max_attempts": "x", ' + TOK + b"}\n",
    b'{"op": "submit", "task": "t.echo", "payload": {}, "idempotency_key": 5, ' + TOK + b"}\n",
    b'{"op": "query", "id": 5, ' + TOK + b"}\n",
    b"\xff\xfe\n",
]


@pytest.mark.parametrize("frame", BAD_FRAMES, ids=range(len(BAD_FRAMES)))
def test_bad_frames_get_an_error_object_and_store_nothing(target, frame):
    before = target.total()
    reply = jsonl(target, frame)
    assert reply["ok"] is False and reply["error"]["code"] and reply["error"]["message"]
    assert target.total() == before


# A JSON `"\ud800"` (or a command line that is not UTF-8) makes a Python string that is
# not text: no column can hold it, and before this it reached the driver as its
# encoding error (JSON-lines answered `internal`, the Python API raised
# UnicodeEncodeError). An id that is not text names no task; any other such string is
# refused as it is.
NOT_TEXT = "\ud800"


@pytest.mark.parametrize("op", ["query", "cancel", "retry"])
def test_a_jsonl_id_that_is_not_text_is_not_found(target, op):
    before = target.total()
    frame = b'{"op": "%s", "id": "\\ud800", %s}\n' % (op.encode(), TOK)
    reply = jsonl(target, frame)
    assert reply["ok"] is False and reply["error"]["code"] == "not_found", reply
    assert target.total() == before


def test_an_id_that_is_not_text_names_no_task_in_the_python_api(target):
    app, before = target.app, target.total()
    calls = {
        "query": lambda i: app.query(i),
        "events": lambda i: app.events(i),
        "cancel": lambda i: app.cancel(i),
        "run": lambda i: app.run(i),
        "claim_task": lambda i: app.claim_task(i),
        "retry": lambda i: app.retry(i),
        "attempts": lambda i: app.attempts(i),
        "signal": lambda i: app.signal(i, "go"),
        "signals": lambda i: app.signals(i),
        "children": lambda i: app.children(i),
        "journal": lambda i: app.journal(i),
        "handle": lambda i: app.handle(i).snapshot(),
    }
    for name, call in calls.items():
        for task_id in (NOT_TEXT, "tk_" + NOT_TEXT * 21, 7):
            with pytest.raises(TaskNotFound):
                call(task_id)
                pytest.fail(f"{name}({task_id!r}) answered")
    assert target.total() == before


def test_a_name_that_is_not_text_is_refused_and_changes_nothing(target):
    app, before = target.app, target.total()
    for call in (app.unsubscribe, app.notification_lag, app.unschedule):
        with pytest.raises(InvalidPayload, match="lone surrogate"):
            call(NOT_TEXT)
    assert target.total() == before


# ---- fuzzing ----------------------------------------------------------------------------

# text includes lone surrogates: a JSON `"\\udfff"` is one, and hypothesis's text leaves
# them out by default
texts = st.text(st.characters(blacklist_categories=()))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "task": st.sampled_from(["t.echo", "wordfreq", "nope"]) | json_values,
        "payload": json_values,
        "idempotency_key": json_values,
        "max_attempts": json_values,
        "op": st.sampled_from(["submit", "query", "cancel", "x"]),
        "id": json_values,
        "token": st.just(TOKEN) | json_values,
    },
)
bodies = envelopes.map(lambda d: json.dumps(d).encode()) | st.binary(max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies)
def test_fuzzed_http_bodies_never_get_a_5xx(target, body):
    for path in ("/tasks", "/ui/login"):
        resp = post(target, path, body)
        assert resp.status_code < 500, (resp.status_code, resp.text, body)
        if resp.status_code >= 400:
            assert resp.json()["error"]["code"]
        elif path == "/tasks":  # a valid submit: count it out again
            target.http.post(f"/tasks/{resp.json()['id']}/cancel")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=bodies)
def test_fuzzed_jsonl_frames_always_get_an_answer(target, frame):
    reply = jsonl(target, frame.replace(b"\n", b" ") + b"\n")
    assert isinstance(reply, dict) and isinstance(reply["ok"], bool)
    if not reply["ok"]:
        assert reply["error"]["code"] not in ("", "internal"), (reply, frame)


def test_no_request_logged_a_traceback(target, caplog):
    """A bad request is at most one log line, without the payload."""
    caplog.set_level(logging.INFO)
    post(target, "/tasks", SUBMIT + b', "max_attempts": "x", "secret": "p4yl0ad"}')
    post(target, "/tasks", b'{"task": "t.echo", "payload": {"value": "p4yl0ad", "x": 1}}')
    jsonl(target, b'{"op": "submit", "payload": ' + DEEP + b"}\n")
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "p4yl0ad" not in record.getMessage()


def test_a_client_hanging_up_mid_body_is_one_line(target, caplog):
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", port_of(target))) as s:
        s.sendall(
            b"POST /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 1000\r\n\r\n{"
        )
        time.sleep(0.2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
        "hung up" in r.getMessage() for r in caplog.records
    ):
        time.sleep(0.02)
    assert any("hung up" in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
    assert target.http.get("/healthz").status_code == 200


__all__ = ["asyncio"]
