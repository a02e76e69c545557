-- The promoter finds due tasks by its indexes' keys. `run_after <= clock_timestamp()`
-- cannot be an index condition (clock_timestamp() is volatile), so each claim's two
-- checks for due delayed and waiting tasks walked a whole index (or, planned while
-- `tasks` was empty, the whole table) and filtered it; a value read once into a
-- variable is a parameter, and bounds the walk: tasks_delayed from its start to now,
-- tasks_waking likewise. The checks are ordered walks that stop at the first due task
-- (PERFORM ... ORDER BY ... LIMIT 1, not EXISTS, which drops the order): planned while
-- `tasks` is empty, every index ties on cost, and without the order the check for
-- delayed tasks walked tasks_queued — every queued task — instead of tasks_delayed.
-- (Sessions run with enable_seqscan off: pgsessions.py.)
CREATE OR REPLACE FUNCTION tasklab_promote() RETURNS integer LANGUAGE plpgsql AS $promote$
DECLARE
    moved integer := 0;
    woken integer := 0;
    at_ TIMESTAMPTZ := clock_timestamp();
BEGIN
    PERFORM 1 FROM tasks q WHERE q.state = 'queued' AND q.delayed AND q.run_after <= at_
    ORDER BY q.run_after LIMIT 1;
    IF FOUND THEN
        UPDATE tasks t SET delayed = false WHERE t.ctid = ANY(ARRAY(
            SELECT q.ctid FROM tasks q
            WHERE q.state = 'queued' AND q.delayed AND q.run_after <= at_
            ORDER BY q.run_after LIMIT 1000 FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS moved = ROW_COUNT;
    END IF;
    PERFORM 1 FROM tasks w WHERE w.state = 'waiting' AND w.wake_at IS NOT NULL AND w.wake_at <= at_
    ORDER BY w.wake_at LIMIT 1;
    IF FOUND THEN
        UPDATE tasks t SET state = 'queued', delayed = false, run_after = clock_timestamp(),
            wake_at = NULL
        WHERE t.ctid = ANY(ARRAY(
            SELECT w.ctid FROM tasks w
            WHERE w.state = 'waiting' AND w.wake_at IS NOT NULL AND w.wake_at <= at_
            ORDER BY w.wake_at LIMIT 1000 FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS woken = ROW_COUNT;
    END IF;
    RETURN moved + woken;
END
$promote$;
