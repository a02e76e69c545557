-- The first schema. Times are julian days (REAL) from the database clock, ms resolution.
CREATE TABLE IF NOT EXISTS tasks (
    id              TEXT PRIMARY KEY,
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
    idempotency_key TEXT UNIQUE,
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
);
CREATE INDEX IF NOT EXISTS tasks_claimable ON tasks (run_after, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS tasks_live ON tasks (lease_until)
    WHERE state IN ('running', 'cancel_requested');
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, id);
CREATE TABLE IF NOT EXISTS events (
    task_id  TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    attempt  INTEGER NOT NULL,
    type     TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       REAL NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS effects (
    task_id    TEXT NOT NULL,
    key        TEXT NOT NULL,
    status     TEXT NOT NULL,
    result     TEXT,
    attempt    INTEGER NOT NULL,
    started_at REAL NOT NULL,
    done_at    REAL,
    PRIMARY KEY (task_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    event_id   TEXT PRIMARY KEY,
    task_id    TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    event_id        TEXT NOT NULL,
    url             TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    delivered_at    REAL,
    next_attempt_at REAL NOT NULL,
    last_error      TEXT,
    PRIMARY KEY (event_id, url)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workers (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at REAL NOT NULL
);
