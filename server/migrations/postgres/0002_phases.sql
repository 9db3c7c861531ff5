-- Version 2, as in the SQLite schema: records keyed by (caller, key),
-- operations in phases with a recovery point and a lease, charges through
-- a provider, the receipt outbox. Every time a record is judged by
-- (created, expires, lease deadline) is a timestamptz written and compared
-- with the database's own clock (now()), never an instance's: instances
-- whose clocks disagree still agree on which records are live.

CREATE TABLE idempotency_records (
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
INSERT INTO idempotency_records
    (caller, key, fingerprint, recovery_point, status, headers, body, created_at, expires_at)
SELECT caller, key, fingerprint, 'finished', status,
       NULLIF(headers, 'content-type: application/json' || chr(10)), body,
       to_timestamp(created_at / 1000.0), to_timestamp(expires_at / 1000.0)
FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_records RENAME TO idempotency_keys;
ALTER INDEX idempotency_records_pkey RENAME TO idempotency_keys_pkey;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
CREATE INDEX idempotency_keys_unfinished ON idempotency_keys (leased_until)
    WHERE recovery_point <> 'finished';

-- A charge is its caller's: the primary key (caller, id) is also the order
-- GET /charges reads, so the second index goes.
ALTER TABLE charges DROP CONSTRAINT charges_pkey, ADD PRIMARY KEY (caller, id);
DROP INDEX charges_by_caller;
ALTER TABLE charges
    ADD COLUMN status TEXT NOT NULL DEFAULT 'succeeded'
        CHECK (status IN ('pending', 'succeeded', 'failed')),
    ADD COLUMN payment_method TEXT NOT NULL DEFAULT 'pm_card_visa',
    ADD COLUMN provider_charge TEXT,
    ADD COLUMN receipt_email TEXT;

CREATE TABLE outbox (
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
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE sent_at IS NULL;
