-- The engine's tables, recorded in `exactly_once_migrations` (the
-- application's own migrations are recorded in `schema_migrations`).
-- `IF NOT EXISTS` throughout: a database whose application created these
-- tables itself, before the engine was a library of its own (the demo
-- application's), adopts them as they are. Every time a record is judged by is a
-- timestamptz written and compared with the database's own clock (now()),
-- never an instance's.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    caller         BYTEA       NOT NULL,
    key            TEXT        NOT NULL,
    fingerprint    BYTEA       NOT NULL,
    recovery_point TEXT        NOT NULL,
    state          TEXT,
    lease_token    BYTEA,
    leased_until   TIMESTAMPTZ,
    status         SMALLINT,
    headers        TEXT,
    body           BYTEA,
    created_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (caller, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_by_expiry ON idempotency_keys (expires_at);
CREATE INDEX IF NOT EXISTS idempotency_keys_unfinished ON idempotency_keys (leased_until)
    WHERE recovery_point <> 'finished';

CREATE TABLE IF NOT EXISTS outbox (
    id              BIGSERIAL   PRIMARY KEY,
    message_id      TEXT        NOT NULL UNIQUE,
    recipient       TEXT        NOT NULL,
    subject         TEXT        NOT NULL,
    body            TEXT        NOT NULL,
    attempts        INTEGER     NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    claimed_until   TIMESTAMPTZ,
    last_error      TEXT,
    sent_at         TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt_at) WHERE sent_at IS NULL;
