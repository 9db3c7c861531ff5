-- The idempotency record lives in the same database as the business tables,
-- so one transaction writes both: the charge exists if and only if its
-- key's record (with the response to replay) exists.
CREATE TABLE idempotency_keys (
    id          INTEGER PRIMARY KEY,      -- append-only rowid: cheap inserts, cheap sweeps
    caller      BLOB    NOT NULL,         -- SHA-256 of the caller's token, never the token
    key         TEXT    NOT NULL,         -- the Idempotency-Key, unquoted
    fingerprint BLOB    NOT NULL,         -- SHA-256 of method, path, canonical JSON body
    status      INTEGER NOT NULL,         -- the stored response ...
    headers     TEXT    NOT NULL,         -- ... "name: value" lines
    body        BLOB    NOT NULL,         -- ... byte for byte
    created_at  INTEGER NOT NULL,         -- Unix milliseconds
    expires_at  INTEGER NOT NULL,         -- created_at + --key-ttl
    UNIQUE (caller, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

CREATE TABLE charges (
    id          TEXT    PRIMARY KEY,      -- ch_ + UUIDv7: time-ordered, appends
    caller      BLOB    NOT NULL,
    amount      INTEGER NOT NULL CHECK (amount BETWEEN 1 AND 100000000),
    currency    TEXT    NOT NULL CHECK (length(currency) = 3),
    description TEXT,
    created     INTEGER NOT NULL          -- Unix seconds
) WITHOUT ROWID;
CREATE INDEX charges_by_caller ON charges (caller, id);

CREATE TABLE inventory (
    item_id   TEXT    PRIMARY KEY,
    available INTEGER NOT NULL CHECK (available >= 0)
) WITHOUT ROWID;
INSERT INTO inventory (item_id, available) VALUES
    ('sku-tee', 100),
    ('sku-mug', 20),
    ('sku-poster', 3);

CREATE TABLE reservations (
    id       TEXT    PRIMARY KEY,         -- res_ + UUIDv7
    caller   BLOB    NOT NULL,
    item_id  TEXT    NOT NULL REFERENCES inventory (item_id),
    quantity INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 1000),
    created  INTEGER NOT NULL
) WITHOUT ROWID;
