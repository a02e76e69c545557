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
-- A new queued task; an existing idempotency key, or a live task holding the unique
-- key, inserts nothing. run_after: :run_at, or now plus :delay seconds.
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, idempotency_key, run_after, created_at, queue, priority,
                   delayed, concurrency_key, concurrency_limit, unique_key, parent_id,
                   trace_context)
VALUES (:id, :task, :payload, 'queued', :max_attempts, :retry_safe, :request_bound,
        CAST(:timeout AS DOUBLE PRECISION), CAST(:idempotency_key AS TEXT),
        COALESCE(CAST(:run_at AS TIMESTAMPTZ),
                 clock_timestamp() + make_interval(secs => COALESCE(CAST(:delay AS DOUBLE PRECISION), 0))),
        clock_timestamp(), :queue, :priority,
        COALESCE(CAST(:run_at AS TIMESTAMPTZ) > clock_timestamp(),
                 COALESCE(CAST(:delay AS DOUBLE PRECISION), 0) > 0),
        CAST(:concurrency_key AS TEXT), CAST(:concurrency_limit AS INTEGER),
        CAST(:unique_key AS TEXT), CAST(:parent_id AS TEXT), CAST(:trace_context AS TEXT))
ON CONFLICT DO NOTHING
RETURNING id, created_at, run_after;

-- name: insert_tasks
-- Many new tasks in one statement: one plan and one pass instead of a statement per
-- row (`insert_task`'s parameters, a JSON array of rows: see `finish_batch`); a taken
-- idempotency key inserts nothing (the caller reads those by `tasks_by_keys`).
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, run_after, created_at, queue, priority, delayed,
                   concurrency_key, concurrency_limit, idempotency_key, parent_id, trace_context)
SELECT t.id, t.task, t.payload, 'queued', t.max_attempts, t.retry_safe, t.request_bound,
       t.timeout,
       COALESCE(t.run_at, clock_timestamp() + make_interval(secs => COALESCE(t.delay, 0))),
       clock_timestamp(), t.queue, t.priority,
       COALESCE(t.run_at > clock_timestamp(), COALESCE(t.delay, 0) > 0),
       t.concurrency_key, t.concurrency_limit, t.idempotency_key, t.parent_id, t.trace_context
FROM ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (
         id TEXT, task TEXT, payload TEXT, max_attempts INTEGER, retry_safe BOOLEAN,
         request_bound BOOLEAN, timeout DOUBLE PRECISION, queue TEXT, priority INTEGER,
         run_at TIMESTAMPTZ, delay DOUBLE PRECISION, concurrency_key TEXT,
         concurrency_limit INTEGER, idempotency_key TEXT, parent_id TEXT,
         trace_context TEXT))
     WITH ORDINALITY AS t(id, task, payload, max_attempts, retry_safe, request_bound,
                          timeout, queue, priority, run_at, delay, concurrency_key,
                          concurrency_limit, idempotency_key, parent_id, trace_context, n)
ORDER BY t.n
ON CONFLICT DO NOTHING
RETURNING id, created_at, run_after;

-- name: tasks_by_keys
-- The tasks holding these idempotency keys.
SELECT * FROM tasks WHERE idempotency_key = ANY(:keys);

-- name: task_by_key
-- The task holding an idempotency key.
SELECT * FROM tasks WHERE idempotency_key = :key;

-- name: task_by_unique
-- The live task holding a unique key.
SELECT * FROM tasks
WHERE unique_key = :key AND state IN ('queued', 'running', 'cancel_requested');

-- name: get_task
-- One task.
SELECT * FROM tasks WHERE id = :id;

-- name: count_states
-- Tasks per state, from the counters the state-changing transactions keep.
SELECT state, SUM(n) AS n FROM task_counts WHERE state <> 'claimed' GROUP BY state;

-- name: count_queues
-- Tasks per queue and state (and claims so far, as the state 'claimed').
SELECT queue, state, SUM(n) AS n FROM task_counts GROUP BY queue, state;

