-- Plans that hold whatever the statistics say. A queue's tables swing from empty to
-- full and back; a VACUUM or ANALYZE that runs while `tasks` is empty records 0 rows,
-- and the planner then believes every later burst is empty too: the claim's
-- `UPDATE ... FROM picked WHERE t.id = picked.id` became a nested loop over a full
-- walk of the primary key (36 ms for 32 tasks out of 6,000, a drain 7x slower) until
-- the next ANALYZE. The functions now update the rows they locked by their
-- physical address (`ctid = ANY(array)`: a TID scan, whatever the estimates), the
-- batch statements say `id = ANY(array)` (a scan costed by the table's real size, no
-- join to misjudge). And no JIT: `enable_sort = off` prices any sort at 1e10, which
-- made the final 32-row sort compile its plan (66 ms a claim).
CREATE OR REPLACE FUNCTION tasklab_promote() RETURNS integer LANGUAGE plpgsql AS $promote$
DECLARE
    moved integer := 0;
    woken integer := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM tasks q
               WHERE q.state = 'queued' AND q.delayed AND q.run_after <= clock_timestamp()) THEN
        UPDATE tasks t SET delayed = false WHERE t.ctid = ANY(ARRAY(
            SELECT q.ctid FROM tasks q
            WHERE q.state = 'queued' AND q.delayed AND q.run_after <= clock_timestamp()
            ORDER BY q.run_after LIMIT 1000 FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS moved = ROW_COUNT;
    END IF;
    IF EXISTS (SELECT 1 FROM tasks w
               WHERE w.state = 'waiting' AND w.wake_at IS NOT NULL
                 AND w.wake_at <= clock_timestamp()) THEN
        UPDATE tasks t SET state = 'queued', delayed = false, run_after = clock_timestamp(),
            wake_at = NULL
        WHERE t.ctid = ANY(ARRAY(
            SELECT w.ctid FROM tasks w
            WHERE w.state = 'waiting' AND w.wake_at IS NOT NULL AND w.wake_at <= clock_timestamp()
            ORDER BY w.wake_at LIMIT 1000 FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS woken = ROW_COUNT;
    END IF;
    RETURN moved + woken;
END
$promote$;
CREATE OR REPLACE FUNCTION tasklab_claim(
    names TEXT[], wanted TEXT, lim INTEGER, claimant TEXT, lease DOUBLE PRECISION)
RETURNS TABLE (id TEXT, task TEXT, payload TEXT, epoch BIGINT, attempt INTEGER,
               max_attempts INTEGER, wait_kind TEXT)
LANGUAGE plpgsql SET enable_sort = off SET jit = off AS $claim$
#variable_conflict use_column
DECLARE
    picked TEXT[];  -- ids in claim order
    rows_ TID[];    -- where they are: locked by this transaction, so they stay there
BEGIN
    PERFORM tasklab_promote();
    IF EXISTS (SELECT 1 FROM queues s WHERE s.name = wanted
               AND (s.paused OR s.concurrency IS NOT NULL OR s.rate_count IS NOT NULL)) THEN
        RETURN;
    END IF;
    SELECT array_agg(q.id ORDER BY q.priority DESC, q.run_after, q.id), array_agg(q.ctid)
    INTO picked, rows_
    FROM (SELECT q.id, q.ctid, q.priority, q.run_after FROM tasks q
          WHERE q.queue = wanted AND q.state = 'queued' AND NOT q.delayed
            AND q.task = ANY(names) AND NOT q.request_bound AND q.concurrency_limit IS NULL
          ORDER BY q.priority DESC, q.run_after, q.id LIMIT lim
          FOR UPDATE SKIP LOCKED) q;
    IF picked IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM tasklab_take(picked, rows_, claimant, lease);  -- (010)
END
$claim$;
CREATE OR REPLACE FUNCTION tasklab_child_ended() RETURNS trigger LANGUAGE plpgsql AS $ended$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('tasklab.task:' || NEW.parent_id, 0));
    UPDATE tasks p SET state = 'queued', delayed = false, run_after = clock_timestamp(),
        wake_at = NULL
    WHERE p.id = NEW.parent_id AND p.state = 'waiting' AND p.wait_kind = 'join'
      AND NOT EXISTS (SELECT 1 FROM tasks c
                      WHERE c.id = ANY(ARRAY(SELECT jsonb_array_elements_text(
                                                 CAST(p.wait_ids AS jsonb))))
                        AND c.state NOT IN ('succeeded', 'failed', 'cancelled'));
    RETURN NULL;
END
$ended$;
