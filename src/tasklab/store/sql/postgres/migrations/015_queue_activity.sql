-- What the console's charts draw (SPEC §9: claims/s and enqueue→start latency over
-- the last hour): per queue and minute, the claims made and the time their tasks had
-- waited since they became runnable (run_after: the submit, the delay's end, a retry's
-- backoff), kept by the claim's own transaction — a claim is the only write that moves
-- a task's epoch. Sharded like task_counts (006), so that workers claiming at once do
-- not queue on one row. Rows older than a day are pruned by the workers' heartbeats.
-- Kept by the counters' trigger function (008, restated here with the activity added):
-- one trigger call per UPDATE statement, not two.
CREATE TABLE queue_activity (
    queue       TEXT NOT NULL,
    minute      BIGINT NOT NULL,  -- minutes since the Unix epoch
    shard       INTEGER NOT NULL,
    claims      BIGINT NOT NULL,
    wait_ms_sum DOUBLE PRECISION NOT NULL,
    wait_ms_max DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (queue, minute, shard)
);
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
    END IF;
    RETURN NULL;
END
$count$;
