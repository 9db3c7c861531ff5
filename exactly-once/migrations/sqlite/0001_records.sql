-- The engine's tables, recorded in `exactly_once_migrations` (the
-- application's own migrations are recorded in `schema_migrations`).
-- `IF NOT EXISTS` throughout: a database whose application created these
-- tables itself, before the engine was a library of its own (the demo
-- application's), adopts them as they are.
--
-- A key's record is its table's own index: WITHOUT ROWID, primary key
-- (caller, key), so a new key is one B-tree insert. A record is finished
-- (recovery_point 'finished', its response set) or stopped at a recovery
-- point of an operation in phases, with the state to resume from and a
-- lease (token and deadline, on the database's clock, ms). The lone
-- `content-type: application/json` header most answers carry is stored
-- as NULL.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    caller         BLOB    NOT NULL,        -- SHA-256 of the caller's identity, never the identity
    key            TEXT    NOT NULL,        -- the Idempotency-Key, unquoted
    fingerprint    BLOB    NOT NULL,        -- SHA-256 of method, path, canonical JSON body
    recovery_point TEXT    NOT NULL,        -- 'finished', or where a phased operation stopped
    state          TEXT,                    -- what resuming needs (the operation's own)
    lease_token    BLOB,                    -- who may run the next phase ...
    leased_until   INTEGER,                 -- ... until when
    status         INTEGER,                 -- the stored response, once finished ...
    headers        TEXT,                    -- ... "name: value" lines; NULL: content-type: application/json
    body           BLOB,                    -- ... byte for byte
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (caller, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_keys_by_expiry ON idempotency_keys (expires_at);
CREATE INDEX IF NOT EXISTS idempotency_keys_unfinished ON idempotency_keys (leased_until)
    WHERE recovery_point <> 'finished';

-- The outbox: messages written in an operation's transaction, until the
-- relay has handed them to the transport.
CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER PRIMARY KEY,    -- rowid: appends
    message_id      TEXT    NOT NULL UNIQUE,
    recipient       TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,       -- on the database's clock, ms
    claimed_until   INTEGER,                -- a relay is sending it until then
    last_error      TEXT,
    sent_at         INTEGER                 -- the transport accepted it (Unix ms)
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt_at) WHERE sent_at IS NULL;

-- The database's clock (src/store/sqlite/clock.rs): this machine's boot
-- clock plus an offset that stays the same for the whole boot, so a wall
-- clock that jumps moves no lease and no expiry.
CREATE TABLE IF NOT EXISTS clock (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id   TEXT    NOT NULL,             -- /proc/sys/kernel/random/boot_id ('' if unknown)
    offset_ms INTEGER NOT NULL,             -- database time = boot clock (ms) + offset_ms
    db_ms     INTEGER NOT NULL,             -- the latest reading of the database's clock ...
    wall_ms   INTEGER NOT NULL              -- ... and the wall clock then (Unix ms)
);
