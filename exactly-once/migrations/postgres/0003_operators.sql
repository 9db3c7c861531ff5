-- What issue 38 needs for operators (additive only). See
-- migrations/sqlite/0003_operators.sql.
CREATE TABLE IF NOT EXISTS operator_actions (
    id             BIGSERIAL   PRIMARY KEY,
    at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    action         TEXT        NOT NULL,
    operation      TEXT        NOT NULL,
    caller         BYTEA       NOT NULL,
    key            TEXT        NOT NULL,
    generation     BIGINT      NOT NULL,
    recovery_point TEXT        NOT NULL,
    attention      TEXT,
    last_error     TEXT,
    outcome        TEXT,
    status         SMALLINT,
    reason         TEXT,
    operator       TEXT        NOT NULL
);
CREATE INDEX IF NOT EXISTS operator_actions_by_operation ON operator_actions (operation);
-- A claim's own 'claimed' (a transaction's first statement, never
-- committed as such) is left out too, so a one-phase operation's record is
-- never in it, whichever way it is written.
CREATE INDEX IF NOT EXISTS idempotency_keys_open ON idempotency_keys (created_at)
    WHERE recovery_point NOT IN ('finished', 'expired', 'claimed');
-- now() is stable, not volatile: existing rows take the migration's time
-- without a rewrite of the table, new rows their insert's.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS created_at TIMESTAMPTZ DEFAULT now();