-- name: count_states_exact
-- Tasks per state counted from the table (tests check the counters against it).
SELECT 'queued' AS state, COUNT(*) AS n FROM tasks WHERE state = 'queued'
UNION ALL
SELECT state, COUNT(*) AS n FROM tasks WHERE state <> 'queued' GROUP BY state;

-- name: states_of
-- The current state of several tasks.
SELECT id, state FROM tasks WHERE id = ANY(:ids);

-- name: cancel_queued
-- queued or waiting -> cancelled, terminal at once (no code is running).
UPDATE tasks SET state = 'cancelled', cancel_reason = :reason, finished_at = clock_timestamp(),
    wake_at = NULL
WHERE id = :id AND state IN ('queued', 'waiting');

-- name: cancel_running
-- running -> cancel_requested; the executor sees it at its next checkpoint (the
-- state check is a CASE: see `fence`).
UPDATE tasks SET state = 'cancel_requested', cancel_reason = :reason
WHERE id = :id AND CASE WHEN state = 'running' THEN true END;

-- name: promote_due
-- Delayed tasks whose time has come become claimable, waiting tasks whose sleep or
-- timeout ended are queued again (tasklab_promote, schema 9).
SELECT tasklab_promote() AS moved;

-- name: claim_next
-- Claim up to :limit runnable tasks of one open, unlimited queue and the given names
-- (tasklab_claim, schema 8).
SELECT * FROM tasklab_claim(:names, :queue, :limit, :owner, :lease);

-- name: claim_limited
-- A claim where limits apply (queue concurrency, rate, per-key limits, pauses): the
-- whole rule in one call under the given advisory locks (tasklab_claim_limited,
-- schema 10).
SELECT * FROM tasklab_claim_limited(:served, :names, :keys, :keyed, :limit, :owner, :lease);

-- name: queue_view
-- What a claimer needs to choose its path: each queue with tasks queued or settings,
-- whether it is paused or limited, and whether tasks with a per-key limit wait in it.
SELECT v.name, v.paused, v.limited,
       EXISTS (SELECT 1 FROM tasks k
               WHERE k.queue = v.name AND k.state = 'queued'
                 AND k.concurrency_limit IS NOT NULL) AS keyed,
       COALESCE((SELECT SUM(c.n) FROM task_counts c
                 WHERE c.queue = v.name AND c.state = 'queued'), 0) > 0 AS busy
FROM (SELECT c.queue AS name, false AS paused, false AS limited FROM task_counts c
      WHERE c.state = 'queued' AND c.queue NOT IN (SELECT name FROM queues)
      GROUP BY c.queue HAVING SUM(c.n) > 0
      UNION ALL
      SELECT name, paused, (concurrency IS NOT NULL OR rate_count IS NOT NULL) FROM queues) v;

-- name: claim_id
-- Claim one given task if it is queued.
UPDATE tasks SET state = 'running', epoch = epoch + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until = clock_timestamp() + make_interval(secs => :lease),
    started_at = clock_timestamp(), error_code = NULL, error_message = NULL
WHERE id = :id AND state = 'queued'
RETURNING id, task, payload, epoch, attempt, max_attempts, wait_kind;

-- name: queued_ids
-- Runnable task ids of the given names in the given queues, in claim order within
-- each queue, from unpaused queues (a hint; claiming decides).
SELECT id FROM tasks
WHERE queue = ANY(:queues) AND state = 'queued' AND NOT delayed AND task = ANY(:names)
  AND queue NOT IN (SELECT name FROM queues WHERE paused)
ORDER BY queue, priority DESC, run_after, id LIMIT :limit;

-- name: next_run_after
-- Seconds until the earliest delayed task of the given names becomes runnable, or a
-- waiting one wakes (its sleep or timeout ends).
SELECT EXTRACT(EPOCH FROM MIN(t) - clock_timestamp()) AS wait FROM (
    SELECT MIN(run_after) AS t FROM tasks
    WHERE state = 'queued' AND delayed AND task = ANY(:names)
    UNION ALL
    SELECT MIN(wake_at) FROM tasks
    WHERE state = 'waiting' AND wake_at IS NOT NULL AND task = ANY(:names)) AS due;

