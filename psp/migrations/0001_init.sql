-- The provider's ledger and its idempotency keys. One transaction writes a
-- key's record and (for a success) its ledger row together: both exist, or
-- neither does.
CREATE TABLE charges (
    id              TEXT    PRIMARY KEY,   -- pch_ + UUID v7: sorts by creation
    amount          INTEGER NOT NULL CHECK (amount BETWEEN 1 AND 100000000),
    currency        TEXT    NOT NULL CHECK (length(currency) = 3),
    payment_method  TEXT    NOT NULL,
    metadata        TEXT    NOT NULL,      -- canonical JSON object
    idempotency_key TEXT    NOT NULL,      -- not unique: a key may charge again once expired
    created         INTEGER NOT NULL       -- Unix seconds
) WITHOUT ROWID;

CREATE TABLE idempotency_keys (
    key         TEXT    PRIMARY KEY,
    fingerprint TEXT    NOT NULL,          -- canonical JSON of all the parameters
    status      INTEGER NOT NULL,          -- the stored answer: 201 or 402 ...
    body        BLOB    NOT NULL,          -- ... and its body, byte for byte
    charge_id   TEXT,                      -- the ledger row of a 201, else NULL
    created_at  INTEGER NOT NULL,          -- Unix milliseconds
    expires_at  INTEGER NOT NULL           -- created_at + 24 h
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
