"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import pytest

from tasklab import State
from tests.conftest import make_app, wait_for
from tests.helpers.servers import ServiceThread

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]


def _browser_or_skip():  # type: ignore[no-untyped-def]
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None or not os.path.exists(CHROMIUM):
        if os.environ.get("TASKLAB_REQUIRE_BROWSER") == "1":
            pytest.fail("TASKLAB_REQUIRE_BROWSER=1 but chromium or playwright is missing")
        pytest.skip("chromium/playwright not installed")
    return sync_playwright


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    sync_playwright = _browser_or_skip()
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def served(tmp_path):  # type: ignore[no-untyped-def]
    app = make_app(f"sqlite:///{tmp_path / 'ui.db'}")
    with ServiceThread(app, concurrency=2) as server:
        yield app, server
    app.close()


# Playwright evaluates the tests' string predicates (`wait_for_function`) in the page,
# which the console's Content-Security-Policy forbids (no eval): the tests of behaviour
# bypass it, and `strict_context` — what a browser does with the console — enforces it.
BYPASS_CSP = {"bypass_csp": True}


@pytest.fixture
def context(browser):  # type: ignore[no-untyped-def]
    ctx = browser.new_context(viewport={"width": 1100, "height": 800}, **BYPASS_CSP)
    yield ctx
    ctx.close()


@pytest.fixture
def strict_context(browser):  # type: ignore[no-untyped-def]
    ctx = browser.new_context(viewport={"width": 1100, "height": 800})
    yield ctx
    ctx.close()


def store_text(app, tid: str) -> str:  # type: ignore[no-untyped-def]
    return "".join(e.data["text"] for e in app.events(tid) if e.type == "chunk")


def test_submit_wordfreq_from_the_form_shows_progress_and_result(served, context):
    app, server = served
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector("#f-text")
    text = " ".join(["alpha beta gamma alpha"] * 30000)  # ~690 KB: several chunks
    page.fill("#f-text", text)
    page.click("#submit-button")
    page.wait_for_url("**/ui/tasks/*")
    page.wait_for_selector("#top-words", timeout=30000)
    assert page.text_content("#state") == "succeeded"
    rows = page.locator("#top-words tbody tr")
    assert rows.first.inner_text().split() == ["alpha", "60000"]
    assert page.locator(".bars .bar").count() == 3
    assert page.eval_on_selector("#progress", "p => p.value === p.max && p.max > 1")
    tid = page.url.rsplit("/", 1)[1]
    progress = [e for e in app.events(tid) if e.type == "progress"]
    assert len(progress) > 2  # the bar moved through several values
    if os.environ.get("TASKLAB_SCREENSHOTS") == "1":
        page.screenshot(path=str(ROOT / "docs" / "dashboard-task.png"), full_page=True)
        page.goto(server.url + "/")
        page.wait_for_selector("#tasks tbody tr")
        page.screenshot(path=str(ROOT / "docs" / "dashboard-list.png"), full_page=True)


def test_closing_the_tab_mid_stream_and_reopening_resumes_exactly(served, context):
    app, server = served
    words = [f"tok{i}" for i in range(120)]
    tid = app.submit("stream_text", {"text": " ".join(words), "tokens_per_second": 40})
    page = context.new_page()
    page.goto(f"{server.url}/ui/tasks/{tid}")
    page.wait_for_function("document.querySelector('#output').textContent.includes('tok10 ')")
    page.close()  # mid-stream: the task goes on (it is not bound to the page)
    again = context.new_page()
    again.goto(f"{server.url}/ui/tasks/{tid}")
    again.wait_for_selector(".notice.ok", timeout=20000)
    shown = again.text_content("#output")
    assert shown == " ".join(words) == store_text(app, tid)
    # and a reload of the same tab resumes from sessionStorage (?after=) — same text
    again.reload()
    again.wait_for_selector(".notice.ok", timeout=20000)
    assert again.text_content("#output") == " ".join(words)


def test_reload_mid_stream_resumes_from_session_storage(served, context):
    app, server = served
    words = [f"w{i}" for i in range(100)]
    tid = app.submit("stream_text", {"text": " ".join(words), "tokens_per_second": 40})
    page = context.new_page()
    page.goto(f"{server.url}/ui/tasks/{tid}")
    page.wait_for_function("document.querySelector('#output').textContent.includes('w8 ')")
    page.reload()  # same tab: sessionStorage survives, the page connects with ?after=
    page.wait_for_selector(".notice.ok", timeout=20000)
    assert page.text_content("#output") == " ".join(words) == store_text(app, tid)


