-- Webhook subscriptions live in the database, and a notification gets its delivery
-- rows (one per subscribed URL) in the transaction that inserts it: a dispatcher then
-- finds what is due by an index range, where it used to read every notification ever
-- made against its deliveries.
CREATE TABLE IF NOT EXISTS webhooks (
    url        TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS task_id TEXT;
UPDATE deliveries d SET task_id = o.task_id FROM outbox o
WHERE o.event_id = d.event_id AND d.task_id IS NULL;
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (url, next_attempt_at)
    WHERE delivered_at IS NULL;
CREATE OR REPLACE FUNCTION tasklab_queue_deliveries() RETURNS trigger AS $$
BEGIN
    INSERT INTO deliveries (event_id, url, attempts, next_attempt_at, task_id)
    SELECT n.event_id, w.url, 0, n.created_at, n.task_id FROM new_rows n CROSS JOIN webhooks w;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS outbox_deliveries ON outbox;
CREATE TRIGGER outbox_deliveries AFTER INSERT ON outbox REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tasklab_queue_deliveries();
