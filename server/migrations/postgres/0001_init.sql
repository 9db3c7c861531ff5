-- PostgreSQL schema: the same tables as the SQLite one. The record of a key
-- and the business rows are written in one transaction.
CREATE TABLE idempotency_keys (
    id          BIGSERIAL PRIMARY KEY,
    caller      BYTEA    NOT NULL,         -- SHA-256 of the caller's token
    key         TEXT     NOT NULL,
    fingerprint BYTEA    NOT NULL,
    status      SMALLINT NOT NULL,
    headers     TEXT     NOT NULL,
    body        BYTEA    NOT NULL,
    created_at  BIGINT   NOT NULL,         -- Unix milliseconds
    expires_at  BIGINT   NOT NULL,
    UNIQUE (caller, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

CREATE TABLE charges (
    id          TEXT COLLATE "C" PRIMARY KEY,  -- byte order: ch_ + UUIDv7 sorts by time
    caller      BYTEA  NOT NULL,
    amount      BIGINT NOT NULL CHECK (amount BETWEEN 1 AND 100000000),
    currency    TEXT   NOT NULL CHECK (length(currency) = 3),
    description TEXT,
    created     BIGINT NOT NULL
);
CREATE INDEX charges_by_caller ON charges (caller, id);

CREATE TABLE inventory (
    item_id   TEXT   PRIMARY KEY,
    available BIGINT NOT NULL CHECK (available >= 0)
);
INSERT INTO inventory (item_id, available) VALUES
    ('sku-tee', 100),
    ('sku-mug', 20),
    ('sku-poster', 3);

CREATE TABLE reservations (
    id       TEXT   PRIMARY KEY,
    caller   BYTEA  NOT NULL,
    item_id  TEXT   NOT NULL REFERENCES inventory (item_id),
    quantity BIGINT NOT NULL CHECK (quantity BETWEEN 1 AND 1000),
    created  BIGINT NOT NULL
);
