-- name: schema_version_create
-- The table that records which migrations ran.
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);

-- name: schema_version_get
-- The highest migration applied.
SELECT COALESCE(MAX(version), 0) AS version FROM schema_version;

-- name: schema_version_set
-- Record a migration as applied.
INSERT INTO schema_version (version) VALUES (:version);

-- name: migration_lock
-- Serialise migrations between processes opening the same database.
SELECT pg_advisory_xact_lock(7411001);

-- name: dead_rows
-- Dead row versions of tasklab's tables, from the statistics (store/vacuum.py).
SELECT relname AS name, n_dead_tup AS dead FROM pg_stat_user_tables
WHERE relid IN (to_regclass('tasks'), to_regclass('events'), to_regclass('outbox'),
                to_regclass('deliveries'));

-- name: now
-- The database clock.
SELECT clock_timestamp() AS now;

-- name: insert_task
-- A new queued task; an existing idempotency key inserts nothing.
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, idempotency_key, run_after, created_at)
VALUES (:id, :task, :payload, 'queued', :max_attempts, :retry_safe, :request_bound,
        CAST(:timeout AS DOUBLE PRECISION), CAST(:idempotency_key AS TEXT),
        clock_timestamp(), clock_timestamp())
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, created_at, run_after;

-- name: insert_tasks
-- Many new tasks without idempotency keys in one statement: one plan and one pass
-- instead of a statement per row (`insert_task`'s parameters as arrays, one element
-- per task).
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, run_after, created_at)
SELECT t.id, t.task, t.payload, 'queued', t.max_attempts, t.retry_safe, t.request_bound,
       t.timeout, clock_timestamp(), clock_timestamp()
FROM unnest(CAST(:id AS TEXT[]), CAST(:task AS TEXT[]), CAST(:payload AS TEXT[]),
            CAST(:max_attempts AS INTEGER[]), CAST(:retry_safe AS BOOLEAN[]),
            CAST(:request_bound AS BOOLEAN[]), CAST(:timeout AS DOUBLE PRECISION[]))
     WITH ORDINALITY AS t(id, task, payload, max_attempts, retry_safe, request_bound,
                          timeout, n)
ORDER BY t.n
RETURNING id, created_at, run_after;

-- name: task_by_key
-- The task holding an idempotency key.
SELECT * FROM tasks WHERE idempotency_key = :key;

-- name: get_task
-- One task.
SELECT * FROM tasks WHERE id = :id;

-- name: list_tasks
-- A page of tasks, newest first (ids sort by creation time), optionally of one state.
SELECT * FROM tasks
WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)
  AND (CAST(:cursor AS TEXT) IS NULL OR id < :cursor)
ORDER BY id DESC LIMIT :limit;

-- name: count_states
-- Tasks per state, from the counters the state-changing transactions keep.
SELECT state, SUM(n) AS n FROM task_counts GROUP BY state;

-- name: count_states_exact
-- Tasks per state counted from the table (tests check the counters against it).
SELECT 'queued' AS state, COUNT(*) AS n FROM tasks WHERE state = 'queued'
UNION ALL
SELECT state, COUNT(*) AS n FROM tasks WHERE state <> 'queued' GROUP BY state;

-- name: states_of
-- The current state of several tasks.
SELECT id, state FROM tasks WHERE id = ANY(:ids);

-- name: cancel_queued
-- queued -> cancelled, terminal at once.
UPDATE tasks SET state = 'cancelled', cancel_reason = :reason, finished_at = clock_timestamp()
WHERE id = :id AND state = 'queued';

-- name: cancel_running
-- running -> cancel_requested; the executor sees it at its next checkpoint.
UPDATE tasks SET state = 'cancel_requested', cancel_reason = :reason
WHERE id = :id AND state = 'running';

-- name: claim_next
-- Claim up to :limit runnable tasks of the given names (tasklab_claim, schema_2).
SELECT * FROM tasklab_claim(:names, :limit, :owner, :lease);

-- name: claim_id
-- Claim one given task if it is queued.
UPDATE tasks SET state = 'running', epoch = epoch + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until = clock_timestamp() + make_interval(secs => :lease),
    started_at = clock_timestamp(), error_code = NULL, error_message = NULL
WHERE id = :id AND state = 'queued'
RETURNING id, task, payload, epoch, attempt, max_attempts;

-- name: queued_ids
-- Runnable task ids of the given names, oldest first (a hint; claiming decides).
SELECT id FROM tasks
WHERE state = 'queued' AND run_after <= clock_timestamp() AND task = ANY(:names)
ORDER BY run_after, id LIMIT :limit;

