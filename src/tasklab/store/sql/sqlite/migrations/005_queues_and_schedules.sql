-- Time, queues and limits (SPEC §7). A task now has a queue, a priority, and
-- optionally a concurrency key (with its task's per-key limit, copied at submit so
-- that the store alone enforces it) and a unique-while-live key.
ALTER TABLE tasks ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
-- 1 while a queued task waits for its run_after (a delay, a retry's backoff). The
-- claim walks only tasks with 0 (tasks_ready: no time filter in the walk, so no delayed
-- task is ever stepped over); the claim transaction first sets 0 on the delayed tasks
-- that have become due (found by tasks_delayed). That is the stager of Oban or Solid
-- Queue, run by whoever claims, with no leader.
ALTER TABLE tasks ADD COLUMN delayed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
ALTER TABLE tasks ADD COLUMN concurrency_limit INTEGER;
ALTER TABLE tasks ADD COLUMN unique_key TEXT;
UPDATE tasks SET delayed = 1 WHERE state = 'queued' AND run_after > julianday('now');
DROP INDEX tasks_claimable;
-- Claim order: higher priority first, then the time it became runnable (its submit
-- time unless delayed), then id. One index walk per queue.
CREATE INDEX tasks_ready ON tasks (queue, priority DESC, run_after, id)
    WHERE state = 'queued' AND delayed = 0;
CREATE INDEX tasks_delayed ON tasks (run_after) WHERE state = 'queued' AND delayed = 1;
-- Queued tasks with a per-key limit, by queue: a claimer asks whether a queue has any
-- (then its claims there take the limited path); tasks without one never enter it.
CREATE INDEX tasks_keyed ON tasks (queue) WHERE state = 'queued' AND concurrency_limit IS NOT NULL;
-- Unique only while live: a finished task frees its key.
CREATE UNIQUE INDEX tasks_unique ON tasks (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running', 'cancel_requested');
-- Tasks per queue and state, kept by the transactions that change states: counts()
-- sums them, a limited claim reads its queue's running tasks here (never by scanning
-- them), and the pseudo-state 'claimed' is a running total of claims per queue.
DROP TRIGGER task_counts_insert;
DROP TRIGGER task_counts_update;
DROP TRIGGER task_counts_delete;
DROP TABLE task_counts;
CREATE TABLE task_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;
INSERT INTO task_counts (queue, state, n) SELECT queue, state, COUNT(*) FROM tasks GROUP BY queue, state;
CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts (queue, state, n) VALUES (new.queue, new.state, 1)
    ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_update AFTER UPDATE OF state ON tasks
WHEN old.state <> new.state BEGIN
    UPDATE task_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO task_counts (queue, state, n) VALUES (new.queue, new.state, 1)
    ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_claimed AFTER UPDATE OF state ON tasks
WHEN old.state = 'queued' AND new.state = 'running' BEGIN
    INSERT INTO task_counts (queue, state, n) VALUES (new.queue, 'claimed', 1)
    ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
END;
-- Live tasks per (task name, concurrency key), for per-key limits; kept the same way.
CREATE TABLE key_counts (
    task TEXT NOT NULL,
    key  TEXT NOT NULL,
    n    INTEGER NOT NULL,
    PRIMARY KEY (task, key)
) WITHOUT ROWID;
CREATE TRIGGER key_counts_update AFTER UPDATE OF state ON tasks
WHEN new.concurrency_key IS NOT NULL
 AND (old.state IN ('running', 'cancel_requested')) <> (new.state IN ('running', 'cancel_requested'))
BEGIN
    INSERT INTO key_counts (task, key, n)
    VALUES (new.task, new.concurrency_key,
            CASE WHEN new.state IN ('running', 'cancel_requested') THEN 1 ELSE -1 END)
    ON CONFLICT (task, key) DO UPDATE SET n = n + excluded.n;
END;
-- Queue settings. A queue without a row is open and unlimited. The rate limit is a
-- token bucket: `rate_count` tokens at most, refilled continuously at
-- rate_count/rate_period per second (database clock); a claim takes one per task.
CREATE TABLE queues (
    name        TEXT NOT NULL PRIMARY KEY,
    paused      INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER,
    rate_count  INTEGER,
    rate_period REAL,
    tokens      REAL,
    tokens_at   REAL,
    updated_at  REAL NOT NULL
) WITHOUT ROWID;
-- Schedules: made by @app.periodic (origin 'code', written again at each start) or
-- app.schedule (origin 'runtime'). next_tick is the next tick not yet submitted.
CREATE TABLE schedules (
    name         TEXT NOT NULL PRIMARY KEY,
    task         TEXT NOT NULL,
    cron         TEXT,
    every_s      REAL,
    timezone     TEXT NOT NULL,
    payload      TEXT NOT NULL,
    queue        TEXT,
    priority     INTEGER,
    catch_up     TEXT NOT NULL,
    origin       TEXT NOT NULL,
    next_tick    REAL NOT NULL,
    last_tick    REAL,
    last_task_id TEXT,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX schedules_due ON schedules (next_tick);
