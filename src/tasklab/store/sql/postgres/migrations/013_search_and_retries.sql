-- Search and retries (SPEC §9). Every filter of a search walks an index in id order
-- (newest first, keyset-paged): a state through tasks_by_state, or tasks_queued for
-- queued tasks (tasks_by_state leaves them out); a task name or a queue through an
-- index of its own; a parent through tasks_children; an idempotency key through
-- tasks_key; an id prefix and a created range are ranges of the primary key (ids are
-- time-ordered). `retry_of`: the task a retry was made from (`app.retry`), indexed so
-- that a bulk retry skips tasks retried already.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS retry_of TEXT;
CREATE INDEX tasks_queued ON tasks (id) WHERE state = 'queued';
CREATE INDEX tasks_by_task ON tasks (task, id);
CREATE INDEX tasks_by_queue ON tasks (queue, id);
CREATE INDEX tasks_retries ON tasks (retry_of) WHERE retry_of IS NOT NULL;
-- tasks_queued is a partial index any claim could walk (its predicate is implied by
-- every claim's); with statistics that say `tasks` is empty the limited claim's
-- per-queue candidates chose it and sorted a walk of every queued task of every
-- queue (tests/integration/test_pg_plans.py). With sorts priced out, as the open claim
-- has them (011), its candidates come in order from tasks_ready; the one sort left,
-- across the served queues' few candidates, is priced out for every plan alike.
ALTER FUNCTION tasklab_claim_limited(TEXT[], TEXT[], BIGINT[], BOOLEAN, INTEGER, TEXT,
                                     DOUBLE PRECISION) SET enable_sort = off;
-- And tasklab_take (010) updates rows by their addresses: under the same statistics
-- its `state = 'queued'` guard made tasks_queued look cheaper than the TID scan, a
-- walk of every queued task per claim. No index finds a row faster than its address.
ALTER FUNCTION tasklab_take(TEXT[], TID[], TEXT, DOUBLE PRECISION)
    SET enable_indexscan = off SET enable_bitmapscan = off;
