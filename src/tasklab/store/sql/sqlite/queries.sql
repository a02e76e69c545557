-- name: schema_version_create
-- The table that records which migrations ran.
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);

-- name: schema_version_get
-- The highest migration applied.
SELECT COALESCE(MAX(version), 0) AS version FROM schema_version;

-- name: schema_version_set
-- Record a migration as applied.
INSERT INTO schema_version (version) VALUES (:version);

-- name: now
-- The database clock.
SELECT julianday('now') AS now;

-- name: insert_task
-- A new queued task; an existing idempotency key, or a live task holding the unique
-- key, inserts nothing. run_after: :run_at, or now plus :delay seconds ('now' is one
-- value within a statement, so an undelayed task is not `delayed`).
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, idempotency_key, run_after, created_at, queue, priority,
                   delayed, concurrency_key, concurrency_limit, unique_key, parent_id,
                   trace_context)
VALUES (:id, :task, :payload, 'queued', :max_attempts, :retry_safe, :request_bound,
        :timeout, :idempotency_key,
        COALESCE(:run_at, julianday('now') + COALESCE(:delay, 0) / 86400.0), julianday('now'),
        :queue, :priority,
        COALESCE(:run_at, julianday('now') + COALESCE(:delay, 0) / 86400.0) > julianday('now'),
        :concurrency_key, :concurrency_limit, :unique_key, :parent_id, :trace_context)
ON CONFLICT DO NOTHING
RETURNING id, created_at, run_after;

-- name: insert_tasks
-- Many new tasks in one statement (a JSON array of `insert_task`'s parameters): one
-- statement instead of one per row; a taken idempotency key inserts nothing (the
-- caller reads those by `tasks_by_keys`). WHERE true: SQLite's parser needs it
-- before an upsert clause.
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, run_after, created_at, queue, priority, delayed,
                   concurrency_key, concurrency_limit, idempotency_key, parent_id, trace_context)
SELECT value ->> 'id', value ->> 'task', value ->> 'payload', 'queued',
       value ->> 'max_attempts', value ->> 'retry_safe', value ->> 'request_bound',
       value ->> 'timeout',
       COALESCE(value ->> 'run_at', julianday('now') + COALESCE(value ->> 'delay', 0) / 86400.0),
       julianday('now'), value ->> 'queue', value ->> 'priority',
       COALESCE(value ->> 'run_at', julianday('now') + COALESCE(value ->> 'delay', 0) / 86400.0)
           > julianday('now'),
       value ->> 'concurrency_key', value ->> 'concurrency_limit', value ->> 'idempotency_key',
       value ->> 'parent_id', value ->> 'trace_context'
FROM json_each(:rows) WHERE true ORDER BY key
ON CONFLICT DO NOTHING
RETURNING id, created_at, run_after;

-- name: tasks_by_keys
-- The tasks holding these idempotency keys (JSON array).
SELECT * FROM tasks WHERE idempotency_key IN (SELECT value FROM json_each(:keys));

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
SELECT queue, state, n FROM task_counts;

-- name: count_states_exact
-- Tasks per state counted from the table (tests check the counters against it).
SELECT 'queued' AS state,
       (SELECT COUNT(*) FROM tasks INDEXED BY tasks_ready WHERE state = 'queued' AND delayed = 0)
     + (SELECT COUNT(*) FROM tasks INDEXED BY tasks_delayed WHERE state = 'queued' AND delayed = 1)
       AS n
UNION ALL
SELECT state, COUNT(*) AS n FROM tasks INDEXED BY tasks_by_state
WHERE state <> 'queued' GROUP BY state;

-- name: states_of
-- The current state of several tasks (JSON array of ids).
SELECT id, state FROM tasks WHERE id IN (SELECT value FROM json_each(:ids));

