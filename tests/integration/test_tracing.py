"""`tasklab[otel]` (SPEC §9): spans for submit, claim, execution and the terminal
commit, and one trace across processes — the submitting process's W3C context is
stored with the task and restored by a real worker process. Spans are recorded by the
SDK's in-memory exporter in each process (tests/helpers/traced_app.py), on both
stores. This test process sets no tracer provider: nothing is stored for its tasks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.acceptance.test_limits import stop
from tests.acceptance.test_sigkill import ROOT, TASKLAB, env
from tests.conftest import make_app, wait_for

SUBMIT = textwrap.dedent(
    """
    import sys
    from opentelemetry import trace
    from tests.helpers.traced_app import app
    app.engine.db = sys.argv[1]
    with trace.get_tracer("shop").start_as_current_span("checkout"):
        ok = app.submit("t.traced", {"value": 21})
        bad = app.submit("t.traced_fail", {})
    print(ok, bad)
    """
)


def _python(script: str, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """A script in a new Python process of its own (its tracer provider is its own)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_trace_from_the_submitter_through_a_worker_process(store_url, tmp_path: Path):
    submitted = tmp_path / "submit.jsonl"
    worked = tmp_path / "worker.jsonl"
    out = _python(SUBMIT, store_url, TASKLAB_TEST_SPANS=str(submitted))
    ok, bad = out.stdout.split()
    worker = subprocess.Popen(
        [*TASKLAB, "worker", "--db", store_url, "--app", "tests.helpers.traced_app:app"],
        cwd=ROOT,
        env=env(TASKLAB_TEST_SPANS=str(worked)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "ready" in worker.stderr.readline()  # type: ignore[union-attr]
    app = make_app(store_url)
    try:
        wait_for(lambda: app.query(ok).terminal and app.query(bad).terminal, 30)
    finally:
        assert stop([worker]) == [0]
    assert app.query(ok).result == 42
    app.close()

    mine = _spans(submitted)
    checkout = next(s for s in mine if s["name"] == "checkout")
    submits = [s for s in mine if s["name"] == "tasklab.submit"]
    assert len(submits) == 2 and all(s["parent"] == checkout["span_id"] for s in submits)
    trace_id = checkout["trace_id"]
    theirs = _spans(worked)
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for s in theirs:
        if s["name"].startswith("tasklab.") and "tasklab.task_id" in s["attributes"]:
            by_task.setdefault(s["attributes"]["tasklab.task_id"], {})[s["name"]] = s
    for task_id, submit in zip((ok, bad), submits, strict=True):
        spans = by_task[task_id]
        assert set(spans) == {"tasklab.claim", "tasklab.execute"}, spans.keys()
        for s in spans.values():  # the same trace, under the submit span
            assert s["trace_id"] == trace_id and s["parent"] == submit["span_id"], s
        execute = spans["tasklab.execute"]
        commits = [
            c for c in theirs if c["name"] == "tasklab.commit" and c["parent"] == execute["span_id"]
        ]
        assert len(commits) == 1 and commits[0]["trace_id"] == trace_id
        assert spans["tasklab.claim"]["start"] <= execute["start"] <= execute["end"]
    ok_exec = by_task[ok]["tasklab.execute"]
    assert ok_exec["status"] == "UNSET" and ok_exec["attributes"]["tasklab.state"] == "succeeded"
    inside = next(s for s in theirs if s["name"] == "inside")  # the task's own span
    assert inside["parent"] == ok_exec["span_id"] and inside["trace_id"] == trace_id
    bad_exec = by_task[bad]["tasklab.execute"]
    assert bad_exec["status"] == "ERROR" and bad_exec["attributes"]["tasklab.state"] == "failed"


def test_without_a_tracer_provider_nothing_is_stored(app):
    tid = app.submit("t.echo", {"value": 1})
    assert app.store.trace_context(tid) is None
    app.run(tid)
    assert app.query(tid).state.value == "succeeded"


LATE_PROVIDER = textwrap.dedent(
    """
    import json, os, tempfile
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from tasklab import TaskApp, tracing
    app = TaskApp("sqlite:///" + os.path.join(tempfile.mkdtemp(), "t.db"))

    @app.task(name="t.late")
    def late(ctx):
        return None

    before = tracing.enabled(), app.submit("t.late", {})
    trace.set_tracer_provider(TracerProvider())  # after tasklab has asked
    after = tracing.enabled(), app.submit("t.late", {})
    print(json.dumps([before[0], app.store.trace_context(before[1]) is None,
                      after[0], app.store.trace_context(after[1]) is None]))
    app.close()
    """
)


def test_a_provider_set_after_the_first_submits_is_used_from_then_on():
    # enabled() answers from a flag and the API's global (it is asked on every submit
    # and attempt): one set late must still turn tracing on
    out = _python(LATE_PROVIDER)
    assert json.loads(out.stdout.splitlines()[-1]) == [False, True, True, False]