-- name: next_run_after
-- Seconds until the earliest delayed task of the given names becomes runnable.
SELECT EXTRACT(EPOCH FROM MIN(run_after) - clock_timestamp()) AS wait FROM tasks
WHERE state = 'queued' AND task = ANY(:names);

-- name: fence
-- The fencing check (claimed epoch, live state, unexpired lease by the database
-- clock), taking the per-task event counter forward by :n in the same statement.
UPDATE tasks SET event_seq = event_seq + :n
WHERE id = :id AND epoch = :epoch AND state IN ('running', 'cancel_requested')
  AND lease_until > clock_timestamp()
RETURNING state, attempt, max_attempts, retry_safe, event_seq;

-- name: fence_many
-- The fencing check for a batch of claims at once (arrays of ids, epochs, event counts).
UPDATE tasks t SET event_seq = t.event_seq + v.n
FROM unnest(CAST(:ids AS TEXT[]), CAST(:epochs AS BIGINT[]), CAST(:ns AS INTEGER[]))
    AS v(id, epoch, n)
WHERE t.id = v.id AND t.epoch = v.epoch AND t.state IN ('running', 'cancel_requested')
  AND t.lease_until > clock_timestamp()
RETURNING t.id, t.epoch, t.state, t.event_seq;

-- name: insert_event
-- One event, numbered by the task's counter.
INSERT INTO events (task_id, seq, attempt, type, data, at)
VALUES (:task_id, :seq, :attempt, :type, :data, clock_timestamp());

-- name: insert_event_batch
-- `insert_event` for a group commit in one statement.
INSERT INTO events (task_id, seq, attempt, type, data, at)
SELECT e.task_id, e.seq, e.attempt, e.type, e.data, clock_timestamp()
FROM unnest(CAST(:task_id AS TEXT[]), CAST(:seq AS BIGINT[]), CAST(:attempt AS INTEGER[]),
            CAST(:type AS TEXT[]), CAST(:data AS TEXT[])) AS e(task_id, seq, attempt, type, data);

-- name: heartbeat
-- Renew a lease if the authority still holds; answers the state (cancel delivery).
UPDATE tasks SET lease_until = clock_timestamp() + make_interval(secs => :lease)
WHERE id = :id AND epoch = :epoch AND state IN ('running', 'cancel_requested')
  AND lease_until > clock_timestamp()
RETURNING state;

-- name: finish
-- The terminal (or retry) write, conditional on the state read under the fence.
UPDATE tasks SET state = :state, result = CAST(:result AS TEXT),
    error_code = CAST(:error_code AS TEXT), error_message = CAST(:error_message AS TEXT),
    cancel_reason = COALESCE(cancel_reason, CAST(:reason AS TEXT)),
    finished_at = CASE WHEN :terminal THEN clock_timestamp() END,
    lease_owner = NULL, lease_until = NULL,
    run_after = clock_timestamp() + make_interval(secs => :delay)
WHERE id = :id AND epoch = :epoch AND state = :from_state;

-- name: finish_batch
-- `finish` for a group commit in one statement (arrays, one element per task): one
-- plan and one pass instead of a statement per task.
UPDATE tasks t SET state = v.state, result = v.result, error_code = v.error_code,
    error_message = v.error_message, cancel_reason = COALESCE(t.cancel_reason, v.reason),
    finished_at = CASE WHEN v.terminal THEN clock_timestamp() END,
    lease_owner = NULL, lease_until = NULL,
    run_after = clock_timestamp() + make_interval(secs => v.delay)
FROM unnest(CAST(:id AS TEXT[]), CAST(:epoch AS BIGINT[]), CAST(:from_state AS TEXT[]),
            CAST(:state AS TEXT[]), CAST(:result AS TEXT[]), CAST(:error_code AS TEXT[]),
            CAST(:error_message AS TEXT[]), CAST(:reason AS TEXT[]),
            CAST(:terminal AS BOOLEAN[]), CAST(:delay AS DOUBLE PRECISION[]))
     AS v(id, epoch, from_state, state, result, error_code, error_message, reason,
          terminal, delay)
WHERE t.id = v.id AND t.epoch = v.epoch AND t.state = v.from_state;

-- name: release
-- Give back a claim that never started: attempt goes back, the epoch stays.
UPDATE tasks SET state = 'queued', attempt = attempt - 1, lease_owner = NULL,
    lease_until = NULL, started_at = NULL
WHERE id = :id AND epoch = :epoch AND state = 'running';