-- name: fence
-- The fencing check (claimed epoch, live state, unexpired lease by the database
-- clock), taking the per-task event counter forward by :n in the same statement.
-- The live-state check is a CASE, here and in every statement that finds one running
-- task by id, so that it cannot match tasks_live's predicate: where it could, the
-- generic plan a prepared statement settles on after five runs walked the whole of
-- tasks_live (an entry for every task that ran since the last vacuum, live or dead)
-- instead of looking the id up, whenever the statistics had been taken while few
-- tasks ran — 1,500 entries read for one task in the test (test_pg_plans.py).
UPDATE tasks SET event_seq = event_seq + :n
WHERE id = :id AND epoch = :epoch
  AND CASE WHEN state IN ('running', 'cancel_requested')
           THEN lease_until > clock_timestamp() END
RETURNING state, attempt, max_attempts, retry_safe, event_seq;

-- name: fence_many
-- The fencing check for a batch of terminal writes (a JSON array of rows: id, epoch,
-- event count n): locks each row that passes it and answers its event counter moved on by its
-- events, which the task's settlement (`finish_batch`, `suspend`) then writes. Not an
-- UPDATE: that made a second row version per task, with its index entries and the
-- counters' trigger over both transition tables, for a counter the settlement rewrites
-- anyway (~20% of the server's time per task in a drain). `t.id = ANY(ARRAY(...))` as
-- well as the join (an array read once, so an index condition): primary-key lookups
-- even when the statistics say the table is empty (a queue table vacuumed or analyzed
-- between two bursts). The live-state check is a
-- CASE as in `fence`: otherwise the generic plan read ~12,000 entries of tasks_live
-- per batch in a 20,000-task drain.
SELECT t.id, t.epoch, t.state, t.event_seq + v.n AS event_seq
FROM tasks t
JOIN json_to_recordset(CAST(:rows AS json)) AS v(id TEXT, epoch BIGINT, n INTEGER)
    ON t.id = v.id
WHERE t.id = ANY(ARRAY(SELECT r.id FROM json_to_recordset(CAST(:rows AS json)) AS r(id TEXT)))
  AND t.epoch = v.epoch
  AND CASE WHEN t.state IN ('running', 'cancel_requested')
           THEN t.lease_until > clock_timestamp() END
FOR UPDATE OF t;

-- name: insert_event
-- One event, numbered by the task's counter.
INSERT INTO events (task_id, seq, attempt, type, data, at)
VALUES (:task_id, :seq, :attempt, :type, :data, clock_timestamp());

-- name: insert_event_batch
-- `insert_event` for a group commit in one statement.
INSERT INTO events (task_id, seq, attempt, type, data, at)
SELECT e.task_id, e.seq, e.attempt, e.type, e.data, clock_timestamp()
FROM json_to_recordset(CAST(:rows AS json))
     AS e(task_id TEXT, seq BIGINT, attempt INTEGER, type TEXT, data TEXT);

-- name: heartbeat
-- Renew a lease if the authority still holds; answers the state (cancel delivery).
-- (the live-state check is a CASE: see `fence`)
UPDATE tasks SET lease_until = clock_timestamp() + make_interval(secs => :lease)
WHERE id = :id AND epoch = :epoch
  AND CASE WHEN state IN ('running', 'cancel_requested')
           THEN lease_until > clock_timestamp() END
RETURNING state;

-- name: finish
-- The terminal (or retry) write, conditional on the state read under the fence; the
-- event counter a locking fence (fence_many) answered, if one did.
UPDATE tasks SET state = :state, result = CAST(:result AS TEXT),
    error_code = CAST(:error_code AS TEXT), error_message = CAST(:error_message AS TEXT),
    cancel_reason = COALESCE(cancel_reason, CAST(:reason AS TEXT)),
    finished_at = CASE WHEN :terminal THEN clock_timestamp() END,
    lease_owner = NULL, lease_until = NULL,
    run_after = clock_timestamp() + make_interval(secs => :delay), delayed = (:delay > 0),
    wait_kind = NULL, event_seq = COALESCE(CAST(:event_seq AS BIGINT), event_seq)
WHERE id = :id AND epoch = :epoch AND state = :from_state;

-- name: finish_batch
-- `finish` for a group commit in one statement: one plan and one pass instead of a
-- statement per task; `t.id = ANY(ARRAY(...))` as in fence_many, whose answer the
-- event counter takes. The rows come as one JSON array (every batch statement's way):
-- psycopg dumps a Python list into an array element by element in Python, 7.5 us of
-- the worker's CPU per row of this statement's eleven columns, against 4 for
-- `json.dumps` of the rows (the server's time is about the same).
UPDATE tasks t SET state = v.state, result = v.result, error_code = v.error_code,
    error_message = v.error_message, cancel_reason = COALESCE(t.cancel_reason, v.reason),
    finished_at = CASE WHEN v.terminal THEN clock_timestamp() END,
    lease_owner = NULL, lease_until = NULL,
    run_after = clock_timestamp() + make_interval(secs => v.delay), delayed = (v.delay > 0),
    wait_kind = NULL, event_seq = COALESCE(v.event_seq, t.event_seq)
FROM json_to_recordset(CAST(:rows AS json))
     AS v(id TEXT, epoch BIGINT, from_state TEXT, state TEXT, result TEXT, error_code TEXT,
          error_message TEXT, reason TEXT, terminal BOOLEAN, delay DOUBLE PRECISION,
          event_seq BIGINT)
WHERE t.id = ANY(ARRAY(SELECT r.id FROM json_to_recordset(CAST(:rows AS json)) AS r(id TEXT)))
  AND t.id = v.id AND t.epoch = v.epoch
  AND t.state = v.from_state;

-- name: release
-- Give back a claim that never started: attempt goes back, the epoch stays (the
-- state check is a CASE: see `fence`).
UPDATE tasks SET state = 'queued', attempt = attempt - 1, lease_owner = NULL,
    lease_until = NULL, started_at = NULL
WHERE id = :id AND epoch = :epoch AND CASE WHEN state = 'running' THEN true END;

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
FROM json_to_recordset(CAST(:rows AS json)) AS o(event_id TEXT, task_id TEXT);

-- name: expired
-- Live tasks whose lease has run out (locked, skipping those another reaper holds).
-- statement_timestamp(), not clock_timestamp(): stable, so an index condition, and the
-- walk of tasks_live stops at now instead of reading every running task.
SELECT id, epoch, state, attempt, max_attempts, retry_safe, request_bound FROM tasks
WHERE state IN ('running', 'cancel_requested') AND lease_until <= statement_timestamp()
ORDER BY lease_until LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: live
-- Every live task (exclusive recovery only).
SELECT id, epoch, state, attempt, max_attempts, retry_safe, request_bound FROM tasks
WHERE state IN ('running', 'cancel_requested') ORDER BY id LIMIT :limit FOR UPDATE;

-- name: resolve_expired
-- Apply a lease-expiry outcome, if the task is still as it was read (the event number
-- for its `lease_expired` event taken too).
UPDATE tasks SET state = :state, error_code = CAST(:error_code AS TEXT),
    error_message = CAST(:error_message AS TEXT),
    finished_at = CASE WHEN :terminal THEN clock_timestamp() END,
    lease_owner = NULL, lease_until = NULL, event_seq = event_seq + 1,
    run_after = clock_timestamp() + make_interval(secs => :delay), delayed = (:delay > 0),
    wait_kind = NULL
WHERE id = :id AND epoch = :epoch AND state = :from_state
  AND (:exclusive OR lease_until <= clock_timestamp());

-- name: expiry_event
-- The `lease_expired` event of a task `resolve_expired` just settled (its number taken).
INSERT INTO events (task_id, seq, attempt, type, data, at)
SELECT id, event_seq, attempt, 'lease_expired', :data, clock_timestamp() FROM tasks WHERE id = :id;

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
-- An executor announces itself: what it is, and its first heartbeat.
INSERT INTO workers (id, host, pid, started_at, owner, runner, queues, slots, heartbeat_at)
VALUES (:id, :host, :pid, clock_timestamp(), :owner, :runner, :queues, :slots, clock_timestamp());

-- name: heartbeat_worker
-- An executor is alive (a row found dead by mistake, a stalled one, lives again).
UPDATE workers SET heartbeat_at = clock_timestamp(), ended = NULL, ended_at = NULL
WHERE id = :id AND ended IS DISTINCT FROM 'stopped';

-- name: mark_dead_workers
-- Executors whose heartbeat is older than :after seconds are presumed dead. A row
-- locked by its own executor's transaction is passed over, not waited for: that
-- executor may be cut off mid-heartbeat, and this runs in the reaper's round.
UPDATE workers SET ended = 'dead', ended_at = clock_timestamp()
WHERE id IN (SELECT id FROM workers WHERE ended IS NULL
             AND heartbeat_at < clock_timestamp() - make_interval(secs => CAST(:after AS DOUBLE PRECISION))
             FOR UPDATE SKIP LOCKED);

-- name: prune_workers
-- Rows of executors that ended more than :keep seconds ago (locked ones next time).
DELETE FROM workers WHERE id IN (
    SELECT id FROM workers
    WHERE ended_at < clock_timestamp() - make_interval(secs => CAST(:keep AS DOUBLE PRECISION))
    FOR UPDATE SKIP LOCKED);

-- name: unregister_worker
-- An executor leaves (the row is kept a while, marked stopped).
UPDATE workers SET ended = 'stopped', ended_at = clock_timestamp() WHERE id = :id;

-- name: clear_workers
-- Exclusive recovery: no executor holds the lock, so every live row is stale.
UPDATE workers SET ended = 'dead', ended_at = clock_timestamp() WHERE ended IS NULL;

-- name: list_workers
-- Every executor's row, newest first.
SELECT * FROM workers ORDER BY started_at DESC, id;

-- name: running_tasks
-- What runs now, and whose claim it is (tasks_live: the running tasks only).
SELECT id, task, lease_owner, started_at, lease_until FROM tasks
WHERE state IN ('running', 'cancel_requested') ORDER BY started_at;

-- name: outbox_pending
-- Deliveries due for a URL, oldest first (rows made with each notification); the
-- clock as in `expired`.
SELECT event_id, task_id, attempts FROM deliveries
WHERE url = :url AND delivered_at IS NULL AND next_attempt_at <= statement_timestamp()
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
-- Mark the start of a transactional task's own work. Its body is user code, which may
-- leave the session idle in this transaction as long as it runs: the store's limit on
-- that (idle_in_transaction_session_timeout, postgres.py) is lifted for this one, and
-- its own queries may scan a table sequentially where the planner finds that cheaper
-- (tasklab's sessions run with enable_seqscan off, for tasklab's statements:
-- pgsessions.py; jit stays off).
SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL enable_seqscan = on;
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

-- name: queue_settings
-- Set a queue's limits (a NULL limit is none); a new rate starts with a full bucket.
INSERT INTO queues (name, paused, concurrency, rate_count, rate_period, tokens, tokens_at,
                    updated_at)
VALUES (:name, false, CAST(:concurrency AS INTEGER), CAST(:rate_count AS INTEGER),
        CAST(:rate_period AS DOUBLE PRECISION), CAST(:rate_count AS DOUBLE PRECISION),
        clock_timestamp(), clock_timestamp())
ON CONFLICT (name) DO UPDATE SET
    concurrency = CASE WHEN :set_concurrency THEN excluded.concurrency ELSE queues.concurrency END,
    tokens = CASE WHEN :set_rate THEN excluded.tokens ELSE queues.tokens END,
    tokens_at = CASE WHEN :set_rate THEN excluded.tokens_at ELSE queues.tokens_at END,
    rate_count = CASE WHEN :set_rate THEN excluded.rate_count ELSE queues.rate_count END,
    rate_period = CASE WHEN :set_rate THEN excluded.rate_period ELSE queues.rate_period END,
    updated_at = clock_timestamp();

-- name: queue_pause
-- Pause (true) or resume (false) a queue.
INSERT INTO queues (name, paused, updated_at) VALUES (:name, :paused, clock_timestamp())
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = clock_timestamp();

-- name: queue_rows
-- Every queue's settings.
SELECT name, paused, concurrency, rate_count, rate_period FROM queues ORDER BY name;

-- name: schedule_get
-- One schedule.
SELECT * FROM schedules WHERE name = :name;

-- name: schedule_put
-- Make or replace a schedule (the caller decides its next tick).
INSERT INTO schedules (name, task, cron, every_s, timezone, payload, queue, priority, catch_up,
                       origin, next_tick, last_tick, last_task_id, created_at, updated_at)
VALUES (:name, :task, CAST(:cron AS TEXT), CAST(:every_s AS DOUBLE PRECISION), :timezone,
        :payload, CAST(:queue AS TEXT), CAST(:priority AS INTEGER), :catch_up, :origin,
        :next_tick, NULL, NULL, clock_timestamp(), clock_timestamp())
ON CONFLICT (name) DO UPDATE SET task = excluded.task, cron = excluded.cron,
    every_s = excluded.every_s, timezone = excluded.timezone, payload = excluded.payload,
    queue = excluded.queue, priority = excluded.priority, catch_up = excluded.catch_up,
    origin = excluded.origin, next_tick = excluded.next_tick, updated_at = clock_timestamp();

-- name: schedule_delete
-- Forget a schedule.
DELETE FROM schedules WHERE name = :name;

-- name: schedules_all
-- Every schedule, by name.
SELECT * FROM schedules ORDER BY name;

-- name: schedules_due
-- Schedules whose next tick has come, by the database clock (with that clock; as in
-- `expired`, a stable one: the walk of schedules_due stops at now).
SELECT s.*, statement_timestamp() AS now FROM schedules s
WHERE s.next_tick <= statement_timestamp() ORDER BY s.next_tick LIMIT :limit;

-- name: schedule_advance
-- Move a schedule past the ticks just submitted, unless another scheduler did.
UPDATE schedules SET next_tick = :next_tick,
    last_tick = COALESCE(CAST(:last_tick AS TIMESTAMPTZ), last_tick),
    last_task_id = COALESCE(CAST(:last_task_id AS TEXT), last_task_id)
WHERE name = :name AND next_tick = :from_tick;

-- name: schedule_advance_batch
-- `schedule_advance` for many schedules in one statement (a JSON array of rows).
UPDATE schedules s SET next_tick = v.next_tick,
    last_tick = COALESCE(v.last_tick, s.last_tick),
    last_task_id = COALESCE(v.last_task_id, s.last_task_id)
FROM json_to_recordset(CAST(:rows AS json))
     AS v(name TEXT, from_tick TIMESTAMPTZ, next_tick TIMESTAMPTZ, last_tick TIMESTAMPTZ,
          last_task_id TEXT)
WHERE s.name = v.name AND s.next_tick = v.from_tick;

-- name: suspend
-- End an execution into a wait, fenced (the caller fenced it in this transaction and
-- holds the task's advisory lock): 'waiting' with what it waits for — or at once
-- 'queued' when that already came. Not an attempt: attempt goes back.
UPDATE tasks SET
    state = CASE WHEN (:kind = 'signal' AND EXISTS (SELECT 1 FROM signals s
                                                   WHERE s.task_id = :id AND s.name = :name))
                   OR (:kind = 'join' AND NOT EXISTS (
                         SELECT 1 FROM jsonb_array_elements_text(CAST(:ids AS jsonb)) AS j(cid)
                         JOIN tasks c ON c.id = j.cid
                         WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled')))
                   OR (CAST(:wake_at AS TIMESTAMPTZ) IS NOT NULL
                       AND CAST(:wake_at AS TIMESTAMPTZ) <= clock_timestamp())
                 THEN 'queued' ELSE 'waiting' END,
    attempt = attempt - 1, lease_owner = NULL, lease_until = NULL, delayed = false,
    run_after = clock_timestamp(), wait_kind = :kind, wait_name = CAST(:name AS TEXT),
    wait_ids = CAST(:ids AS TEXT), wake_at = CAST(:wake_at AS TIMESTAMPTZ),
    event_seq = COALESCE(CAST(:event_seq AS BIGINT), event_seq)
WHERE id = :id AND epoch = :epoch AND state = 'running' AND NOT request_bound
RETURNING state;

-- name: journal_wait
-- A wait's journal record, the first time it is reached (later runs keep the first).
INSERT INTO effects (task_id, key, status, result, attempt, started_at)
VALUES (:task_id, :key, 'wait', :result, :attempt, clock_timestamp())
ON CONFLICT (task_id, key) DO NOTHING;

-- name: signal_insert
-- Record a signal once per (task, name); answers it only when new.
INSERT INTO signals (task_id, name, data, created_at)
VALUES (:task_id, :name, :data, clock_timestamp())
ON CONFLICT (task_id, name) DO NOTHING RETURNING data;

-- name: signal_get
-- One signal.
SELECT data FROM signals WHERE task_id = :task_id AND name = :name;

-- name: signals_of
-- Every signal of a task, oldest first.
SELECT name, data, created_at FROM signals WHERE task_id = :task_id ORDER BY created_at, name;

-- name: signal_wake
-- A task waiting for this signal is queued again.
UPDATE tasks SET state = 'queued', delayed = false, run_after = clock_timestamp(), wake_at = NULL
WHERE id = :task_id AND state = 'waiting' AND wait_kind = 'signal' AND wait_name = :name;

-- name: task_lock
-- Serialise a task's suspend with its signals and its children's ends (until commit).
SELECT pg_advisory_xact_lock(hashtextextended('tasklab.task:' || :task_id, 0));

-- name: list_children
-- A page of a task's children, newest first.
SELECT * FROM tasks
WHERE parent_id = :parent AND (CAST(:cursor AS TEXT) IS NULL OR id < :cursor)
ORDER BY id DESC LIMIT :limit;

-- name: live_children
-- The ids of a task's children that are not terminal.
SELECT id FROM tasks
WHERE parent_id = :parent AND state NOT IN ('succeeded', 'failed', 'cancelled');

-- name: journal_of
-- A task's effect journal: steps, waits and effects, in the order they began.
SELECT key, status, result, attempt, started_at, done_at FROM effects
WHERE task_id = :task_id ORDER BY started_at, key;

-- name: prune_signals
-- The signals of pruned tasks.
DELETE FROM signals WHERE task_id = ANY(:ids);

-- name: store_identity
-- This database's store id (migration 012).
SELECT id FROM store_identity;

-- name: has_store_identity
-- Whether the connection's database has a store id at all (never fails, so a caller's
-- transaction is not aborted by asking).
SELECT to_regclass('store_identity') IS NOT NULL AS present;

-- name: search_tasks
-- Tasks matching a filter, newest first (keyset: `filter_cursor`); `{terms}` is the
-- filter's `filter_*` blocks, each walking an index (migration 013).
SELECT * FROM tasks WHERE true {terms} ORDER BY id DESC LIMIT :limit;

-- name: search_ids
-- The ids of the tasks matching a filter, newest first (a bulk action's batch).
SELECT id FROM tasks WHERE true {terms} ORDER BY id DESC LIMIT :limit;

-- name: search_count
-- How many tasks match a filter (a bulk action's dry run).
SELECT COUNT(*) AS n FROM tasks WHERE true {terms};

-- name: filter_state
-- One ended or running state, as a literal (a closed set), with the term that lets the
-- planner see that tasks_by_state (which leaves queued tasks out) holds these rows.
AND state = '{state}' AND state <> 'queued'

-- name: filter_queued
-- Queued tasks (tasks_queued).
AND state = 'queued'

-- name: filter_task
-- One task name (tasks_by_task).
AND task = CAST(:task AS TEXT)

-- name: filter_queue
-- One queue (tasks_by_queue).
AND queue = CAST(:queue AS TEXT)

-- name: filter_parent_id
-- The children of one task (tasks_children).
AND parent_id = CAST(:parent_id AS TEXT)

-- name: filter_idempotency_key
-- The task holding an idempotency key (tasks_key).
AND idempotency_key = CAST(:idempotency_key AS TEXT)

-- name: filter_low
-- Ids from this one on (an id prefix, a created-after time).
AND id >= CAST(:low AS TEXT)

-- name: filter_high
-- Ids before this one (past an id prefix, a created-before time).
AND id < CAST(:high AS TEXT)

-- name: filter_cursor
-- The next page: ids before the last one handed out.
AND id < CAST(:cursor AS TEXT)

-- name: filter_not_retried
-- Tasks no retry has been made of yet (tasks_retries).
AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.retry_of = tasks.id)

-- name: retry_tasks
-- New queued tasks made from ended ones (a JSON array of rows: new id, source id, key): the same
-- name, payload, attempts, queue, priority and keys, `retry_of` the source; a source
-- that is not terminal, or a key taken (a retry made already, a live task holding the
-- unique key), inserts nothing.
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, idempotency_key, run_after, created_at, queue, priority,
                   delayed, concurrency_key, concurrency_limit, unique_key, retry_of)
SELECT r.id, t.task, t.payload, 'queued', t.max_attempts, t.retry_safe, false,
       t.timeout, r.key, clock_timestamp(), clock_timestamp(), t.queue, t.priority,
       false, t.concurrency_key, t.concurrency_limit, t.unique_key, t.id
FROM ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (id TEXT, src TEXT, key TEXT))
     WITH ORDINALITY AS r(id, src, key, n)
JOIN tasks t ON t.id = r.src
WHERE t.state IN ('succeeded', 'failed', 'cancelled')
ORDER BY r.n
ON CONFLICT DO NOTHING
RETURNING id, retry_of;

-- name: explain
-- The prefix that makes a statement answer its plan (the search bench and tests).
EXPLAIN

-- name: ordered_reads
-- A search's transaction walks its index in id order and stops at the page's end,
-- whatever the statistics say: stale ones (a table filled since the last ANALYZE, or
-- analysed while empty) would price a bitmap scan and a sort of every match cheaper.
SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true);

-- name: queue_activity
-- Claims and waits per queue and minute over the last :minutes minutes (the charts).
SELECT queue, minute, SUM(claims) AS claims, SUM(wait_ms_sum) AS wait_ms_sum,
       MAX(wait_ms_max) AS wait_ms_max
FROM queue_activity WHERE minute >= floor(extract(epoch FROM clock_timestamp()) / 60)::BIGINT - CAST(:minutes AS INTEGER)
GROUP BY queue, minute ORDER BY queue, minute;

-- name: prune_activity
-- Activity rows older than :minutes minutes (locked ones next time).
DELETE FROM queue_activity WHERE (queue, minute, shard) IN (
    SELECT queue, minute, shard FROM queue_activity
    WHERE minute < floor(extract(epoch FROM clock_timestamp()) / 60)::BIGINT - CAST(:minutes AS INTEGER)
    FOR UPDATE SKIP LOCKED);

-- name: timeline_events
-- The events a task's timeline of attempts is made of (in its key's order; the other
-- events — output chunks, progress — are passed over, not read out).
SELECT task_id, seq, attempt, type, data, at FROM events
WHERE task_id = :task_id AND type IN ('attempt', 'resumed', 'retry', 'lease_expired', 'waiting')
ORDER BY seq LIMIT 10000;

-- name: trace_context
-- The stored trace context of a task (tracing.py).
SELECT trace_context FROM tasks WHERE id = :id;
