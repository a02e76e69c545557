"""`tasklab bench serve`: a `tasklab serve` process under load from this process.

Submits/s over HTTP (keep-alive, several client threads) and over JSON-lines (one
connection per request, as the protocol is); SSE events/s delivered to 1 and to 100
concurrent subscribers replaying a finished task's events; time to resume (reconnect
with `Last-Event-ID` → first replayed event); the server's RSS with 1,000 idle
subscribers on a running task.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

CLIENTS = 64  # concurrent submitters (connections), as a load generator would use


@dataclass
class ServeReport:
    conditions: dict[str, Any] = field(default_factory=dict)
    http_submits_per_s: float = 0.0
    jsonl_submits_per_s: float = 0.0
    sse_events_per_s: dict[str, float] = field(default_factory=dict)
    resume_ms: dict[str, float] = field(default_factory=dict)
    idle_subscribers: int = 0
    rss_mb: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class _Server:
    def __init__(self, db: str, max_streams: int = 1000) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tasklab.edges.cli",
                "serve",
                "--db",
                db,
                "--port",
                "0",
                "--jsonl-port",
                "0",
                "--app",
                "tasklab.bench.tasks:app",
                "--concurrency",
                "4",
                "--max-streams",
                str(max_streams),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self.proc.stderr.readline())  # type: ignore[union-attr]
        self.url, self.jsonl_port = ready["http"], ready["jsonl_port"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.proc.stderr.close()  # type: ignore[union-attr]


async def _http_client(host: str, port: int, request: bytes, count: int) -> None:
    """One keep-alive connection sending `count` requests one after another: a raw
    HTTP/1.1 client, so that the load generator costs far less than the server."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for _ in range(count):
            writer.write(request)
            status = await reader.readline()
            if b" 201 " not in status:
                raise RuntimeError(f"submit failed: {status!r}")
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
    finally:
        writer.close()


async def _jsonl_client(port: int, line: bytes, count: int) -> None:
    for _ in range(count):  # the protocol is one request per connection
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(line)
        reply = await reader.readline()
        writer.close()
        if b'"ok":true' not in reply:
            raise RuntimeError(f"submit failed: {reply!r}")


def _rate(make: Any, n: int, clients: int) -> float:
    per = n // clients

    async def main() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*[make(per) for _ in range(clients)])
        return per * clients / (time.perf_counter() - t0)

    return asyncio.run(main())


def http_submits(url: str, n: int, clients: int = CLIENTS) -> float:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"task": "bench.noop", "payload": {}}).encode()
    request = (
        f"POST /tasks HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    return _rate(lambda k: _http_client(host, int(port), request, k), n, clients)


def jsonl_submits(port: int, n: int, clients: int = CLIENTS) -> float:
    line = json.dumps({"op": "submit", "task": "bench.noop", "payload": {}}).encode() + b"\n"
    return _rate(lambda k: _jsonl_client(port, line, k), n, clients)


async def _read_stream(client: httpx.AsyncClient, path: str, headers: dict[str, str]) -> int:
    count = 0
    async with client.stream("GET", path, headers=headers) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("id:"):
                count += 1
            elif line.startswith("event: end"):
                break
    return count


async def sse_rate(url: str, task_id: str, subscribers: int) -> float:
    limits = httpx.Limits(max_connections=subscribers + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        t0 = time.perf_counter()
        counts = await asyncio.gather(
            *[_read_stream(client, f"/tasks/{task_id}/events", {}) for _ in range(subscribers)]
        )
        return sum(counts) / (time.perf_counter() - t0)


async def resume_ms(url: str, task_id: str, tries: int = 30) -> dict[str, float]:
    samples = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for i in range(tries):
            t0 = time.perf_counter()
            async with client.stream(
                "GET", f"/tasks/{task_id}/events", headers={"Last-Event-ID": str(100 + i)}
            ) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        samples.append((time.perf_counter() - t0) * 1000)
                        break
    return {"p50": round(statistics.median(samples), 2), "max": round(max(samples), 2)}


async def idle_subscribers(url: str, task_id: str, n: int, pid: int) -> dict[str, float]:
    before = _rss_mb(pid)
    limits = httpx.Limits(max_connections=n + 10)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        opened = asyncio.Event()
        count = 0

        async def hold() -> None:
            nonlocal count
            async with client.stream("GET", f"/tasks/{task_id}/events") as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("id:"):
                        count += 1
                        if count >= n:
                            opened.set()
                        break
                await asyncio.sleep(3600)

        tasks = [asyncio.create_task(hold()) for _ in range(n)]
        await asyncio.wait_for(opened.wait(), 120)
        await asyncio.sleep(2)
        during = _rss_mb(pid)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "before": before,
        "with_idle": during,
        "per_stream_kb": round((during - before) * 1024 / n, 1),
    }


def _wait_done(url: str, task_id: str) -> None:
    while httpx.get(f"{url}/tasks/{task_id}").json()["state"] not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        time.sleep(0.05)


def run(n: int = 5000, events: int = 5000, idle: int = 1000) -> ServeReport:
    db = f"sqlite:///{tempfile.mkdtemp(prefix='tasklab-bench-serve-')}/serve.db"
    server = _Server(db, max_streams=idle + 100)  # the idle ones and the measuring ones
    report = ServeReport(
        conditions={
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "server": "one `tasklab serve` process, SQLite synchronous=FULL, 4 thread slots",
            "clients": (
                f"this process (asyncio): {CLIENTS} concurrent submitters over raw HTTP/1.1 "
                "keep-alive or one JSON-lines connection per request; httpx for SSE"
            ),
        }
    )
    try:
        report.http_submits_per_s = round(http_submits(server.url, n))
        report.jsonl_submits_per_s = round(jsonl_submits(server.jsonl_port, n))
        tid = httpx.post(
            f"{server.url}/tasks", json={"task": "bench.emit", "payload": {"n": events}}
        ).json()["id"]
        _wait_done(server.url, tid)
        for subs in (1, 100):
            report.sse_events_per_s[str(subs)] = round(asyncio.run(sse_rate(server.url, tid, subs)))
        report.resume_ms = asyncio.run(resume_ms(server.url, tid))
        wait_id = httpx.post(
            f"{server.url}/tasks", json={"task": "bench.wait", "payload": {}}
        ).json()["id"]
        report.idle_subscribers = idle
        report.rss_mb = asyncio.run(idle_subscribers(server.url, wait_id, idle, server.proc.pid))
        httpx.post(f"{server.url}/tasks/{wait_id}/cancel")
    finally:
        server.stop()
    return report
