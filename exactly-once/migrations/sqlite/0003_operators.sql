-- What issue 38 needs for operators (additive only: a release that does
-- not know these tables and columns reads and writes as before).
--
-- Every operator's action on an operation (`server operations retry` and
-- `settle`), kept for good: who, when, what the operation was then, and
-- what was recorded. Settling writes its row in the transaction that
-- records the operation's answer.
CREATE TABLE IF NOT EXISTS operator_actions (
    id             INTEGER PRIMARY KEY,
    at             INTEGER NOT NULL,        -- Unix ms, the wall clock: for people
    action         TEXT    NOT NULL,        -- 'retry' or 'settle'
    operation      TEXT    NOT NULL,        -- SHA-256 of caller and key, hex (the logs' `op` is its first 12 digits)
    caller         BLOB    NOT NULL,
    key            TEXT    NOT NULL,
    generation     INTEGER NOT NULL,
    recovery_point TEXT    NOT NULL,        -- where the operation stood
    attention      TEXT,                    -- why it was set aside, if it was
    last_error     TEXT,
    outcome        TEXT,                    -- settle: the application's name of the answer recorded
    status         INTEGER,                 -- settle: that answer's HTTP status
    reason         TEXT,                    -- the operator's own words
    operator       TEXT    NOT NULL         -- who ($USER, or --operator)
);
CREATE INDEX IF NOT EXISTS operator_actions_by_operation ON operator_actions (operation);

-- Unfinished operations (running, stalled past their lease, set aside),
-- oldest first: what `server operations list` and the gauges read, without
-- a scan of the finished records and tombstones. Only an operation in
-- phases is ever in it, and only until it finishes: a key's one-phase
-- record (the new-key path) is not.
CREATE INDEX IF NOT EXISTS idempotency_keys_open ON idempotency_keys (created_at)
    WHERE recovery_point NOT IN ('finished', 'expired');

-- When a message was written (the database's clock, ms), for the age of
-- the oldest one waiting. NULL in rows written before: their first
-- `next_attempt_at` stands in.
ALTER TABLE outbox ADD COLUMN created_at INTEGER;