def test_request_bound_tab_closed_mid_stream_is_cancelled(served, context):
    app, server = served
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector("#task-type")
    page.select_option("#task-type", "stream_text")
    page.fill("#f-text", " ".join(f"b{i}" for i in range(400)))
    page.fill("#f-tokens_per_second", "40")
    page.check("input[name=mode][value=bound]")
    page.click("#submit-button")
    page.wait_for_function("document.querySelector('#output').textContent.includes('b5 ')")
    tid = page.url.rsplit("/", 1)[1]
    page.close()
    snap = wait_for(lambda: (s := app.query(tid)).terminal and s, timeout=15)
    assert snap.state is State.CANCELLED and snap.cancel_reason.value == "client_disconnected"
    reopened = context.new_page()
    reopened.goto(f"{server.url}/ui/tasks/{tid}")
    reopened.wait_for_selector(".notice", timeout=15000)
    partial = reopened.text_content("#output")
    assert partial and partial == store_text(app, tid) and "b399" not in partial
    assert "not undone" in reopened.text_content("#verdict")


def test_cancel_from_the_task_page_shows_both_facts(served, context):
    app, server = served
    tid = app.submit("t.slow_steps", {"steps": 200})
    wait_for(lambda: app.query(tid).state is State.RUNNING)
    page = context.new_page()
    page.goto(f"{server.url}/ui/tasks/{tid}")
    page.wait_for_selector("#state:text('running')")
    page.keyboard.press("Tab")  # keyboard-usable: the cancel button takes focus
    page.focus("#cancel")
    page.keyboard.press("Enter")
    page.wait_for_selector("#fact-accepted.done")
    assert page.text_content("#state") in ("cancel_requested", "cancelled")
    page.wait_for_selector("#fact-stopped.done", timeout=10000)
    assert page.text_content("#state") == "cancelled"
    assert app.query(tid).state is State.CANCELLED


def test_a_cancel_answer_arriving_after_the_end_does_not_put_the_state_back(served, context):
    # The cancel's answer (state cancel_requested) and the stream's end (cancelled) race;
    # hold the answer until the end has been shown, the order CI once hit by chance.
    app, server = served
    tid = app.submit("t.slow_steps", {"steps": 200})
    wait_for(lambda: app.query(tid).state is State.RUNNING)
    page = context.new_page()

    def answer_late(route):  # type: ignore[no-untyped-def]
        response = route.fetch()
        wait_for(lambda: app.query(tid).terminal, timeout=10)
        time.sleep(0.5)  # the end event reaches the page meanwhile
        route.fulfill(response=response)

    page.route("**/cancel", answer_late)
    page.goto(f"{server.url}/ui/tasks/{tid}")
    page.wait_for_selector("#state:text('running')")
    page.click("#cancel")
    page.wait_for_selector("#fact-accepted.done", timeout=15000)
    page.wait_for_selector("#fact-stopped.done")
    assert page.text_content("#state") == "cancelled"
    assert app.query(tid).state is State.CANCELLED


def test_a_pruned_tasks_page_says_so(served, context):
    from datetime import timedelta

    app, server = served
    tid = app.submit("t.echo", {"value": 1})
    app.cancel(tid)  # queued: cancelled; already claimed: it ends (cancelled or done)
    wait_for(lambda: app.query(tid).terminal)
    time.sleep(0.01)  # past its end on SQLite's millisecond clock
    assert app.prune(timedelta(0))["tasks"] == 1
    page = context.new_page()
    page.goto(f"{server.url}/ui/tasks/{tid}")
    page.wait_for_selector("#verdict .notice")
    assert "was pruned" in page.text_content("#verdict")
    assert page.text_content("#state") == "not found"
    assert page.is_disabled("#cancel")


def test_a_bad_payload_shows_an_error_next_to_the_field_and_creates_nothing(served, context):
    app, server = served
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector("#f-text")
    page.fill("#f-text", "some words")
    page.fill("#f-top", "-3")
    page.click("#submit-button")
    page.wait_for_function("document.querySelector('#f-top-error').textContent.length > 0")
    assert "top" in page.text_content("#f-top-error")
    assert page.url.endswith("/")
    assert sum(app.counts().values()) == 0


def test_list_shows_counts_and_filters_on_a_narrow_window(served, browser):
    app, server = served
    for i in range(3):
        app.run(app.submit("t.echo", {"value": i}))
    app.submit("t.hold", {"name": "never-released"})
    ctx = browser.new_context(
        viewport={"width": 380, "height": 800}, color_scheme="dark", **BYPASS_CSP
    )
    page = ctx.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector("#tasks tbody tr")
    assert "succeeded 3" in page.text_content("#counts")
    page.select_option("#state-filter", "succeeded")
    page.wait_for_function("document.querySelectorAll('#tasks tbody tr').length === 3")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400  # readable on a narrow window: no page-wide horizontal scroll
    ctx.close()
    from tests.helpers.sample_tasks import latch

    latch("never-released").set()


