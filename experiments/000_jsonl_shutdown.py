"""Seed 000, the server half: which requests can still be answered while the JSON-lines
server closes? Prints `cancelled_handlers` for each case.

    python experiments/000_jsonl_shutdown.py

1. a complete submit during a normal close → answered, cancelled_handlers=0
2. a half-sent line, drain_timeout=0 → the client sees EOF, cancelled_handlers=1, new
   connections are refused
3. a handler the loop accepted but that only runs after the closing gate (held by a
   barrier) → closes its connection without reading: nothing is submitted
"""

from __future__ import annotations

import asyncio
import json
import tempfile

from tasklab import TaskApp
from tasklab.edges.jsonl.server import JsonLinesServer


async def db(fn, *args):  # type: ignore[no-untyped-def]
    return await asyncio.to_thread(fn, *args)


async def ask(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data


SUBMIT = json.dumps({"op": "submit", "task": "wordfreq", "payload": {"text": "a b a"}})


async def normal_close(app: TaskApp) -> None:
    server = await JsonLinesServer(app, db, port=0).start()
    reply = asyncio.create_task(ask(server.port, SUBMIT.encode() + b"\n"))
    while server.active_handlers == 0:
        await asyncio.sleep(0.001)
    report = await server.close(drain_timeout=5)
    answer = json.loads(await reply)
    print(
        f"1. complete submit during close: answered ok={answer['ok']} "
        f"state={answer['task']['state']}; {report}"
    )


async def half_line(app: TaskApp) -> None:
    server = await JsonLinesServer(app, db, port=0, read_timeout=30).start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(SUBMIT.encode()[:20])
    await writer.drain()
    while server.active_handlers == 0:
        await asyncio.sleep(0.001)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    report = await server.close(drain_timeout=0)
    got = await reader.read()
    writer.close()
    try:
        await asyncio.open_connection("127.0.0.1", server.port)
        refused = False
    except OSError:
        refused = True
    print(
        f"2. half-sent line, drain 0: client got {got!r} (EOF) after "
        f"{(loop.time() - t0) * 1000:.1f} ms; new connection refused={refused}; {report}"
    )


async def late_handler(app: TaskApp) -> None:
    server = await JsonLinesServer(app, db, port=0).start()
    entered, release = asyncio.Event(), asyncio.Event()

    async def barrier() -> None:
        entered.set()
        await release.wait()

    server.before_handle = barrier
    before = sum(app.counts().values())
    reply = asyncio.create_task(ask(server.port, SUBMIT.encode() + b"\n"))
    await entered.wait()
    closing = asyncio.create_task(server.close(drain_timeout=5))
    await asyncio.sleep(0.05)
    release.set()
    got, report = await reply, await closing
    print(
        f"3. late handler after the gate: client got {got!r}; tasks submitted: "
        f"{sum(app.counts().values()) - before}; {report}"
    )


async def main() -> None:
    app = TaskApp(f"sqlite:///{tempfile.mkdtemp()}/exp000s.db")
    await normal_close(app)
    await half_line(app)
    await late_handler(app)
    app.close()


if __name__ == "__main__":
    asyncio.run(main())