-- name: cancel_queued
-- queued or waiting -> cancelled, terminal at once (no code is running).
UPDATE tasks SET state = 'cancelled', cancel_reason = :reason, finished_at = julianday('now'),
    wake_at = NULL
WHERE id = :id AND state IN ('queued', 'waiting');

-- name: cancel_running
-- running -> cancel_requested; the executor sees it at its next checkpoint.
UPDATE tasks SET state = 'cancel_requested', cancel_reason = :reason
WHERE id = :id AND state = 'running';

-- name: promote_due
-- Delayed tasks whose time has come become claimable (at most :limit per claim).
UPDATE tasks SET delayed = 0
WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_delayed
             WHERE state = 'queued' AND delayed = 1 AND run_after <= julianday('now')
             ORDER BY run_after LIMIT :limit);

-- name: wake_due
-- Waiting tasks whose sleep or timeout has ended are queued again (at most :limit).
UPDATE tasks SET state = 'queued', delayed = 0, run_after = julianday('now'), wake_at = NULL
WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_waking
             WHERE state = 'waiting' AND wake_at IS NOT NULL AND wake_at <= julianday('now')
             ORDER BY wake_at LIMIT :limit);

-- name: claim_next
-- Claim up to :limit runnable tasks of one open, unlimited queue and the given names
-- (JSON array): new epoch, new lease. A queue paused or limited meanwhile is left to
-- the limited claim (`claim_candidates` + `claim_ids`).
UPDATE tasks SET state = 'running', epoch = epoch + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until = julianday('now') + :lease / 86400.0,
    started_at = julianday('now'), error_code = NULL, error_message = NULL
WHERE id IN (
    -- walk the queue's ready index in order and stop at :limit (the planner would
    -- rather read every queued row through tasks_by_state and sort them)
    SELECT id FROM tasks INDEXED BY tasks_ready
    WHERE queue = :queue AND state = 'queued' AND delayed = 0 AND NOT request_bound
      AND concurrency_limit IS NULL AND task IN (SELECT value FROM json_each(:names))
      AND NOT EXISTS (SELECT 1 FROM queues
                      WHERE name = :queue
                        AND (paused OR concurrency IS NOT NULL OR rate_count IS NOT NULL))
    ORDER BY priority DESC, run_after, id LIMIT :limit)
RETURNING id, task, payload, epoch, attempt, max_attempts, wait_kind;

