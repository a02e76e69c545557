"""`tasklab serve` as a real process: ready, resume across two server processes,
`watch --url` surviving a server restart, graceful SIGTERM with exit 0."""

from __future__ import annotations

import json
import signal
import socket
import subprocess

import httpx

from tasklab.edges.watching import sse_events
from tests.acceptance.test_sigkill import APP, ROOT, TASKLAB, env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    def __init__(self, url: str, *extra: str, port: int = 0) -> None:
        self.proc = subprocess.Popen(
            [
                *TASKLAB,
                "serve",
                "--db",
                url,
                "--port",
                str(port),
                "--jsonl-port",
                "0",
                "--drain-timeout",
                "2",
                *extra,
                *APP,
            ],
            cwd=ROOT,
            env=env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stderr.readline()  # type: ignore[union-attr]
        ready = json.loads(line)
        assert ready["event"] == "ready", line
        self.http = ready["http"]
        self.jsonl_port = ready["jsonl_port"]

    def stop(self) -> tuple[int, dict]:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        tail = self.proc.stderr.read().strip().splitlines()  # type: ignore[union-attr]
        self.proc.stderr.close()  # type: ignore[union-attr]
        return code, json.loads(tail[-1]) if tail else {}


def events_from(base: str, tid: str, after: int, limit: int | None = None):
    got, end = [], None
    with httpx.stream(
        "GET", f"{base}/tasks/{tid}/events", headers={"Last-Event-ID": str(after)}, timeout=30
    ) as resp:
        for etype, data in sse_events(resp.iter_lines()):
            doc = json.loads(data)
            if etype == "end":
                end = doc
                break
            got.append(doc)
            if limit and len(got) >= limit:
                break
    return got, end


def test_resume_against_a_second_server_process(store_url):
    a = Serve(store_url)
    b = Serve(store_url, "--no-worker")
    try:
        text = " ".join(f"r{i}" for i in range(80))
        tid = httpx.post(
            f"{a.http}/tasks",
            json={"task": "stream_text", "payload": {"text": text, "tokens_per_second": 80}},
        ).json()["id"]
        first, end = events_from(a.http, tid, 0, limit=3)
        assert end is None
        rest, end = events_from(b.http, tid, first[-1]["seq"])
        union = first + rest
        assert [e["seq"] for e in union] == list(range(1, len(union) + 1))
        assert "".join(e["data"]["text"] for e in union if e["type"] == "chunk") == text
        assert end["state"] == "succeeded"
        # a JSON-lines query through B sees the same committed task
        with socket.create_connection(("127.0.0.1", b.jsonl_port)) as s:
            s.sendall(json.dumps({"op": "query", "id": tid}).encode() + b"\n")
            reply = json.loads(s.makefile().readline())
        assert reply["task"]["result"] == text
    finally:
        code_a, report = a.stop()
        code_b, _ = b.stop()
    assert code_a == 0 and code_b == 0
    assert report["event"] == "stopped"


def test_watch_url_resumes_after_the_server_restarts(store_url):
    """The task runs in a worker of its own and goes on while the server restarts; the
    watcher reconnects and resumes: every token once, and the task's success (exit 0 —
    a watcher that never resumed could not see it)."""
    from tests.acceptance.test_sigkill import Worker
    from tests.conftest import make_app, wait_for

    port = free_port()
    server = Serve(store_url, "--no-worker", port=port)
    text = " ".join(f"w{i}" for i in range(60))
    reader = make_app(store_url)
    with Worker(store_url):
        tid = httpx.post(
            f"{server.http}/tasks",
            json={"task": "stream_text", "payload": {"text": text, "tokens_per_second": 30}},
        ).json()["id"]
        watcher = subprocess.Popen(
            [*TASKLAB, "watch", tid, "--url", server.http],
            cwd=ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: len(reader.events(tid)) >= 5)  # streaming, and being watched
        assert server.stop()[0] == 0  # the stream ends; the task goes on in the worker
        assert not reader.query(tid).terminal
        server = Serve(store_url, "--no-worker", port=port)
        try:
            out, err = watcher.communicate(timeout=60)
        finally:
            server.stop()
            reader.close()
    assert watcher.returncode == 0, err
    streamed = out.split("\nsucceeded")[0].split("\ncancelled")[0]
    # every token the task streamed was shown once, across the two connections
    shown = streamed.replace("— attempt 1 began —", "").split()
    assert shown == text.split()[: len(shown)] and len(shown) >= 10


def test_sigterm_while_busy_exits_zero_and_keeps_queued_tasks(store_url):
    server = Serve(store_url, "--concurrency", "1")
    tids = [
        httpx.post(f"{server.http}/tasks", json={"task": "t.echo", "payload": {"value": i}}).json()[
            "id"
        ]
        for i in range(3)
    ]
    code, report = server.stop()
    assert code == 0 and report["event"] == "stopped"
    from tests.conftest import make_app

    app = make_app(store_url)
    states = {app.query(t).state.value for t in tids}
    assert states <= {"queued", "succeeded"}  # never cancelled or failed by closing
    app.close()
