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
