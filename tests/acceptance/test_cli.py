"""The real `tasklab` command in subprocesses: shapes, exit codes, and bad input that
changes nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.acceptance.test_sigkill import APP, ROOT, TASKLAB, cli, env


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return cli(*args, check=False, stdin=stdin)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def counts(db: str) -> dict:
    return json.loads(run("stats", "--db", db, "--json").stdout)["counts"]


def test_submit_prints_the_id_and_json_shapes(db):
    done = run("submit", "wordfreq", "--payload", '{"text": "b a b"}', "--db", db)
    assert done.returncode == 0
    tid = done.stdout.strip()
    assert len(tid) == 24 and "\n" not in tid
    snap = json.loads(run("status", tid, "--db", db, "--json").stdout)
    assert set(snap) == {
        "id",
        "task",
        "payload",
        "state",
        "attempt",
        "max_attempts",
        "result",
        "error",
        "cancel_reason",
        "idempotency_key",
        "queue",
        "priority",
        "concurrency_key",
        "unique_key",
        "parent_id",
        "wait",
        "retry_of",
        "run_after",
        "created_at",
        "started_at",
        "finished_at",
    }
    assert snap["state"] == "queued"
    listed = json.loads(run("list", "--db", db, "--json").stdout)
    assert listed["next_cursor"] is None and "payload" not in listed["items"][0]
    again = json.loads(
        run(
            "submit",
            "wordfreq",
            "--payload",
            '{"text": "b a b"}',
            "--key",
            "k",
            "--db",
            db,
            "--json",
        ).stdout
    )
    assert again["created"] is True
    same = json.loads(
        run(
            "submit",
            "wordfreq",
            "--payload",
            '{"text": "b a b"}',
            "--key",
            "k",
            "--db",
            db,
            "--json",
        ).stdout
    )
    assert same["id"] == again["id"] and same["created"] is False


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["submit", "nope"], 2, "unknown_task"),
        (["submit", "wordfreq", "--payload", "{bad"], 2, "not valid JSON"),
        (["submit", "wordfreq", "--payload", "[1]"], 2, "JSON object"),
        (["submit", "wordfreq", "--payload", '{"txt": "x"}'], 2, "unexpected keyword"),
        (["submit", "wordfreq", "--payload", '{"text": "a", "path": "b"}'], 2, "exactly one"),
        (["submit", "wordfreq", "--payload", '{"path": "/etc/passwd"}'], 2, "data directory"),
        (["status", "nope"], 2, "not_found"),
        (["cancel", "nope"], 2, "not_found"),
        # a command line that is not UTF-8 (bytes 0xff 0xfe) is not text: no task has it
        (["status", "\udcff\udcfe"], 2, "not_found"),
        (["cancel", "\udcff"], 2, "not_found"),
        (["retry", "\udcff"], 2, "not_found"),
        (["webhooks", "remove", "\udcff"], 2, "lone surrogate"),
        (["list", "--state", "weird"], 2, "unknown state"),
        (["submit", "t.echo", "--app", "no.such.module:app"], 2, "cannot import"),
        (["worker", "--pin-cpu", "4096"], 2, "CPU 4096 is not available to this process"),
        (["worker", "--pin-cpu", "0", "--runner", "process"], 2, "for the thread runner"),
        (["serve", "--pin-cpu", "0", "--runner", "async"], 2, "for the thread runner"),
        (["worker", "--ahead", "3", "--runner", "process"], 2, "the thread runner's"),
    ],
)
def test_bad_input_is_a_clear_error_and_stores_nothing(db, args, code, message):
    done = run(*args, "--db", db)
    assert done.returncode == code
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sum(counts(db).values()) == 0


def test_oversized_payload_is_refused(db, tmp_path):
    big = json.dumps({"text": "x" * (1024 * 1024 + 10)})
    done = run("submit", "wordfreq", "--payload", "-", "--db", db, stdin=big)
    assert done.returncode == 2 and "larger than" in done.stderr
    (tmp_path / "p.json").write_text(big)
    done = run("submit", "wordfreq", "--payload", f"@{tmp_path / 'p.json'}", "--db", db)
    assert done.returncode == 2 and "larger than" in done.stderr
    assert sum(counts(db).values()) == 0


def test_wordfreq_reads_only_inside_the_data_dir(db, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("x y x")
    (tmp_path / "secret.txt").write_text("secret")
    (data / "link.txt").symlink_to(tmp_path / "secret.txt")
    ok = run(
        "submit", "wordfreq", "--payload", '{"path": "a.txt"}', "--db", db, "--data-dir", str(data)
    )
    assert ok.returncode == 0
    for bad in ["../secret.txt", "link.txt", str(tmp_path / "secret.txt")]:
        refused = run(
            "submit",
            "wordfreq",
            "--payload",
            json.dumps({"path": bad}),
            "--db",
            db,
            "--data-dir",
            str(data),
        )
        assert refused.returncode == 2 and "outside the data directory" in refused.stderr
    assert counts(db)["queued"] == 1


def test_watch_and_cancel_against_the_database(db):
    tid = run("submit", "wordfreq", "--payload", '{"text": "a a b"}', "--db", db).stdout.strip()
    cancelled = json.loads(run("cancel", tid, "--db", db, "--json").stdout)
    assert cancelled["request_accepted"] is True and cancelled["task"]["state"] == "cancelled"
    again = json.loads(run("cancel", tid, "--db", db, "--json").stdout)
    assert again["request_accepted"] is False
    watched = run("watch", tid, "--db", db, "--json")
    assert watched.returncode == 3  # ended, but not succeeded
    assert json.loads(watched.stdout)["state"] == "cancelled"


def test_worker_runs_and_watch_follows_progress(db, tmp_path):
    text = " ".join(["word"] * 20000)
    tid = run(
        "submit", "wordfreq", "--payload", json.dumps({"text": text}), "--db", db
    ).stdout.strip()
    with subprocess.Popen(
        [*TASKLAB, "worker", "--db", db, *APP],
        cwd=ROOT,
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    ) as worker:
        assert "ready" in worker.stderr.readline()  # type: ignore[union-attr]
        watched = run("watch", tid, "--db", db)
        worker.send_signal(15)
        assert worker.wait(20) == 0
    assert watched.returncode == 0, watched.stderr
    assert "succeeded" in watched.stdout and "word" in watched.stdout
    snap = json.loads(run("status", tid, "--db", db, "--json").stdout)
    assert snap["result"]["top"] == [["word", 20000]]


def test_help_lists_every_command():
    out = run("--help").stdout
    for cmd in ["submit", "status", "list", "cancel", "recover", "stats", "watch", "worker"]:
        assert cmd in out


def test_bench_queue_reports_every_figure_for_every_run(tmp_path):
    """Numbers are not asserted (benchmarks report them); the shape and the method are."""
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    done = run(
        "bench",
        "queue",
        "--db",
        db,
        "--n",
        "100",
        "--runs",
        "2",
        "--concurrency",
        "4",
        "--latency-samples",
        "10",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)["runs"]
    assert len(reports) == 2
    for r in reports:
        assert r["single_commit_per_s"] > 0 and r["enqueue_one_per_s"] > 0
        assert r["enqueue_batch_per_s"] > 0 and r["drain_per_s"]["4"] > 0
        # every drain says how busy the machine was meanwhile (Linux: /proc/stat); a
        # drain of 100 tasks lasts a few of its 10 ms ticks, spent waiting on fsync
        # (iowait, idle) as often as not: 0 is a reading (CI saw one), None is not
        assert set(r["busy_share"]) == set(r["drain_per_s"])
        assert all(0 <= share <= 1 for share in r["busy_share"].values())
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p99"]
        assert r["prune_per_s"] > 0
    assert counts(db) == dict.fromkeys(counts(db), 0)  # each run prunes what it made


def test_bench_search_and_handles_report_plans_and_latencies(tmp_path):
    search_db = f"sqlite:///{tmp_path / 'search.db'}"
    done = run("bench", "search", "--db", search_db, "--n", "2000", "--json")
    assert done.returncode == 0, done.stderr
    filters = json.loads(done.stdout)["filters"]
    assert set(filters) >= {"state queued", "task", "queue", "parent_id", "id prefix"}
    assert all(f["plan"] and f["first_page_ms"] > 0 for f in filters.values())
    handles_db = f"sqlite:///{tmp_path / 'handles.db'}"
    done = run("bench", "handles", "--db", handles_db, "--samples", "10", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["samples"] == 10 and 0 <= doc["p50_ms"] <= doc["max_ms"]


def test_webhooks_list_and_remove(db):
    assert json.loads(run("webhooks", "list", "--db", db, "--json").stdout) == {}
    from tasklab.store import open_store

    store = open_store(db)
    store.subscribe(["http://c.example/hook"])
    store.close()
    listed = run("webhooks", "list", "--db", db, "--json")
    assert json.loads(listed.stdout) == {"http://c.example/hook": 0}
    assert run("webhooks", "remove", "http://c.example/hook", "--db", db).returncode == 0
    gone = run("webhooks", "remove", "http://c.example/hook", "--db", db)
    assert gone.returncode == 2 and "no webhook subscription" in gone.stderr


def test_prune_deletes_old_terminal_tasks_and_refuses_a_bad_age(db):
    done = run("submit", "wordfreq", "--payload", '{"text": "a"}', "--db", db).stdout.strip()
    assert run("cancel", done, "--db", db).returncode == 0
    kept = run("submit", "wordfreq", "--payload", '{"text": "b"}', "--db", db).stdout.strip()
    for bad in ("-1d", "soon", "7y"):
        refused = run("prune", "--older-than", bad, "--db", db)
        assert refused.returncode == 2 and "is not a duration" in refused.stderr
    assert counts(db)["cancelled"] == 1
    assert json.loads(run("prune", "--older-than", "1h", "--db", db, "--json").stdout)["tasks"] == 0
    pruned = run("prune", "--older-than", "0s", "--db", db, "--json")
    assert pruned.returncode == 0
    assert json.loads(pruned.stdout) == {
        "events": 0,
        "effects": 0,
        "signals": 0,
        "deliveries": 0,
        "outbox": 1,
        "tasks": 1,
    }
    assert counts(db)["cancelled"] == 0 and counts(db)["queued"] == 1
    assert json.loads(run("status", kept, "--db", db, "--json").stdout)["state"] == "queued"
    assert run("status", done, "--db", db).returncode == 2
    plain = run("prune", "--older-than", "0s", "--db", db)
    assert plain.returncode == 0 and "deleted 0 tasks" in plain.stdout


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_bad_retention_is_refused_before_anything_runs(db, command):
    refused = run(command, "--retain", "a while", "--db", db)
    assert refused.returncode == 2 and "--retain 'a while' is not a duration" in refused.stderr


def test_list_never_truncates_an_id_in_an_80_column_terminal(db):
    ids = [run("submit", "wordfreq", "--payload", '{"text": "a"}', "--db", db).stdout.strip()]
    ids.append(run("submit", "wordfreq", "--payload", '{"text": "b"}', "--db", db).stdout.strip())
    assert all(len(tid) == 24 for tid in ids)
    listed = subprocess.run(
        [*TASKLAB, "list", "--db", db],
        cwd=ROOT,
        env=env(COLUMNS="80"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert max(len(line) for line in listed.splitlines()) <= 80, listed
    for tid in ids:
        assert tid in listed, listed  # whole, on one line: a user copies it from here


def test_watch_over_http_says_plainly_what_it_cannot_reach(db, tmp_path):
    """A server never reached: one line after a few seconds of retries (it was a
    traceback, after a minute of them); a server that refuses (401 without the token) says so
    with its message (a traceback too)."""
    import socket

    from tests.conftest import make_app
    from tests.helpers.servers import ServiceThread

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens once it is closed
    gone = run("watch", "0" * 24, "--url", f"http://127.0.0.1:{closed}")
    assert gone.returncode == 1 and "Traceback" not in gone.stderr
    assert "cannot follow" in gone.stderr and len(gone.stderr.strip().splitlines()) == 1
    app = make_app(f"sqlite:///{tmp_path / 'served.db'}")
    try:
        with ServiceThread(app, token="s3cret", embed_worker=False) as server:
            tid = app.submit("t.echo", {"value": 1})
            refused = run("watch", tid, "--url", server.url)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "answered 401" in refused.stderr, refused.stderr
    finally:
        app.close()
