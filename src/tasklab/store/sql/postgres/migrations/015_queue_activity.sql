-- What the console's charts draw (SPEC §9: claims/s and enqueue→start latency over
-- the last hour): per queue and minute, the claims made and the time their tasks had
-- waited since they became runnable (run_after: the submit, the delay's end, a retry's
-- backoff), kept by the claim's own transaction — a claim is the only write that moves
-- a task's epoch. Sharded like task_counts (006), so that workers claiming at once do
-- not queue on one row. Rows older than a day are pruned by the workers' heartbeats.
CREATE TABLE queue_activity (
    queue       TEXT NOT NULL,
    minute      BIGINT NOT NULL,  -- minutes since the Unix epoch
    shard       INTEGER NOT NULL,
    claims      BIGINT NOT NULL,
    wait_ms_sum DOUBLE PRECISION NOT NULL,
    wait_ms_max DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (queue, minute, shard)
);
CREATE FUNCTION tasklab_queue_activity() RETURNS trigger LANGUAGE plpgsql
SET enable_sort = on SET jit = off AS $activity$
BEGIN
    INSERT INTO queue_activity AS a (queue, minute, shard, claims, wait_ms_sum, wait_ms_max)
    SELECT n.queue, floor(extract(epoch FROM clock_timestamp()) / 60)::BIGINT,
           pg_backend_pid() % 16, COUNT(*),
           SUM(GREATEST(0, extract(epoch FROM clock_timestamp() - o.run_after) * 1000)),
           MAX(GREATEST(0, extract(epoch FROM clock_timestamp() - o.run_after) * 1000))
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.epoch <> o.epoch
    GROUP BY n.queue ORDER BY n.queue
    ON CONFLICT (queue, minute, shard) DO UPDATE SET
        claims = a.claims + excluded.claims,
        wait_ms_sum = a.wait_ms_sum + excluded.wait_ms_sum,
        wait_ms_max = GREATEST(a.wait_ms_max, excluded.wait_ms_max);
    RETURN NULL;
END
$activity$;
-- (every UPDATE statement: transition tables cannot be had with a column list)
CREATE TRIGGER tasks_activity AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_queue_activity();
