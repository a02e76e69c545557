-- Webhook subscriptions live in the database, and a notification gets its delivery
-- rows (one per subscribed URL) in the transaction that inserts it: a dispatcher then
-- finds what is due by an index range, where it used to read every notification ever
-- made against its deliveries.
CREATE TABLE webhooks (
    url        TEXT NOT NULL PRIMARY KEY,
    created_at REAL NOT NULL
) WITHOUT ROWID;
ALTER TABLE deliveries ADD COLUMN task_id TEXT;
UPDATE deliveries SET task_id = o.task_id FROM outbox o WHERE o.event_id = deliveries.event_id;
CREATE INDEX deliveries_due ON deliveries (url, next_attempt_at) WHERE delivered_at IS NULL;
CREATE TRIGGER outbox_deliveries AFTER INSERT ON outbox BEGIN
    INSERT INTO deliveries (event_id, url, attempts, next_attempt_at, task_id)
    SELECT NEW.event_id, w.url, 0, NEW.created_at, NEW.task_id FROM webhooks w;
END;
