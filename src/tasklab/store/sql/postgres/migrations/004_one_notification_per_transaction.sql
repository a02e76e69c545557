-- A notification says only "something changed" (readers re-read; nobody used the task
-- id it carried), so PostgreSQL folds those of one transaction into one: a batch of
-- 1,000 submits or a group commit of 32 finishes wakes each listener once, not once per
-- row. Inserts notify once per statement.
CREATE OR REPLACE FUNCTION tasklab_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tasklab', '');
    RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS tasks_notify_insert ON tasks;
CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_notify();
DROP TRIGGER IF EXISTS tasks_notify_state ON tasks;
CREATE TRIGGER tasks_notify_state AFTER UPDATE OF state ON tasks
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state <> 'running')
    EXECUTE FUNCTION tasklab_notify();
DROP TRIGGER IF EXISTS events_notify ON events;
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_notify();
DROP FUNCTION IF EXISTS tasklab_notify_task();
DROP FUNCTION IF EXISTS tasklab_notify_event();
