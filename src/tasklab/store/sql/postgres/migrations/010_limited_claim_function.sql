-- The limited claim in one round trip (SPEC §7): what `SqlClaims._claim_limited` does
-- in ~6 statements — stager, locks, settings and counts, candidates, key counts,
-- claim, tokens — as one function, the same rule: under the claim's advisory locks
-- (one per served queue and per task name with a per-key limit, sorted by the caller),
-- read each queue's room after them, walk the queues' first runnable tasks merged in
-- claim order, take each while its queue has room, its (task, key) is under its limit
-- counting those taken here, and the claim has slots; then claim them and take the
-- rate tokens. A page read deeper (x4, up to 4096) only when keys at their limit held
-- a queue's room back.
-- Claim rows the caller's transaction has locked — found by their physical address
-- (a TID scan whatever the statistics say; see migration 011), so they stay where
-- they are — answering them in the order of `ids`. What a claim sets, written once for
-- the open and the limited claim.
CREATE FUNCTION tasklab_take(
    ids TEXT[], rows_ TID[], claimant TEXT, lease DOUBLE PRECISION)
RETURNS TABLE (id TEXT, task TEXT, payload TEXT, epoch BIGINT, attempt INTEGER,
               max_attempts INTEGER, wait_kind TEXT)
-- (PL/pgSQL, not SQL: its plan is kept for the session, a SQL function's is made anew
-- at every call — 0.13 ms of a 0.85 ms claim)
LANGUAGE plpgsql SET jit = off AS $take$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH claimed AS (
        UPDATE tasks t SET state = 'running', epoch = t.epoch + 1, attempt = t.attempt + 1,
            lease_owner = claimant,
            lease_until = clock_timestamp() + make_interval(secs => lease),
            started_at = clock_timestamp(), error_code = NULL, error_message = NULL
        WHERE t.ctid = ANY(rows_) AND t.state = 'queued'
        RETURNING t.id, t.task, t.payload, t.epoch, t.attempt, t.max_attempts, t.wait_kind)
    SELECT c.id, c.task, c.payload, c.epoch, c.attempt, c.max_attempts, c.wait_kind
    FROM claimed c ORDER BY array_position(ids, c.id);
END
$take$;
CREATE FUNCTION tasklab_claim_limited(
    served TEXT[], names TEXT[], lock_keys BIGINT[], keyed BOOLEAN, lim INTEGER,
    claimant TEXT, lease DOUBLE PRECISION)
RETURNS TABLE (id TEXT, task TEXT, payload TEXT, epoch BIGINT, attempt INTEGER,
               max_attempts INTEGER, wait_kind TEXT)
LANGUAGE plpgsql SET jit = off AS $limited$
#variable_conflict use_column
DECLARE
    now_ts TIMESTAMPTZ;
    s RECORD;
    c RECORD;
    qs TEXT[] := '{}';          -- queues with room, in `served` order
    room INTEGER[] := '{}';     -- their room left in this claim
    page INTEGER[] := '{}';     -- candidates read per queue
    seen INTEGER[];             -- candidates that came back per queue
    bucket DOUBLE PRECISION[] := '{}';  -- tokens after refill; NULL: no rate limit
    left_ INTEGER;
    tok DOUBLE PRECISION;
    chosen TEXT[];              -- ids taken, in claim order
    chosen_rows TID[];          -- where they are (locked here, so they stay there)
    taken INTEGER[];            -- of them, per queue
    key_tasks TEXT[];           -- the (task, key) pairs taken
    key_names TEXT[];
    i INTEGER;
    deeper BOOLEAN;
    n_live INTEGER;