-- name: release_owned
-- Give back the claims of one claim call whose answer was lost (none of them started).
-- (The IN repeats the live-task index's condition: a scan of live tasks, not of all.)
UPDATE tasks SET state = 'queued', attempt = attempt - 1, lease_owner = NULL,
    lease_until = NULL, started_at = NULL
WHERE state IN ('running', 'cancel_requested') AND state = 'running' AND lease_owner = :owner
RETURNING id;

-- name: insert_outbox
-- The notification of a terminal transition, in the same transaction.
INSERT INTO outbox (event_id, task_id, created_at) VALUES (:event_id, :task_id, clock_timestamp());

-- name: insert_outbox_batch
-- `insert_outbox` for a group commit in one statement.
INSERT INTO outbox (event_id, task_id, created_at)
SELECT o.event_id, o.task_id, clock_timestamp()
FROM unnest(CAST(:event_id AS TEXT[]), CAST(:task_id AS TEXT[])) AS o(event_id, task_id);

-- name: expired
-- Live tasks whose lease has run out (locked, skipping those another reaper holds).
SELECT id, epoch, state, attempt, max_attempts, retry_safe, request_bound FROM tasks
WHERE state IN ('running', 'cancel_requested') AND lease_until <= clock_timestamp()
ORDER BY lease_until LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: live
-- Every live task (exclusive recovery only).
SELECT id, epoch, state, attempt, max_attempts, retry_safe, request_bound FROM tasks
WHERE state IN ('running', 'cancel_requested') ORDER BY id LIMIT :limit FOR UPDATE;

-- name: resolve_expired
-- Apply a lease-expiry outcome, if the task is still as it was read.
UPDATE tasks SET state = :state, error_code = CAST(:error_code AS TEXT),
    error_message = CAST(:error_message AS TEXT),
    finished_at = CASE WHEN :terminal THEN clock_timestamp() END,
    lease_owner = NULL, lease_until = NULL,
    run_after = clock_timestamp() + make_interval(secs => :delay)
WHERE id = :id AND epoch = :epoch AND state = :from_state
  AND (:exclusive OR lease_until <= clock_timestamp());

-- name: effect_get
-- What a previous attempt recorded about one external side effect.
SELECT key, status, result, attempt FROM effects WHERE task_id = :task_id AND key = :key;

-- name: effect_start
-- Record that an external side effect is about to happen.
INSERT INTO effects (task_id, key, status, attempt, started_at)
VALUES (:task_id, :key, 'started', :attempt, clock_timestamp())
ON CONFLICT (task_id, key) DO UPDATE SET status = 'started', attempt = EXCLUDED.attempt,
    started_at = clock_timestamp(), done_at = NULL, result = NULL;

-- name: effect_done
-- Record that an external side effect completed.
UPDATE effects SET status = 'done', result = :result, done_at = clock_timestamp()
WHERE task_id = :task_id AND key = :key;

-- name: events_after
-- Events of one task after a sequence number.
SELECT task_id, seq, attempt, type, data, at FROM events
WHERE task_id = :task_id AND seq > :after ORDER BY seq LIMIT :limit;

-- name: bump_counter
-- Add to a recovery-health counter.
INSERT INTO counters (name, value) VALUES (:name, :n)
ON CONFLICT (name) DO UPDATE SET value = counters.value + EXCLUDED.value;

-- name: counters
-- Every counter.
SELECT name, value FROM counters;

-- name: register_worker
-- An executor announces itself (liveness is the advisory lock, this row is for people).
INSERT INTO workers (id, host, pid, started_at) VALUES (:id, :host, :pid, clock_timestamp());

-- name: unregister_worker
-- An executor leaves.
DELETE FROM workers WHERE id = :id;

-- name: clear_workers
-- Exclusive recovery: no executor holds the lock, so every row is stale.
DELETE FROM workers;

-- name: list_workers
-- Registered executors.
SELECT id, host, pid, started_at FROM workers ORDER BY started_at;

-- name: outbox_pending
-- Deliveries due for a URL, oldest first (rows made with each notification).
SELECT event_id, task_id, attempts FROM deliveries
WHERE url = :url AND delivered_at IS NULL AND next_attempt_at <= clock_timestamp()
ORDER BY next_attempt_at LIMIT :limit;

-- name: subscribe_lock
-- While a subscription is made, no notification may be in flight: one inserted before
-- it commits but committed after its history is read would be missed by both.
LOCK TABLE outbox IN SHARE MODE;

-- name: subscribe
-- A webhook URL; answers it only when it is new (then its history is queued).
INSERT INTO webhooks (url, created_at) VALUES (:url, clock_timestamp())
ON CONFLICT (url) DO NOTHING RETURNING url;

-- name: queue_history
-- Delivery rows for every notification a new subscription has not seen (once).
INSERT INTO deliveries (event_id, url, attempts, next_attempt_at, task_id)
SELECT o.event_id, :url, 0, o.created_at, o.task_id FROM outbox o
WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = o.event_id AND d.url = :url);