-- name: claim_candidates
-- The first :limit runnable tasks of one queue in claim order, for a limited claim to
-- choose from (SQLite's writers take turns: nobody else claims meanwhile).
SELECT id, task, priority, run_after, concurrency_key, concurrency_limit
FROM tasks INDEXED BY tasks_ready
WHERE queue = :queue AND state = 'queued' AND delayed = 0 AND NOT request_bound
  AND task IN (SELECT value FROM json_each(:names))
ORDER BY priority DESC, run_after, id LIMIT :limit;

-- name: claim_ids
-- Claim the chosen tasks (JSON array of ids), if still queued.
UPDATE tasks SET state = 'running', epoch = epoch + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until = julianday('now') + :lease / 86400.0,
    started_at = julianday('now'), error_code = NULL, error_message = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'
RETURNING id, task, payload, epoch, attempt, max_attempts, wait_kind;

-- name: queue_limits
-- The settings of the given queues (JSON array), with their live tasks (from the
-- counters) and the database clock.
SELECT q.name, q.paused, q.concurrency, q.rate_count, q.rate_period, q.tokens, q.tokens_at,
       COALESCE((SELECT SUM(c.n) FROM task_counts c WHERE c.queue = q.name
                 AND c.state IN ('running', 'cancel_requested')), 0) AS running,
       julianday('now') AS now
FROM queues q WHERE q.name IN (SELECT value FROM json_each(:names));

-- name: key_counts_of
-- Live tasks per (task name, concurrency key) for the given pairs (JSON [[task, key]]).
SELECT k.task, k.key, k.n FROM key_counts k
JOIN json_each(:pairs) p ON k.task = p.value ->> 0 AND k.key = p.value ->> 1;

-- name: take_tokens
-- A rate-limited queue's bucket after a claim (computed under the write lock).
UPDATE queues SET tokens = :tokens, tokens_at = :at WHERE name = :name;

-- name: queue_view
-- What a claimer needs to choose its path: each queue with tasks queued or settings,
-- whether it is paused or limited, and whether tasks with a per-key limit wait in it.
SELECT v.name, v.paused, v.limited,
       EXISTS (SELECT 1 FROM tasks k INDEXED BY tasks_keyed
               WHERE k.queue = v.name AND k.state = 'queued'
                 AND k.concurrency_limit IS NOT NULL) AS keyed,
       COALESCE((SELECT c.n FROM task_counts c WHERE c.queue = v.name AND c.state = 'queued'), 0)
           > 0 AS busy
FROM (SELECT c.queue AS name, 0 AS paused, 0 AS limited FROM task_counts c
      WHERE c.state = 'queued' AND c.n > 0 AND c.queue NOT IN (SELECT name FROM queues)
      UNION ALL
      SELECT name, paused, (concurrency IS NOT NULL OR rate_count IS NOT NULL) FROM queues) v;

-- name: claim_id
-- Claim one given task if it is queued (run_after is not waited for: the caller asked).
UPDATE tasks SET state = 'running', epoch = epoch + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until = julianday('now') + :lease / 86400.0,
    started_at = julianday('now'), error_code = NULL, error_message = NULL
WHERE id = :id AND state = 'queued'
RETURNING id, task, payload, epoch, attempt, max_attempts, wait_kind;

-- name: queued_ids
-- Runnable task ids of the given names in the given queues (JSON arrays), in claim
-- order within each queue, from unpaused queues (a hint; claiming decides).
SELECT id FROM tasks INDEXED BY tasks_ready
WHERE queue IN (SELECT value FROM json_each(:queues)) AND state = 'queued' AND delayed = 0
  AND task IN (SELECT value FROM json_each(:names))
  AND queue NOT IN (SELECT name FROM queues WHERE paused)
ORDER BY queue, priority DESC, run_after, id LIMIT :limit;

-- name: next_run_after
-- Seconds until the earliest delayed task of the given names becomes runnable, or a
-- waiting one wakes (its sleep or timeout ends).
SELECT (MIN(t) - julianday('now')) * 86400.0 AS wait FROM (
    SELECT MIN(run_after) AS t FROM tasks INDEXED BY tasks_delayed
    WHERE state = 'queued' AND delayed = 1 AND task IN (SELECT value FROM json_each(:names))
    UNION ALL
    SELECT MIN(wake_at) FROM tasks INDEXED BY tasks_waking
    WHERE state = 'waiting' AND wake_at IS NOT NULL
      AND task IN (SELECT value FROM json_each(:names)));

-- name: fence
-- The fencing check: the claimed epoch, a live state and an unexpired lease, by the
-- database clock. Takes the per-task event counter forward by :n in the same statement.
UPDATE tasks SET event_seq = event_seq + :n
WHERE id = :id AND epoch = :epoch AND state IN ('running', 'cancel_requested')
  AND lease_until > julianday('now')
RETURNING state, attempt, max_attempts, retry_safe, event_seq;

-- name: fence_many
-- The fencing check for a batch of terminal writes (:rows, a JSON array of
-- {id, epoch, n: its event count}): each task that passes it, with its event counter moved on
-- by its events, which its settlement (`finish`, `suspend`) then writes — a read, not
-- a second write of every row (the write transaction holds the database until its
-- commit, so nothing changes the rows in between). The batch first (CROSS JOIN fixes
-- the order) and NOT INDEXED (the primary key is the table itself): otherwise the
-- planner may walk every live task by an index and scan the batch for each; this way
-- each batch entry is one key lookup.
SELECT tasks.id, tasks.epoch, tasks.state, tasks.event_seq + v.n AS event_seq
FROM (SELECT value ->> 'id' AS id, value ->> 'epoch' AS epoch, value ->> 'n' AS n
      FROM json_each(:rows)) AS v
CROSS JOIN tasks NOT INDEXED ON tasks.id = v.id
WHERE tasks.epoch = v.epoch
  AND tasks.state IN ('running', 'cancel_requested') AND tasks.lease_until > julianday('now');

-- name: insert_event
-- One event, numbered by the task's counter.
INSERT INTO events (task_id, seq, attempt, type, data, at)
VALUES (:task_id, :seq, :attempt, :type, :data, julianday('now'));

-- name: heartbeat
-- Renew a lease if the authority still holds; answers the state (cancel delivery).
UPDATE tasks SET lease_until = julianday('now') + :lease / 86400.0
WHERE id = :id AND epoch = :epoch AND state IN ('running', 'cancel_requested')
  AND lease_until > julianday('now')
RETURNING state;

-- name: finish
-- The terminal (or retry) write, conditional on the state read under the fence; the
-- event counter a reading fence (fence_many) answered, if one did.
UPDATE tasks SET state = :state, result = :result, error_code = :error_code,
    error_message = :error_message, cancel_reason = COALESCE(cancel_reason, :reason),
    finished_at = CASE WHEN :terminal THEN julianday('now') END,
    lease_owner = NULL, lease_until = NULL,
    run_after = julianday('now') + :delay / 86400.0, delayed = (:delay > 0), wait_kind = NULL,
    event_seq = COALESCE(:event_seq, event_seq)
WHERE id = :id AND epoch = :epoch AND state = :from_state;

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
INSERT INTO outbox (event_id, task_id, created_at) VALUES (:event_id, :task_id, julianday('now'));

-- name: expired
-- Live tasks whose lease has run out.
SELECT id, epoch, state, attempt, max_attempts, retry_safe, request_bound FROM tasks
WHERE state IN ('running', 'cancel_requested') AND lease_until <= julianday('now')
ORDER BY lease_until LIMIT :limit;

-- name: live
-- Every live task (exclusive recovery only); few, so sorting them is cheap.
SELECT id, epoch, state, attempt, max_attempts, retry_safe, request_bound
FROM tasks INDEXED BY tasks_live
WHERE state IN ('running', 'cancel_requested') ORDER BY id LIMIT :limit;

-- name: resolve_expired
-- Apply a lease-expiry outcome, if the task is still as it was read (the event number
-- for its `lease_expired` event taken too).
UPDATE tasks SET state = :state, error_code = :error_code, error_message = :error_message,
    finished_at = CASE WHEN :terminal THEN julianday('now') END,
    lease_owner = NULL, lease_until = NULL, event_seq = event_seq + 1,
    run_after = julianday('now') + :delay / 86400.0, delayed = (:delay > 0), wait_kind = NULL
WHERE id = :id AND epoch = :epoch AND state = :from_state
  AND (:exclusive OR lease_until <= julianday('now'));

-- name: expiry_event
-- The `lease_expired` event of a task `resolve_expired` just settled (its number taken).
INSERT INTO events (task_id, seq, attempt, type, data, at)
SELECT id, event_seq, attempt, 'lease_expired', :data, julianday('now') FROM tasks WHERE id = :id;

-- name: effect_get
-- What a previous attempt recorded about one external side effect.
SELECT key, status, result, attempt FROM effects WHERE task_id = :task_id AND key = :key;

-- name: effect_start
-- Record that an external side effect is about to happen.
INSERT INTO effects (task_id, key, status, attempt, started_at)
VALUES (:task_id, :key, 'started', :attempt, julianday('now'))
ON CONFLICT (task_id, key) DO UPDATE SET status = 'started', attempt = :attempt,
    started_at = julianday('now'), done_at = NULL, result = NULL;

-- name: effect_done
-- Record that an external side effect completed.
UPDATE effects SET status = 'done', result = :result, done_at = julianday('now')
WHERE task_id = :task_id AND key = :key;

-- name: events_after
-- Events of one task after a sequence number.
SELECT task_id, seq, attempt, type, data, at FROM events
WHERE task_id = :task_id AND seq > :after ORDER BY seq LIMIT :limit;

-- name: bump_counter
-- Add to a recovery-health counter.
INSERT INTO counters (name, value) VALUES (:name, :n)
ON CONFLICT (name) DO UPDATE SET value = value + :n;

-- name: counters
-- Every counter.
SELECT name, value FROM counters;

-- name: register_worker
-- An executor announces itself: what it is, and its first heartbeat.
INSERT INTO workers (id, host, pid, started_at, owner, runner, queues, slots, heartbeat_at)
VALUES (:id, :host, :pid, julianday('now'), :owner, :runner, :queues, :slots, julianday('now'));

-- name: heartbeat_worker
-- An executor is alive (a row found dead by mistake, a stalled one, lives again).
UPDATE workers SET heartbeat_at = julianday('now'), ended = NULL, ended_at = NULL
WHERE id = :id AND ended IS NOT 'stopped';

-- name: mark_dead_workers
-- Executors whose heartbeat is older than :after seconds are presumed dead.
UPDATE workers SET ended = 'dead', ended_at = julianday('now')
WHERE ended IS NULL AND heartbeat_at < julianday('now') - :after / 86400.0;

-- name: prune_workers
-- Rows of executors that ended more than :keep seconds ago.
DELETE FROM workers WHERE ended_at < julianday('now') - :keep / 86400.0;

-- name: unregister_worker
-- An executor leaves (the row is kept a while, marked stopped).
UPDATE workers SET ended = 'stopped', ended_at = julianday('now') WHERE id = :id;

-- name: clear_workers
-- Exclusive recovery: no executor holds the lock, so every live row is stale.
UPDATE workers SET ended = 'dead', ended_at = julianday('now') WHERE ended IS NULL;

-- name: list_workers
-- Every executor's row, newest first.
SELECT * FROM workers ORDER BY started_at DESC, id;

-- name: running_tasks
-- What runs now, and whose claim it is (tasks_live: the running tasks only).
SELECT id, task, lease_owner, started_at, lease_until FROM tasks
WHERE state IN ('running', 'cancel_requested') ORDER BY started_at;

-- name: outbox_pending
-- Deliveries due for a URL, oldest first (rows made with each notification).
SELECT event_id, task_id, attempts FROM deliveries INDEXED BY deliveries_due
WHERE url = :url AND delivered_at IS NULL AND next_attempt_at <= julianday('now')
ORDER BY next_attempt_at LIMIT :limit;

-- name: subscribe
-- A webhook URL; answers it only when it is new (then its history is queued).
INSERT INTO webhooks (url, created_at) VALUES (:url, julianday('now'))
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
SELECT w.url, (SELECT COUNT(*) FROM deliveries d INDEXED BY deliveries_due
               WHERE d.url = w.url AND d.delivered_at IS NULL) AS pending
FROM webhooks w ORDER BY w.url;

-- name: delivery_attempted
-- Record one delivery attempt and when to try again (a row made here, for a URL that
-- was unsubscribed meanwhile, still names its task: read from the outbox).
INSERT INTO deliveries (event_id, task_id, url, attempts, delivered_at, next_attempt_at,
                        last_error)
SELECT :event_id, (SELECT task_id FROM outbox WHERE event_id = :event_id), :url, 1,
       CASE WHEN :ok THEN julianday('now') END, julianday('now') + :delay / 86400.0, :error
WHERE true
ON CONFLICT (event_id, url) DO UPDATE SET attempts = attempts + 1,
    delivered_at = CASE WHEN :ok THEN julianday('now') END,
    next_attempt_at = julianday('now') + :delay / 86400.0, last_error = :error;

-- name: outbox_for_task
-- The notification row of one task, if any.
SELECT event_id, task_id, created_at FROM outbox WHERE task_id = :task_id;

-- name: oldest_undelivered
-- Seconds since the oldest notification not yet delivered to :url (notification lag).
SELECT (julianday('now') - MIN(o.created_at)) * 86400.0 AS lag
FROM deliveries d INDEXED BY deliveries_due JOIN outbox o ON o.task_id = d.task_id
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

-- name: prunable
-- Terminal tasks finished before :before whose notifications no subscribed URL still
-- waits for; at most :limit. (`<> 'queued'` lets SQLite see that the partial index
-- covers these states; queued tasks are not in it.)
SELECT t.id FROM tasks t INDEXED BY tasks_by_state
WHERE t.state <> 'queued' AND t.state IN ('succeeded', 'failed', 'cancelled')
  AND t.finished_at < :before
  AND NOT EXISTS (SELECT 1 FROM outbox o JOIN deliveries d ON d.event_id = o.event_id
                  WHERE o.task_id = t.id AND d.delivered_at IS NULL)
LIMIT :limit;

-- name: prune_events
-- The events of pruned tasks (JSON array of ids).
DELETE FROM events WHERE task_id IN (SELECT value FROM json_each(:ids));

-- name: prune_effects
-- The effect records of pruned tasks.
DELETE FROM effects WHERE task_id IN (SELECT value FROM json_each(:ids));

-- name: prune_deliveries
-- The delivery records of pruned tasks' notifications.
DELETE FROM deliveries
WHERE event_id IN (SELECT event_id FROM outbox WHERE task_id IN (SELECT value FROM json_each(:ids)));

-- name: prune_outbox
-- The notifications of pruned tasks.
DELETE FROM outbox WHERE task_id IN (SELECT value FROM json_each(:ids));

-- name: prune_tasks
-- The pruned tasks themselves (terminal ones only, whatever the caller passed).
DELETE FROM tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('succeeded', 'failed', 'cancelled');

-- name: queue_settings
-- Set a queue's limits (a NULL limit is none); a new rate starts with a full bucket.
INSERT INTO queues (name, paused, concurrency, rate_count, rate_period, tokens, tokens_at,
                    updated_at)
VALUES (:name, 0, :concurrency, :rate_count, :rate_period, :rate_count, julianday('now'),
        julianday('now'))
ON CONFLICT (name) DO UPDATE SET
    concurrency = CASE WHEN :set_concurrency THEN :concurrency ELSE concurrency END,
    tokens = CASE WHEN :set_rate THEN :rate_count ELSE tokens END,
    tokens_at = CASE WHEN :set_rate THEN julianday('now') ELSE tokens_at END,
    rate_count = CASE WHEN :set_rate THEN :rate_count ELSE rate_count END,
    rate_period = CASE WHEN :set_rate THEN :rate_period ELSE rate_period END,
    updated_at = julianday('now');

-- name: queue_pause
-- Pause (1) or resume (0) a queue.
INSERT INTO queues (name, paused, updated_at) VALUES (:name, :paused, julianday('now'))
ON CONFLICT (name) DO UPDATE SET paused = :paused, updated_at = julianday('now');

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
VALUES (:name, :task, :cron, :every_s, :timezone, :payload, :queue, :priority, :catch_up,
        :origin, :next_tick, NULL, NULL, julianday('now'), julianday('now'))
ON CONFLICT (name) DO UPDATE SET task = :task, cron = :cron, every_s = :every_s,
    timezone = :timezone, payload = :payload, queue = :queue, priority = :priority,
    catch_up = :catch_up, origin = :origin, next_tick = :next_tick,
    updated_at = julianday('now');

-- name: schedule_delete
-- Forget a schedule.
DELETE FROM schedules WHERE name = :name;

-- name: schedules_all
-- Every schedule, by name.
SELECT * FROM schedules ORDER BY name;

-- name: schedules_due
-- Schedules whose next tick has come, by the database clock (with that clock).
SELECT s.*, julianday('now') AS now FROM schedules s INDEXED BY schedules_due
WHERE s.next_tick <= julianday('now') ORDER BY s.next_tick LIMIT :limit;

-- name: schedule_advance
-- Move a schedule past the ticks just submitted, unless another scheduler did.
UPDATE schedules SET next_tick = :next_tick,
    last_tick = COALESCE(:last_tick, last_tick), last_task_id = COALESCE(:last_task_id, last_task_id)
WHERE name = :name AND next_tick = :from_tick;

-- name: suspend
-- End an execution into a wait, fenced (the caller fenced it in this transaction; a
-- request-bound task, which no worker would resume, matches nothing):
-- 'waiting' with what it waits for — or at once 'queued' when that already came (a
-- signal sent, every child ended, the time reached). Not an attempt: attempt goes back.
UPDATE tasks SET
    state = CASE WHEN (:kind = 'signal' AND EXISTS (SELECT 1 FROM signals s
                                                   WHERE s.task_id = :id AND s.name = :name))
                   OR (:kind = 'join' AND NOT EXISTS (
                         SELECT 1 FROM json_each(:ids) j JOIN tasks c ON c.id = j.value
                         WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled')))
                   OR (:wake_at IS NOT NULL AND :wake_at <= julianday('now'))
                 THEN 'queued' ELSE 'waiting' END,
    attempt = attempt - 1, lease_owner = NULL, lease_until = NULL, delayed = 0,
    run_after = julianday('now'), wait_kind = :kind, wait_name = :name, wait_ids = :ids,
    wake_at = :wake_at, event_seq = COALESCE(:event_seq, event_seq)
WHERE id = :id AND epoch = :epoch AND state = 'running' AND NOT request_bound
RETURNING state;

-- name: journal_wait
-- A wait's journal record, the first time it is reached (later runs keep the first:
-- a resumed sleep ends when it was first due).
INSERT INTO effects (task_id, key, status, result, attempt, started_at)
VALUES (:task_id, :key, 'wait', :result, :attempt, julianday('now'))
ON CONFLICT (task_id, key) DO NOTHING;

-- name: signal_insert
-- Record a signal once per (task, name); answers it only when new.
INSERT INTO signals (task_id, name, data, created_at)
VALUES (:task_id, :name, :data, julianday('now'))
ON CONFLICT (task_id, name) DO NOTHING RETURNING data;

-- name: signal_get
-- One signal.
SELECT data FROM signals WHERE task_id = :task_id AND name = :name;

-- name: signals_of
-- Every signal of a task, oldest first.
SELECT name, data, created_at FROM signals WHERE task_id = :task_id ORDER BY created_at, name;

-- name: signal_wake
-- A task waiting for this signal is queued again.
UPDATE tasks SET state = 'queued', delayed = 0, run_after = julianday('now'), wake_at = NULL
WHERE id = :task_id AND state = 'waiting' AND wait_kind = 'signal' AND wait_name = :name;

-- name: task_lock
-- Serialise a task's suspend with its signals and children's ends (SQLite: the write
-- lock does already).
SELECT 1;

-- name: list_children
-- A page of a task's children, newest first.
SELECT * FROM tasks INDEXED BY tasks_children
WHERE parent_id = :parent AND (:cursor IS NULL OR id < :cursor)
ORDER BY id DESC LIMIT :limit;

-- name: live_children
-- The ids of a task's children that are not terminal.
SELECT id FROM tasks INDEXED BY tasks_children
WHERE parent_id = :parent AND state NOT IN ('succeeded', 'failed', 'cancelled');

-- name: journal_of
-- A task's effect journal: steps, waits and effects, in the order they began.
SELECT key, status, result, attempt, started_at, done_at FROM effects
WHERE task_id = :task_id ORDER BY started_at, key;

-- name: prune_signals
-- The signals of pruned tasks.
DELETE FROM signals WHERE task_id IN (SELECT value FROM json_each(:ids));

-- name: search_tasks
-- Tasks matching a filter, newest first (keyset: `filter_cursor`); `{terms}` is the
-- filter's `filter_*` blocks, each walking an index (migration 007).
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
AND task = :task

-- name: filter_queue
-- One queue (tasks_by_queue).
AND queue = :queue

-- name: filter_parent_id
-- The children of one task (tasks_children).
AND parent_id = :parent_id

-- name: filter_idempotency_key
-- The task holding an idempotency key (tasks_key).
AND idempotency_key = :idempotency_key

-- name: filter_low
-- Ids from this one on (an id prefix, a created-after time).
AND id >= :low

-- name: filter_high
-- Ids before this one (past an id prefix, a created-before time).
AND id < :high

-- name: filter_cursor
-- The next page: ids before the last one handed out.
AND id < :cursor

-- name: filter_not_retried
-- Tasks no retry has been made of yet (tasks_retries).
AND NOT EXISTS (SELECT 1 FROM tasks r INDEXED BY tasks_retries WHERE r.retry_of = tasks.id)

-- name: retry_tasks
-- New queued tasks made from ended ones (JSON array of {id, src, key}): the same name,
-- payload, attempts, queue, priority and keys, `retry_of` the source; a source that is
-- not terminal, or a key taken (a retry made already, a live task holding the unique
-- key), inserts nothing.
INSERT INTO tasks (id, task, payload, state, max_attempts, retry_safe, request_bound,
                   timeout, idempotency_key, run_after, created_at, queue, priority,
                   delayed, concurrency_key, concurrency_limit, unique_key, retry_of)
SELECT r.value ->> 'id', t.task, t.payload, 'queued', t.max_attempts, t.retry_safe, 0,
       t.timeout, r.value ->> 'key', julianday('now'), julianday('now'), t.queue,
       t.priority, 0, t.concurrency_key, t.concurrency_limit, t.unique_key, t.id
FROM json_each(:rows) r JOIN tasks t ON t.id = r.value ->> 'src'
WHERE t.state IN ('succeeded', 'failed', 'cancelled')
ORDER BY r.key
ON CONFLICT DO NOTHING
RETURNING id, retry_of;

-- name: explain
-- The prefix that makes a statement answer its plan (the search bench and tests).
EXPLAIN QUERY PLAN

-- name: queue_activity
-- Claims and waits per queue and minute over the last :minutes minutes (the charts).
SELECT queue, minute, SUM(claims) AS claims, SUM(wait_ms_sum) AS wait_ms_sum,
       MAX(wait_ms_max) AS wait_ms_max
FROM queue_activity WHERE minute >= CAST((julianday('now') - 2440587.5) * 1440 AS INTEGER) - :minutes
GROUP BY queue, minute ORDER BY queue, minute;

-- name: prune_activity
-- Activity rows older than :minutes minutes.
DELETE FROM queue_activity WHERE minute < CAST((julianday('now') - 2440587.5) * 1440 AS INTEGER) - :minutes;

-- name: timeline_events
-- The events a task's timeline of attempts is made of (in its key's order; the other
-- events — output chunks, progress — are passed over, not read out).
SELECT task_id, seq, attempt, type, data, at FROM events
WHERE task_id = :task_id AND type IN ('attempt', 'resumed', 'retry', 'lease_expired', 'waiting')
ORDER BY seq LIMIT 10000;

-- name: trace_context
-- The stored trace context of a task (tracing.py).
SELECT trace_context FROM tasks WHERE id = :id;
