-- The tasks table is a queue: every task is updated several times (claimed, fenced,
-- finished) and its old versions die at once. With the default autovacuum settings
-- (a vacuum once 20 % of the table is dead) a 1,000,000-task drain left hundreds of
-- thousands of dead entries at the front of the claimable index, which every claim
-- walked past: the drain slowed by half over the backlog. Vacuum it early and without
-- pauses, and leave room on each page so that updates of unindexed columns (the
-- event counter of a fence) stay on their page (HOT) instead of adding index entries.
ALTER TABLE tasks SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 50000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 50000,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 80
);