-- name: unsubscribe
-- Forget a webhook URL and what it still had to receive.
DELETE FROM webhooks WHERE url = :url;

-- name: drop_pending
-- The undelivered rows of a forgotten URL.
DELETE FROM deliveries WHERE url = :url AND delivered_at IS NULL;

-- name: webhooks
-- Subscribed URLs with what each still has to receive.
SELECT w.url, (SELECT COUNT(*) FROM deliveries d
               WHERE d.url = w.url AND d.delivered_at IS NULL) AS pending
FROM webhooks w ORDER BY w.url;

-- name: delivery_attempted
-- Record one delivery attempt and when to try again (a row made here, for a URL that
-- was unsubscribed meanwhile, still names its task: read from the outbox).
INSERT INTO deliveries (event_id, task_id, url, attempts, delivered_at, next_attempt_at,
                        last_error)
VALUES (:event_id, (SELECT task_id FROM outbox WHERE event_id = :event_id), :url, 1,
        CASE WHEN :ok THEN clock_timestamp() END,
        clock_timestamp() + make_interval(secs => :delay), CAST(:error AS TEXT))
ON CONFLICT (event_id, url) DO UPDATE SET attempts = deliveries.attempts + 1,
    delivered_at = EXCLUDED.delivered_at, next_attempt_at = EXCLUDED.next_attempt_at,
    last_error = EXCLUDED.last_error;

-- name: outbox_for_task
-- The notification row of one task, if any.
SELECT event_id, task_id, created_at FROM outbox WHERE task_id = :task_id;

-- name: oldest_undelivered
-- Seconds since the oldest notification not yet delivered to :url (notification lag).
SELECT EXTRACT(EPOCH FROM clock_timestamp() - MIN(o.created_at)) AS lag
FROM deliveries d JOIN outbox o ON o.task_id = d.task_id
WHERE d.url = :url AND d.delivered_at IS NULL;

-- name: savepoint_body
-- Mark the start of a transactional task's own work.
SAVEPOINT task_body;

-- name: rollback_body
-- Undo a failed transactional task's own work (the claim stays).
ROLLBACK TO SAVEPOINT task_body;

-- name: release_body
-- Keep the transactional task's work.
RELEASE SAVEPOINT task_body;

-- name: presence_lock
-- Held shared by every live executor for as long as it lives.
SELECT pg_advisory_lock_shared(7411002);

-- name: presence_unlock
-- An executor leaves.
SELECT pg_advisory_unlock_shared(7411002);

-- name: exclusive_try
-- Exclusive recovery: only when no executor holds the presence lock.
SELECT pg_try_advisory_lock(7411002) AS ok;

-- name: exclusive_release
-- Recovery done.
SELECT pg_advisory_unlock(7411002);

-- name: listen
-- Subscribe this connection to change notifications.
LISTEN tasklab;

-- name: prune_lock
-- Taken first: a subscription (SHARE) queueing history meanwhile would otherwise give
-- a pruned notification a delivery row after the check that it has none pending; and
-- prunes take turns (two deleting overlapping rows in different orders could deadlock).
LOCK TABLE outbox IN ROW EXCLUSIVE MODE;
SELECT pg_advisory_xact_lock(7411003);

-- name: prunable
-- Terminal tasks finished before :before whose notifications no subscribed URL still
-- waits for; at most :limit.
SELECT t.id FROM tasks t
WHERE t.state IN ('succeeded', 'failed', 'cancelled') AND t.finished_at < :before
  AND NOT EXISTS (SELECT 1 FROM outbox o JOIN deliveries d ON d.event_id = o.event_id
                  WHERE o.task_id = t.id AND d.delivered_at IS NULL)
LIMIT :limit;

-- name: prune_events
-- The events of pruned tasks.
DELETE FROM events WHERE task_id = ANY(:ids);

-- name: prune_effects
-- The effect records of pruned tasks.
DELETE FROM effects WHERE task_id = ANY(:ids);

-- name: prune_deliveries
-- The delivery records of pruned tasks' notifications.
DELETE FROM deliveries WHERE event_id IN (SELECT event_id FROM outbox WHERE task_id = ANY(:ids));

-- name: prune_outbox
-- The notifications of pruned tasks.
DELETE FROM outbox WHERE task_id = ANY(:ids);

-- name: prune_tasks
-- The pruned tasks themselves (terminal ones only, whatever the caller passed).
DELETE FROM tasks WHERE id = ANY(:ids) AND state IN ('succeeded', 'failed', 'cancelled');