BEGIN
    PERFORM tasklab_promote();
    PERFORM pg_advisory_xact_lock(k) FROM unnest(lock_keys) AS k ORDER BY k;
    now_ts := clock_timestamp();
    FOR s IN
        SELECT u.name, q.paused, q.concurrency, q.rate_count, q.rate_period, q.tokens,
               q.tokens_at,
               COALESCE((SELECT SUM(c.n) FROM task_counts c WHERE c.queue = u.name
                         AND c.state IN ('running', 'cancel_requested')), 0) AS running
        FROM unnest(served) WITH ORDINALITY AS u(name, pos)
        LEFT JOIN queues q ON q.name = u.name
        ORDER BY u.pos
    LOOP
        left_ := lim;
        tok := NULL;
        IF s.paused THEN
            left_ := 0;
        END IF;
        IF s.concurrency IS NOT NULL THEN
            left_ := LEAST(left_, s.concurrency - s.running::INTEGER);
        END IF;
        IF s.rate_count IS NOT NULL THEN
            tok := LEAST(s.rate_count::DOUBLE PRECISION,
                         COALESCE(s.tokens, s.rate_count::DOUBLE PRECISION)
                         + CASE WHEN s.tokens_at IS NULL THEN 0
                                ELSE GREATEST(0, EXTRACT(EPOCH FROM now_ts - s.tokens_at))
                                     * s.rate_count / s.rate_period END);
            left_ := LEAST(left_, floor(tok + 1e-9)::INTEGER);
        END IF;
        IF left_ > 0 THEN
            qs := qs || s.name;
            room := room || left_;
            page := page || (left_ + CASE WHEN keyed THEN 8 ELSE 0 END);
            bucket := bucket || tok;
        END IF;
    END LOOP;
    IF cardinality(qs) = 0 THEN
        RETURN;
    END IF;
    FOR depth IN 1..4 LOOP
        chosen := '{}';
        chosen_rows := '{}';
        key_tasks := '{}';
        key_names := '{}';
        seen := array_fill(0, ARRAY[cardinality(qs)]);
        taken := array_fill(0, ARRAY[cardinality(qs)]);
        FOR c IN
            SELECT t.id, t.ctid, t.task, t.queue, t.concurrency_key, t.concurrency_limit,
                   array_position(qs, t.queue) AS at, COALESCE(k.n, 0) AS live
            FROM unnest(qs, page) AS w(name, n)
            CROSS JOIN LATERAL (
                SELECT q.id, q.ctid, q.task, q.queue, q.priority, q.run_after, q.concurrency_key,
                       q.concurrency_limit
                FROM tasks q
                WHERE q.queue = w.name AND q.state = 'queued' AND NOT q.delayed
                  AND NOT q.request_bound AND q.task = ANY(names)
                ORDER BY q.priority DESC, q.run_after, q.id LIMIT w.n
                FOR UPDATE SKIP LOCKED) t
            LEFT JOIN key_counts k  -- live tasks of its key, read under the name's lock
              ON t.concurrency_limit IS NOT NULL AND k.task = t.task AND k.key = t.concurrency_key
            ORDER BY t.priority DESC, t.run_after, t.id
        LOOP
            seen[c.at] := seen[c.at] + 1;
            CONTINUE WHEN cardinality(chosen) >= lim OR taken[c.at] >= room[c.at];
            IF c.concurrency_key IS NOT NULL AND c.concurrency_limit IS NOT NULL THEN
                n_live := c.live;  -- and those taken here (a few: a loop, no query)
                FOR j IN 1..coalesce(cardinality(key_tasks), 0) LOOP
                    IF key_tasks[j] = c.task AND key_names[j] = c.concurrency_key THEN
                        n_live := n_live + 1;
                    END IF;
                END LOOP;
                CONTINUE WHEN n_live >= c.concurrency_limit;
                key_tasks := key_tasks || c.task;
                key_names := key_names || c.concurrency_key;
            END IF;
            chosen := chosen || c.id;
            chosen_rows := chosen_rows || c.ctid;
            taken[c.at] := taken[c.at] + 1;
        END LOOP;
        EXIT WHEN cardinality(chosen) >= lim OR NOT keyed;
        -- keys at their limit held room back: read the pages that came back full deeper
        deeper := false;
        FOR i IN 1..cardinality(qs) LOOP
            IF seen[i] = page[i] AND page[i] < 4096 AND taken[i] < room[i] THEN
                page[i] := LEAST(page[i] * 4, 4096);
                deeper := true;
            END IF;  -- else the same page again: its tasks stay locked by this claim
        END LOOP;
        EXIT WHEN NOT deeper;
    END LOOP;
    IF cardinality(chosen) = 0 THEN
        RETURN;
    END IF;
    -- every chosen task is locked by this transaction and was queued under its lock,
    -- so each is claimed below: take the tokens it uses
    FOR i IN 1..cardinality(qs) LOOP
        IF bucket[i] IS NOT NULL THEN
            UPDATE queues SET tokens = bucket[i] - taken[i], tokens_at = now_ts
            WHERE name = qs[i];
        END IF;
    END LOOP;
    RETURN QUERY SELECT * FROM tasklab_take(chosen, chosen_rows, claimant, lease);
END
$limited$;
-- The limited claim read its candidates through this one; it does so itself now.
DROP FUNCTION tasklab_candidates(TEXT, TEXT[], INTEGER);