def test_token_login_from_the_page(tmp_path, browser):
    app = make_app(f"sqlite:///{tmp_path / 'auth.db'}")
    with ServiceThread(app, token="s3cret") as server:
        ctx = browser.new_context(**BYPASS_CSP)
        page = ctx.new_page()
        page.goto(server.url + "/")
        page.wait_for_selector("#login:not([hidden])")
        page.fill("#token", "wrong")
        page.click("#login-form button")
        page.wait_for_function("document.querySelector('#login-error').textContent.length > 0")
        page.fill("#token", "s3cret")
        page.click("#login-form button")
        page.wait_for_selector("#counts li")
        ctx.close()
    app.close()


def test_the_queues_page_shows_depth_limits_pause_and_schedules(served, context):
    app, server = served
    app.pause("mail")  # nothing of it runs while the test looks
    for i in range(3):
        app.submit("t.echo", {"value": i}, queue="mail", priority=i)
    app.schedule("nightly", "t.echo", cron="0 3 * * *", payload={"value": 1})
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector("#tasks tbody tr")
    assert "mail" in page.inner_text("#tasks tbody")  # the list shows queues
    page.click("nav >> text=Queues")
    page.wait_for_url("**/ui/queues")
    row = page.locator("#queues tr[data-queue=mail]")
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[:3] == ["mail", "3", "0"] and cells[6] == "paused", cells
    # resume from the page: the store says so, and the worker drains the queue
    row.locator("button").click()
    wait_for(lambda: not next(q for q in app.queues() if q["name"] == "mail")["paused"])
    wait_for(lambda: app.counts()["queued"] == 0)
    page.wait_for_function(
        "document.querySelector('#queues tr[data-queue=mail] td:nth-child(2)').textContent === '0'"
    )
    # limits from the form; a bad rate is explained and changes nothing
    page.fill("#limit-queue", "mail")
    page.fill("#limit-rate", "fast")
    page.click("#limits-button")
    page.wait_for_function("document.querySelector('#limits-error').textContent.includes('rate')")
    assert next(q for q in app.queues() if q["name"] == "mail")["rate"] is None
    page.fill("#limit-concurrency", "4")
    page.fill("#limit-rate", "100/s")
    page.click("#limits-button")
    wait_for(lambda: next(q for q in app.queues() if q["name"] == "mail")["concurrency"] == 4)
    page.wait_for_function(
        "document.querySelector('#queues tr[data-queue=mail] td:nth-child(5)').textContent"
        " === '100/s'"
    )
    # the last hour's charts: the three claims of mail, drawn from what the claims stored
    chart = page.locator("#charts [data-chart=mail]")
    chart.wait_for()
    # at least three: on a loaded machine a claim ahead may be given back and claimed
    # again, and the chart counts every claim
    import re

    shown = re.search(r"(\d+) claims", chart.inner_text())
    assert shown is not None and int(shown.group(1)) >= 3, chart.inner_text()
    assert chart.locator("svg[aria-label='claims/s'] rect.bar").count() == 60
    titles = chart.locator("svg[aria-label='claims/s'] title").all_text_contents()
    assert any(f": {shown.group(1)} claims" in t for t in titles), titles
    page.screenshot(path=str(ROOT / "docs" / "queues.png"), full_page=True)
    # the schedules page: its expression and next tick
    page.click("nav >> text=Schedules")
    page.wait_for_url("**/ui/schedules")
    sched = page.locator("#schedules tr[data-schedule=nightly]")
    sched.wait_for()
    texts = sched.locator("td").all_inner_texts()
    assert texts[1] == "t.echo" and texts[2].startswith("0 3 * * *") and texts[3] != "—", texts
    page.screenshot(path=str(ROOT / "docs" / "schedules.png"), full_page=True)


