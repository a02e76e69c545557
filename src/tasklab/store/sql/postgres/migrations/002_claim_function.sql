-- Claiming in one statement, hence one round trip on an autocommit connection. SKIP
-- LOCKED lets many workers claim at once without waiting on each other. PL/pgSQL: its
-- plan is prepared once per session (a SQL function is planned on every call). The SET
-- clause: queue tables defeat the planner (its statistics say "no queued rows" moments
-- before thousands arrive, and it then sorts every queued row), so walk the claimable
-- index in order instead, for this function only.
CREATE OR REPLACE FUNCTION tasklab_claim(
    names TEXT[], lim INTEGER, claimant TEXT, lease DOUBLE PRECISION)
RETURNS TABLE (id TEXT, task TEXT, payload TEXT, epoch BIGINT, attempt INTEGER,
               max_attempts INTEGER)
LANGUAGE plpgsql SET enable_sort = off AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT q.id FROM tasks q
        WHERE q.state = 'queued' AND q.run_after <= clock_timestamp()
          AND q.task = ANY(names) AND NOT q.request_bound
        ORDER BY q.run_after, q.id LIMIT lim
        FOR UPDATE SKIP LOCKED)
    UPDATE tasks t SET state = 'running', epoch = t.epoch + 1, attempt = t.attempt + 1,
        lease_owner = claimant,
        lease_until = clock_timestamp() + make_interval(secs => lease),
        started_at = clock_timestamp(), error_code = NULL, error_message = NULL
    FROM picked WHERE t.id = picked.id
    RETURNING t.id, t.task, t.payload, t.epoch, t.attempt, t.max_attempts;
END
$claim$;
