-- Durable functions (SPEC §8): a task may wait — for a time, a signal or its
-- children — in the state 'waiting', which holds no lease and no slot. What it waits
-- for is on its row; its steps and waits are in the effect journal (effects).
ALTER TABLE tasks ADD COLUMN parent_id TEXT;
ALTER TABLE tasks ADD COLUMN wait_kind TEXT;  -- sleep | signal | join; kept into the resumed run
ALTER TABLE tasks ADD COLUMN wait_name TEXT;  -- the signal waited for
ALTER TABLE tasks ADD COLUMN wait_ids TEXT;   -- the children joined (JSON array)
ALTER TABLE tasks ADD COLUMN wake_at REAL;    -- a sleep's end or a wait's timeout
-- Waiting tasks that wake at a time, by that time: the claim's stager wakes the due
-- ones (one index range, usually empty) — no polling per waiting task.
CREATE INDEX tasks_waking ON tasks (wake_at) WHERE state = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX tasks_children ON tasks (parent_id, id) WHERE parent_id IS NOT NULL;
-- Signals, once per (task, name): a second one answers the first.
CREATE TABLE signals (
    task_id    TEXT NOT NULL,
    name       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (task_id, name)
) WITHOUT ROWID;
-- A child that ends wakes its parent joined on it once none of the joined children
-- is still live (SQLite's writers take turns: the last child to end sees the others).
CREATE TRIGGER tasks_child_ended AFTER UPDATE OF state ON tasks
WHEN new.parent_id IS NOT NULL AND new.state IN ('succeeded', 'failed', 'cancelled')
 AND old.state <> new.state
BEGIN
    UPDATE tasks SET state = 'queued', delayed = 0, run_after = julianday('now'), wake_at = NULL
    WHERE id = new.parent_id AND state = 'waiting' AND wait_kind = 'join'
      AND NOT EXISTS (SELECT 1 FROM json_each(tasks.wait_ids) j JOIN tasks c ON c.id = j.value
                      WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled'));
END;
