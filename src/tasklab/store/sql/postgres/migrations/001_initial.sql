-- The first schema. Times are timestamptz from clock_timestamp() (now() is the
-- transaction's start, not the moment of the write).
CREATE TABLE IF NOT EXISTS tasks (
    id              TEXT PRIMARY KEY,
    task            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    retry_safe      BOOLEAN NOT NULL,
    request_bound   BOOLEAN NOT NULL DEFAULT FALSE,
    timeout         DOUBLE PRECISION,
    epoch           BIGINT NOT NULL DEFAULT 0,
    event_seq       BIGINT NOT NULL DEFAULT 0,
    idempotency_key TEXT UNIQUE,
    result          TEXT,
    error_code      TEXT,
    error_message   TEXT,
    cancel_reason   TEXT,
    lease_owner     TEXT,
    lease_until     TIMESTAMPTZ,
    run_after       TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    started_at      TIMESTAMPTZ,
    finished_at     TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS tasks_claimable ON tasks (run_after, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS tasks_live ON tasks (lease_until)
    WHERE state IN ('running', 'cancel_requested');
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, id);
CREATE TABLE IF NOT EXISTS events (
    task_id  TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    attempt  INTEGER NOT NULL,
    type     TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE IF NOT EXISTS effects (
    task_id    TEXT NOT NULL,
    key        TEXT NOT NULL,
    status     TEXT NOT NULL,
    result     TEXT,
    attempt    INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    done_at    TIMESTAMPTZ,
    PRIMARY KEY (task_id, key)
);
CREATE TABLE IF NOT EXISTS outbox (
    event_id   TEXT PRIMARY KEY,
    task_id    TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    event_id        TEXT NOT NULL,
    url             TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    delivered_at    TIMESTAMPTZ,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    last_error      TEXT,
    PRIMARY KEY (event_id, url)
);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL
);
-- Wake-ups: notifications carry a task id only and arrive at commit; readers re-read.
CREATE OR REPLACE FUNCTION tasklab_notify_task() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tasklab', NEW.id);
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION tasklab_notify_event() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tasklab', NEW.task_id);
    RETURN NULL;
END $$ LANGUAGE plpgsql;
-- Only what a waiter acts on: a new task, a state change other than a claim (re-queued,
-- cancel requested, terminal). Claims, heartbeats and event counters notify nobody: at
-- a few hundred a second they would flood every listener.
DROP TRIGGER IF EXISTS tasks_notify ON tasks;
DROP TRIGGER IF EXISTS tasks_notify_insert ON tasks;
CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION tasklab_notify_task();
DROP TRIGGER IF EXISTS tasks_notify_state ON tasks;
CREATE TRIGGER tasks_notify_state AFTER UPDATE OF state ON tasks
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state <> 'running')
    EXECUTE FUNCTION tasklab_notify_task();
DROP TRIGGER IF EXISTS events_notify ON events;
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION tasklab_notify_event();
