-- Workers you can see (SPEC §9): each executor's row says what it is (runner, queues,
-- slots, the lease owner its claims write), when it last beat, and how it ended:
-- 'stopped' (it said so) or 'dead' (its heartbeat grew older than a lease, or an
-- exclusive recovery found no executor alive). Ended rows are kept a while, then pruned
-- by the live workers' heartbeats. Liveness for recovery is still the advisory lock:
-- these rows are for people.
ALTER TABLE workers ADD COLUMN IF NOT EXISTS owner TEXT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS runner TEXT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS queues TEXT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS slots INTEGER;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS heartbeat_at TIMESTAMPTZ;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS ended TEXT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS ended_at TIMESTAMPTZ;