def test_the_task_page_shows_waits_steps_signals_and_children(served, context):
    """approval_flow in the browser: the draft streams, the page says it waits for the
    signal, "Send signal" approves it, its three wordfreq children appear under it and
    the report arrives — all from the page."""
    app, server = served
    tid = app.submit("approval_flow", {})
    page = context.new_page()
    page.goto(server.url + f"/ui/tasks/{tid}")
    page.wait_for_function(
        "document.querySelector('#wait-now') && !document.querySelector('#wait-now').hidden"
    )
    assert "approve" in page.inner_text("#wait-now")
    page.wait_for_function("document.querySelector('#output').textContent.startsWith('Draft:')")
    # the output streams (SSE); the journal is re-read on the page's tick, maybe later
    page.wait_for_function("document.querySelectorAll('#journal tr[data-kind=step]').length >= 2")
    steps = page.locator("#journal tr[data-kind=step] td:nth-child(2)").all_inner_texts()
    assert steps == ["draft", "stream the draft"], steps
    page.fill("#signal-name", "approve")
    page.fill("#signal-data", "{bad")
    page.click("#signal-button")
    page.wait_for_function("document.querySelector('#signal-error').textContent.includes('JSON')")
    assert app.signals(tid) == []  # nothing was sent
    page.fill("#signal-data", '{"by": "the browser"}')
    page.click("#signal-button")
    page.wait_for_selector("#signals li[data-signal=approve]")
    page.wait_for_function("document.querySelectorAll('#children li').length === 3")
    page.wait_for_function(
        "document.querySelector('#state').textContent === 'succeeded'", timeout=20000
    )
    snap = app.query(tid)
    assert snap.result["approved"] is True and snap.result["by"] == "the browser"
    assert {c["state"] for c in snap.result["children"]} == {"succeeded"}
    assert "resumed" in page.inner_text("#attempts")
    page.wait_for_function(
        "[...document.querySelectorAll('#children li .state')]"
        ".every(s => s.textContent === 'succeeded')"
    )
    page.screenshot(path=str(ROOT / "docs" / "durable.png"), full_page=True)
    child = snap.result["children"][0]["id"]
    page.goto(server.url + f"/ui/tasks/{child}")
    page.wait_for_selector(f"#parent a[href$='ui/tasks/{tid}']")


def test_the_workers_page_shows_each_worker_and_what_it_runs(served, context, tmp_path):
    app, server = served
    hold = tmp_path / "hold"
    hold.mkdir()
    tid = app.submit("t.file_hold", {"dir": str(hold)})
    app.store.register_worker("gone-worker")
    app.store.unregister_worker("gone-worker")
    page = context.new_page()
    page.goto(server.url + "/")
    page.click("nav >> text=Workers")
    page.wait_for_url("**/ui/workers")
    live = page.locator("#workers tr[data-state=live]")
    live.wait_for()
    page.wait_for_selector(f"#workers tr[data-state=live] a[href$='ui/tasks/{tid}']")
    cells = live.locator("td").all_inner_texts()
    assert cells[1] == "live" and cells[3] == "thread" and cells[4] == "all", cells
    assert cells[5] == "2" and cells[7].endswith("ago"), cells
    stopped = page.locator("#workers tr[data-worker=gone-worker]")
    assert stopped.locator("td").nth(1).inner_text() == "stopped"
    page.screenshot(path=str(ROOT / "docs" / "workers.png"), full_page=True)
    (hold / "release").write_text("")
    wait_for(lambda: app.query(tid).terminal)


def test_bulk_cancel_and_retry_from_the_filtered_list_ask_first(served, context):
    app, server = served
    app.pause("bulk")  # they stay queued while the page acts on them
    ids = [app.submit("t.echo", {"value": i}, queue="bulk") for i in range(5)]
    other = app.submit("t.echo", {"value": 9}, queue="elsewhere", run_at=None, delay=3600)
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_selector("#tasks tbody tr")
    page.fill("#queue-filter", "bulk")
    page.press("#queue-filter", "Enter")
    page.click("body")  # the change event
    page.wait_for_function("document.querySelectorAll('#tasks tbody tr').length === 5")
    # every id whole and in view, where a user copies it (no scrolling, no ellipsis)
    shown = page.locator("#tasks code.task-id").all_inner_texts()
    assert sorted(shown) == sorted(ids)
    assert page.evaluate(
        "(() => { const w = document.querySelector('#tasks').closest('.table-wrap');"
        " return w.scrollWidth <= w.clientWidth; })()"
    )
    page.click("#bulk-cancel")
    page.wait_for_selector("#bulk-dialog[open]")
    assert page.inner_text("#bulk-question") == "Cancel 5 task(s)?"
    page.screenshot(path=str(ROOT / "docs" / "console-bulk.png"), full_page=True)
    page.click("#bulk-back")
    page.wait_for_function("document.querySelector('#bulk-result').textContent.includes('Nothing')")
    assert {app.query(t).state for t in ids} == {State.QUEUED}  # nothing changed
    page.click("#bulk-cancel")
    page.wait_for_selector("#bulk-dialog[open]")
    page.click("#bulk-confirm")
    page.wait_for_function(
        "document.querySelector('#bulk-result').textContent.includes('5 cancelled')"
    )
    assert {app.query(t).state for t in ids} == {State.CANCELLED}
    assert app.query(other).state is State.QUEUED  # outside the filter: untouched
    page.select_option("#state-filter", "cancelled")
    page.click("#bulk-retry")
    page.wait_for_selector("#bulk-dialog[open]")
    assert page.inner_text("#bulk-question") == "Retry 5 task(s)?"
    page.click("#bulk-confirm")
    page.wait_for_function(
        "document.querySelector('#bulk-result').textContent.includes('5 retried')"
    )
    made = app.search(queue="bulk", state="queued").items
    assert sorted(m.retry_of for m in made) == sorted(ids)  # type: ignore[type-var]
    # an empty filter is refused in the page, before anything is asked of the server
    page.select_option("#state-filter", "")
    page.fill("#queue-filter", "")
    page.click("#bulk-cancel")
    page.wait_for_function(
        "document.querySelector('#bulk-result').textContent.includes('empty filter')"
    )
    assert app.query(other).state is State.QUEUED


