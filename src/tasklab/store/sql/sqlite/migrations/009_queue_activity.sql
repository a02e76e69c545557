-- What the console's charts draw (SPEC §9: claims/s and enqueue→start latency over
-- the last hour): per queue and minute, the claims made and the time their tasks had
-- waited since they became runnable (run_after: the submit, the delay's end, a retry's
-- backoff), kept by the claim's own transaction — a claim is the only write that moves
-- a task's epoch. Read in ≤ 60 rows a queue, whatever the throughput; rows older than
-- a day are pruned by the workers' heartbeats.
CREATE TABLE queue_activity (
    queue       TEXT NOT NULL,
    minute      INTEGER NOT NULL,  -- minutes since the Unix epoch
    claims      INTEGER NOT NULL,
    wait_ms_sum REAL NOT NULL,
    wait_ms_max REAL NOT NULL,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;
CREATE TRIGGER tasks_activity AFTER UPDATE OF epoch ON tasks
WHEN NEW.epoch <> OLD.epoch
BEGIN
    INSERT INTO queue_activity (queue, minute, claims, wait_ms_sum, wait_ms_max)
    VALUES (NEW.queue, CAST((julianday('now') - 2440587.5) * 1440 AS INTEGER), 1,
            max(0, (julianday('now') - OLD.run_after) * 86400000.0),
            max(0, (julianday('now') - OLD.run_after) * 86400000.0))
    ON CONFLICT (queue, minute) DO UPDATE SET
        claims = claims + 1,
        wait_ms_sum = wait_ms_sum + excluded.wait_ms_sum,
        wait_ms_max = max(wait_ms_max, excluded.wait_ms_max);
END;
