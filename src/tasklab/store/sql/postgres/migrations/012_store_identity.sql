-- Which store this database is: a random id made once, read by the store at open and
-- from a caller's own connection (`submit(..., connection=)`), so that a connection
-- to another database is refused instead of taking tasks no worker of this store sees.
CREATE TABLE IF NOT EXISTS store_identity (
    id TEXT PRIMARY KEY,
    one BOOLEAN NOT NULL DEFAULT true UNIQUE CHECK (one)
);
INSERT INTO store_identity (id) VALUES (gen_random_uuid()::text) ON CONFLICT DO NOTHING;
