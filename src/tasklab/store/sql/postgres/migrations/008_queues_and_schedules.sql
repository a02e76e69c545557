-- Time, queues and limits (SPEC §7). A task now has a queue, a priority, and
-- optionally a concurrency key (with its task's per-key limit, copied at submit so
-- that the store alone enforces it) and a unique-while-live key.
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE tasks
    ADD COLUMN queue TEXT NOT NULL DEFAULT 'default',
    ADD COLUMN priority INTEGER NOT NULL DEFAULT 0,
    -- true while a queued task waits for its run_after (a delay, a retry's backoff).
    -- The claim walks only tasks with false (tasks_ready: no time filter in the walk,
    -- so no delayed task is ever stepped over); the claim first sets false on delayed
    -- tasks that have become due (found by tasks_delayed) — the stager of Oban or
    -- Solid Queue, run by whoever claims, with no leader.
    ADD COLUMN delayed BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN concurrency_key TEXT,
    ADD COLUMN concurrency_limit INTEGER,
    ADD COLUMN unique_key TEXT;
UPDATE tasks SET delayed = true WHERE state = 'queued' AND run_after > clock_timestamp();
DROP INDEX IF EXISTS tasks_claimable;
-- Claim order: higher priority first, then the time it became runnable (its submit
-- time unless delayed), then id. One index walk per queue.
CREATE INDEX tasks_ready ON tasks (queue, priority DESC, run_after, id)
    WHERE state = 'queued' AND NOT delayed;
CREATE INDEX tasks_delayed ON tasks (run_after) WHERE state = 'queued' AND delayed;
-- Queued tasks with a per-key limit, by queue: a claimer asks whether a queue has any
-- (then its claims there take the limited path); tasks without one never enter it.
CREATE INDEX tasks_keyed ON tasks (queue) WHERE state = 'queued' AND concurrency_limit IS NOT NULL;
-- Unique only while live: a finished task frees its key.
CREATE UNIQUE INDEX tasks_unique ON tasks (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running', 'cancel_requested');
-- Tasks per queue, state and shard (see 006): counts() sums them, a limited claim
-- reads its queue's live tasks here (never by scanning them), and the pseudo-state
-- 'claimed' is a running total of claims per queue. key_counts: live tasks per
-- (task name, concurrency key), for per-key limits.
DROP TRIGGER task_counts_insert ON tasks;
DROP TRIGGER task_counts_update ON tasks;
DROP TRIGGER task_counts_delete ON tasks;
DROP TABLE task_counts;
CREATE TABLE task_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    shard INTEGER NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (queue, state, shard)
);
INSERT INTO task_counts (queue, state, shard, n)
SELECT queue, state, 0, COUNT(*) FROM tasks GROUP BY queue, state;
CREATE TABLE key_counts (
    task TEXT NOT NULL,
    key TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (task, key)
);
-- Claims are the only writes that move an epoch (by one each): the sum of the epochs
-- moved is the number of claims, without joining the transition tables.
CREATE OR REPLACE FUNCTION tasklab_count_states() RETURNS trigger LANGUAGE plpgsql
SET enable_sort = on SET jit = off AS $count$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_counts AS c (queue, state, shard, n)
        SELECT queue, state, pg_backend_pid() % 64, COUNT(*) FROM new_rows
        GROUP BY queue, state ORDER BY queue, state
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO task_counts AS c (queue, state, shard, n)
        SELECT queue, state, pg_backend_pid() % 64, -COUNT(*) FROM old_rows
        GROUP BY queue, state ORDER BY queue, state
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO task_counts AS c (queue, state, shard, n)
        SELECT queue, state, pg_backend_pid() % 64, SUM(d) FROM (
            SELECT queue, state, -1 AS d FROM old_rows
            UNION ALL SELECT queue, state, 1 AS d FROM new_rows
            UNION ALL SELECT queue, 'claimed', -epoch FROM old_rows
            UNION ALL SELECT queue, 'claimed', epoch FROM new_rows) AS moved
        GROUP BY queue, state HAVING SUM(d) <> 0 ORDER BY queue, state
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
        INSERT INTO key_counts AS k (task, key, n)
        SELECT task, concurrency_key, SUM(d) FROM (
            SELECT task, concurrency_key, -1 AS d FROM old_rows
            WHERE concurrency_key IS NOT NULL AND state IN ('running', 'cancel_requested')
            UNION ALL SELECT task, concurrency_key, 1 AS d FROM new_rows
            WHERE concurrency_key IS NOT NULL AND state IN ('running', 'cancel_requested'))
            AS moved
        GROUP BY task, concurrency_key HAVING SUM(d) <> 0 ORDER BY task, concurrency_key
        ON CONFLICT (task, key) DO UPDATE SET n = k.n + excluded.n;
    END IF;
    RETURN NULL;
END
$count$;
CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_count_states();
CREATE TRIGGER task_counts_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_count_states();
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_count_states();
-- Queue settings. A queue without a row is open and unlimited. The rate limit is a
-- token bucket: `rate_count` tokens at most, refilled continuously at
-- rate_count/rate_period per second (database clock); a claim takes one per task.
CREATE TABLE queues (
    name        TEXT PRIMARY KEY,
    paused      BOOLEAN NOT NULL DEFAULT false,
    concurrency INTEGER,
    rate_count  INTEGER,
    rate_period DOUBLE PRECISION,
    tokens      DOUBLE PRECISION,
    tokens_at   TIMESTAMPTZ,
    updated_at  TIMESTAMPTZ NOT NULL
);
-- Schedules: made by @app.periodic (origin 'code', written again at each start) or
-- app.schedule (origin 'runtime'). next_tick is the next tick not yet submitted.
CREATE TABLE schedules (
    name         TEXT PRIMARY KEY,
    task         TEXT NOT NULL,
    cron         TEXT,
    every_s      DOUBLE PRECISION,
    timezone     TEXT NOT NULL,
    payload      TEXT NOT NULL,
    queue        TEXT,
    priority     INTEGER,
    catch_up     TEXT NOT NULL,
    origin       TEXT NOT NULL,
    next_tick    TIMESTAMPTZ NOT NULL,
    last_tick    TIMESTAMPTZ,
    last_task_id TEXT,
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_tick);
-- Delayed tasks whose time has come become claimable (a bounded batch per call). The
-- probe first: an UPDATE of no rows would still run the statement-level triggers.
CREATE FUNCTION tasklab_promote() RETURNS void LANGUAGE plpgsql AS $promote$
BEGIN
    IF EXISTS (SELECT 1 FROM tasks q
               WHERE q.state = 'queued' AND q.delayed AND q.run_after <= clock_timestamp()) THEN
        UPDATE tasks t SET delayed = false WHERE t.id IN (
            SELECT q.id FROM tasks q
            WHERE q.state = 'queued' AND q.delayed AND q.run_after <= clock_timestamp()
            ORDER BY q.run_after LIMIT 1000 FOR UPDATE SKIP LOCKED);
    END IF;
END
$promote$;
-- The claim of one open, unlimited queue (see 002 for why PL/pgSQL and enable_sort).
-- A queue paused or limited meanwhile is left to the limited claim, which takes the
-- queue's lock and reads its counters (store/shared/limits.py).
DROP FUNCTION IF EXISTS tasklab_claim(TEXT[], INTEGER, TEXT, DOUBLE PRECISION);
CREATE FUNCTION tasklab_claim(
    names TEXT[], wanted TEXT, lim INTEGER, claimant TEXT, lease DOUBLE PRECISION)
RETURNS TABLE (id TEXT, task TEXT, payload TEXT, epoch BIGINT, attempt INTEGER,
               max_attempts INTEGER)
LANGUAGE plpgsql SET enable_sort = off AS $claim$
#variable_conflict use_column
BEGIN
    PERFORM tasklab_promote();
    IF EXISTS (SELECT 1 FROM queues s WHERE s.name = wanted
               AND (s.paused OR s.concurrency IS NOT NULL OR s.rate_count IS NOT NULL)) THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH picked AS (
        SELECT q.id FROM tasks q
        WHERE q.queue = wanted AND q.state = 'queued' AND NOT q.delayed
          AND q.task = ANY(names) AND NOT q.request_bound AND q.concurrency_limit IS NULL
        ORDER BY q.priority DESC, q.run_after, q.id LIMIT lim
        FOR UPDATE SKIP LOCKED)
    UPDATE tasks t SET state = 'running', epoch = t.epoch + 1, attempt = t.attempt + 1,
        lease_owner = claimant,
        lease_until = clock_timestamp() + make_interval(secs => lease),
        started_at = clock_timestamp(), error_code = NULL, error_message = NULL
    FROM picked WHERE t.id = picked.id
    RETURNING t.id, t.task, t.payload, t.epoch, t.attempt, t.max_attempts;
END
$claim$;
-- A limited claim's candidates: the first `lim` runnable tasks of one queue in claim
-- order, locked (skipping those another claimer holds). A function for the same
-- reason as tasklab_claim: its own planner setting, an index walk and never a sort.
CREATE FUNCTION tasklab_candidates(wanted TEXT, names TEXT[], lim INTEGER)
RETURNS TABLE (id TEXT, task TEXT, priority INTEGER, run_after TIMESTAMPTZ,
               concurrency_key TEXT, concurrency_limit INTEGER)
LANGUAGE plpgsql SET enable_sort = off AS $candidates$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT q.id, q.task, q.priority, q.run_after, q.concurrency_key, q.concurrency_limit
    FROM tasks q
    WHERE q.queue = wanted AND q.state = 'queued' AND NOT q.delayed AND NOT q.request_bound
      AND q.task = ANY(names)
    ORDER BY q.priority DESC, q.run_after, q.id LIMIT lim
    FOR UPDATE SKIP LOCKED;
END
$candidates$;
