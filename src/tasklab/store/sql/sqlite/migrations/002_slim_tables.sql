-- A submit touches two b-trees instead of five: the tasks live in one b-tree keyed by
-- id (WITHOUT ROWID: no separate rowid table and key index), the idempotency key is
-- indexed only where there is one, and tasks_by_state leaves queued tasks to
-- tasks_claimable. The outbox is one b-tree keyed by task (one notification per task);
-- nothing looks a row up by its event id, which is unique by construction (80 random
-- bits). Fewer pages per commit is what single submits and group commits wait for:
-- each page is a WAL frame to write and flush.
CREATE TABLE tasks_v2 (
    id              TEXT NOT NULL PRIMARY KEY,
    task            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    retry_safe      INTEGER NOT NULL,
    request_bound   INTEGER NOT NULL DEFAULT 0,
    timeout         REAL,
    epoch           INTEGER NOT NULL DEFAULT 0,
    event_seq       INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    result          TEXT,
    error_code      TEXT,
    error_message   TEXT,
    cancel_reason   TEXT,
    lease_owner     TEXT,
    lease_until     REAL,
    run_after       REAL NOT NULL,
    created_at      REAL NOT NULL,
    started_at      REAL,
    finished_at     REAL
) WITHOUT ROWID;
INSERT INTO tasks_v2 SELECT * FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_v2 RENAME TO tasks;
CREATE UNIQUE INDEX tasks_key ON tasks (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_claimable ON tasks (run_after, id) WHERE state = 'queued';
CREATE INDEX tasks_live ON tasks (lease_until) WHERE state IN ('running', 'cancel_requested');
CREATE INDEX tasks_by_state ON tasks (state, id) WHERE state <> 'queued';
CREATE TABLE outbox_v2 (
    task_id    TEXT NOT NULL PRIMARY KEY,
    event_id   TEXT NOT NULL,
    created_at REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO outbox_v2 (task_id, event_id, created_at)
SELECT task_id, event_id, created_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v2 RENAME TO outbox;
