-- Durable functions (SPEC §8): a task may wait — for a time, a signal or its
-- children — in the state 'waiting', which holds no lease and no slot. What it waits
-- for is on its row; its steps and waits are in the effect journal (effects).
ALTER TABLE tasks
    ADD COLUMN parent_id TEXT,
    ADD COLUMN wait_kind TEXT,  -- sleep | signal | join; kept into the resumed run
    ADD COLUMN wait_name TEXT,  -- the signal waited for
    ADD COLUMN wait_ids TEXT,   -- the children joined (JSON array)
    ADD COLUMN wake_at TIMESTAMPTZ;  -- a sleep's end or a wait's timeout
-- Waiting tasks that wake at a time, by that time: the claim's stager wakes the due
-- ones (one index range, usually empty) — no polling per waiting task.
CREATE INDEX tasks_waking ON tasks (wake_at) WHERE state = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX tasks_children ON tasks (parent_id, id) WHERE parent_id IS NOT NULL;
-- Signals, once per (task, name): a second one answers the first.
CREATE TABLE signals (
    task_id    TEXT NOT NULL,
    name       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (task_id, name)
);
-- A child that ends wakes its parent joined on it once none of the joined children is
-- still live. Under the parent's advisory lock, which the parent's suspend takes too:
-- of two children ending at once the later sees the earlier's commit, and a suspend
-- racing a child's end sees it or is seen by it (never neither).
CREATE FUNCTION tasklab_child_ended() RETURNS trigger LANGUAGE plpgsql AS $ended$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('tasklab.task:' || NEW.parent_id, 0));
    UPDATE tasks p SET state = 'queued', delayed = false, run_after = clock_timestamp(),
        wake_at = NULL
    WHERE p.id = NEW.parent_id AND p.state = 'waiting' AND p.wait_kind = 'join'
      AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(CAST(p.wait_ids AS jsonb)) AS j(cid)
                      JOIN tasks c ON c.id = j.cid
                      WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled'));
    RETURN NULL;
END
$ended$;
CREATE TRIGGER tasks_child_ended AFTER UPDATE OF state ON tasks
    FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL
                       AND NEW.state IN ('succeeded', 'failed', 'cancelled')
                       AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION tasklab_child_ended();
-- The stager wakes due waiting tasks too (sleeps, timeouts), and answers how many
-- tasks it made claimable.
DROP FUNCTION tasklab_promote();
CREATE FUNCTION tasklab_promote() RETURNS integer LANGUAGE plpgsql AS $promote$
DECLARE
    moved integer := 0;
    woken integer := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM tasks q
               WHERE q.state = 'queued' AND q.delayed AND q.run_after <= clock_timestamp()) THEN
        UPDATE tasks t SET delayed = false WHERE t.id IN (
            SELECT q.id FROM tasks q
            WHERE q.state = 'queued' AND q.delayed AND q.run_after <= clock_timestamp()
            ORDER BY q.run_after LIMIT 1000 FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS moved = ROW_COUNT;
    END IF;
    IF EXISTS (SELECT 1 FROM tasks w
               WHERE w.state = 'waiting' AND w.wake_at IS NOT NULL
                 AND w.wake_at <= clock_timestamp()) THEN
        UPDATE tasks t SET state = 'queued', delayed = false, run_after = clock_timestamp(),
            wake_at = NULL
        WHERE t.id IN (
            SELECT w.id FROM tasks w
            WHERE w.state = 'waiting' AND w.wake_at IS NOT NULL AND w.wake_at <= clock_timestamp()
            ORDER BY w.wake_at LIMIT 1000 FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS woken = ROW_COUNT;
    END IF;
    RETURN moved + woken;
END
$promote$;
-- Claims answer whether this run resumes a wait (wait_kind), for its first event.
DROP FUNCTION tasklab_claim(TEXT[], TEXT, INTEGER, TEXT, DOUBLE PRECISION);
CREATE FUNCTION tasklab_claim(
    names TEXT[], wanted TEXT, lim INTEGER, claimant TEXT, lease DOUBLE PRECISION)
RETURNS TABLE (id TEXT, task TEXT, payload TEXT, epoch BIGINT, attempt INTEGER,
               max_attempts INTEGER, wait_kind TEXT)
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
    RETURNING t.id, t.task, t.payload, t.epoch, t.attempt, t.max_attempts, t.wait_kind;
END
$claim$;
