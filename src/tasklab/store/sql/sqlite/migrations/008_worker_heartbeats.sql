-- Workers you can see (SPEC §9): each executor's row says what it is (runner, queues,
-- slots, the lease owner its claims write), when it last beat, and how it ended:
-- 'stopped' (it said so) or 'dead' (its heartbeat grew older than a lease, or an
-- exclusive recovery found no executor alive). Ended rows are kept a while, then pruned
-- by the live workers' heartbeats. Liveness for recovery is still the lock: these rows
-- are for people.
ALTER TABLE workers ADD COLUMN owner TEXT;
ALTER TABLE workers ADD COLUMN runner TEXT;
ALTER TABLE workers ADD COLUMN queues TEXT;
ALTER TABLE workers ADD COLUMN slots INTEGER;
ALTER TABLE workers ADD COLUMN heartbeat_at REAL;
ALTER TABLE workers ADD COLUMN ended TEXT;
ALTER TABLE workers ADD COLUMN ended_at REAL;