def test_the_task_page_timeline_and_retry(served, context):
    """A flaky task's attempts on the timeline (epoch, worker, lease, outcome), then a
    failed task retried from its page: the new task's page says whose retry it is."""
    app, server = served
    from tasklab.core.policy import Backoff

    app.settings = dataclasses.replace(app.settings, backoff=Backoff(base=0.05, jitter=0.0))
    flaky = app.submit("t.flaky", {"fail_times": 2})
    wait_for(lambda: app.query(flaky).terminal, 20)
    page = context.new_page()
    page.goto(server.url + f"/ui/tasks/{flaky}")
    page.wait_for_function("document.querySelectorAll('#timeline tbody tr').length === 3")
    rows = [
        page.locator(f"#timeline tr[data-attempt='{n}'] td").all_inner_texts() for n in (1, 2, 3)
    ]
    assert [r[5] for r in rows] == ["retried", "retried", "succeeded"], rows
    assert [r[1] for r in rows] == ["1", "2", "3"]  # a new epoch per attempt
    assert "Flaky" in rows[0][6] and rows[0][2].startswith(app.owner.split(":")[0]), rows
    page.screenshot(path=str(ROOT / "docs" / "task-timeline.png"), full_page=True)
    failed = app.submit("t.boom", {"message": "kaput"})
    wait_for(lambda: app.query(failed).terminal)
    page.goto(server.url + f"/ui/tasks/{failed}")
    page.wait_for_function("!document.querySelector('#retry').disabled")
    page.click("#retry")
    page.wait_for_selector(f"#retry-of a[href$='ui/tasks/{failed}']")
    new_id = page.url.rsplit("/", 1)[-1]
    assert new_id != failed and app.query(new_id).retry_of == failed
    assert app.query(failed).state is State.FAILED  # the ended one stays as it ended


def test_another_site_cannot_frame_the_console(served, strict_context):
    """The console's buttons act (cancel, retry, bulk actions): a page of another
    origin framing it could borrow an operator's clicks, and a console without a token
    has no cookie to withhold. Its pages say `frame-ancestors 'self'`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    _, server = served
    framing = (
        f'<!doctype html><iframe id="f" src="{server.url}/" width="800" height="600"></iframe>'
    )

    class Other(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = framing.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    other = ThreadingHTTPServer(("127.0.0.1", 0), Other)  # another port: another origin
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        page = strict_context.new_page()
        page.goto(f"http://127.0.0.1:{other.server_port}/")
        page.wait_for_selector("#f")
        time.sleep(1.5)  # time for the frame to load, were it allowed to
        frame = page.frame_locator("#f")
        assert frame.locator("#f-text").count() == 0
    finally:
        other.shutdown()
        other.server_close()


def test_every_page_runs_within_its_content_security_policy(served, strict_context):
    app, server = served
    tid = app.submit("t.echo", {"value": 1})
    app.run(tid)
    refused: list[str] = []
    page = strict_context.new_page()
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    checks = [
        ("/", "#tasks tbody tr"),
        (f"/ui/tasks/{tid}", "#state"),
        ("/ui/queues", "main"),
        ("/ui/schedules", "main"),
        ("/ui/workers", "main"),
    ]
    for path, selector in checks:
        resp = page.goto(server.url + path)
        assert (
            resp is not None and "frame-ancestors 'self'" in resp.headers["content-security-policy"]
        )
        page.wait_for_selector(selector)
    assert refused == []
