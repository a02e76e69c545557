-- Fewer index entries per submit: the idempotency key is indexed only where there is
-- one, and tasks_by_state leaves queued tasks to tasks_claimable.
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_idempotency_key_key;
CREATE UNIQUE INDEX IF NOT EXISTS tasks_key ON tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS tasks_by_state;
CREATE INDEX tasks_by_state ON tasks (state, id) WHERE state <> 'queued';
