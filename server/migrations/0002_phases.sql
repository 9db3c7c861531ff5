-- Version 2: records keyed by what identifies them, operations in phases,
-- charges through a provider, and the receipt outbox.
--
-- * A record's table is its own index: WITHOUT ROWID, primary key
--   (caller, key), so a new key is one B-tree insert instead of a rowid
--   row plus a UNIQUE index entry. The lone `content-type:
--   application/json` header most answers carry is stored as NULL.
-- * A record is finished (recovery_point 'finished', its response set) or
--   stopped at a recovery point of an operation in phases, with the state
--   to resume from and a lease (token and deadline, Unix ms).
-- * Charges are their caller's: primary key (caller, id), which is also
--   the order GET /charges reads, so no second index. They gain a status
--   (pending while the provider has not answered), the provider's charge
--   id, the payment method and the receipt address.
-- * The outbox holds receipts written in the transaction that finishes a
--   charge, until the relay has handed them to the SMTP server.

CREATE TABLE idempotency_records (
    caller         BLOB    NOT NULL,        -- SHA-256 of the caller's token, never the token
    key            TEXT    NOT NULL,        -- the Idempotency-Key, unquoted
    fingerprint    BLOB    NOT NULL,        -- SHA-256 of method, path, canonical JSON body
    recovery_point TEXT    NOT NULL,        -- 'finished', or where a phased operation stopped
    state          TEXT,                    -- what resuming needs (the operation's JSON)
    lease_token    BLOB,                    -- who may run the next phase ...
    leased_until   INTEGER,                 -- ... until when (Unix ms)
    status         INTEGER,                 -- the stored response, once finished ...
    headers        TEXT,                    -- ... "name: value" lines; NULL: content-type: application/json
    body           BLOB,                    -- ... byte for byte
    created_at     INTEGER NOT NULL,        -- Unix ms
    expires_at     INTEGER NOT NULL,        -- created_at + --key-ttl
    PRIMARY KEY (caller, key)
) WITHOUT ROWID;
INSERT INTO idempotency_records
    (caller, key, fingerprint, recovery_point, status, headers, body, created_at, expires_at)
SELECT caller, key, fingerprint, 'finished', status,
       NULLIF(headers, 'content-type: application/json' || char(10)), body, created_at, expires_at
FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_records RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
CREATE INDEX idempotency_keys_unfinished ON idempotency_keys (leased_until)
    WHERE recovery_point <> 'finished';

CREATE TABLE charges_v2 (
    caller          BLOB    NOT NULL,
    id              TEXT    NOT NULL,       -- ch_ + UUIDv7: time-ordered within a caller
    amount          INTEGER NOT NULL CHECK (amount BETWEEN 1 AND 100000000),
    currency        TEXT    NOT NULL CHECK (length(currency) = 3),
    description     TEXT,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    payment_method  TEXT    NOT NULL,
    provider_charge TEXT,
    receipt_email   TEXT,
    created         INTEGER NOT NULL,       -- Unix seconds
    PRIMARY KEY (caller, id)
) WITHOUT ROWID;
INSERT INTO charges_v2 (caller, id, amount, currency, description, status, payment_method, created)
SELECT caller, id, amount, currency, description, 'succeeded', 'pm_card_visa', created FROM charges;
DROP TABLE charges;
ALTER TABLE charges_v2 RENAME TO charges;

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,    -- rowid: appends
    message_id      TEXT    NOT NULL UNIQUE,
    recipient       TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,       -- Unix ms
    claimed_until   INTEGER,                -- a relay is sending it until then
    last_error      TEXT,
    sent_at         INTEGER                 -- the SMTP server accepted it
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE sent_at IS NULL;
