-- A caller's unfinished operations (additive only). See
-- migrations/sqlite/0005_unfinished_by_caller.sql. A claim's own 'claimed'
-- is left out, as in idempotency_keys_open, so a one-phase operation's
-- record is never in it.
CREATE INDEX IF NOT EXISTS idempotency_keys_open_by_caller ON idempotency_keys (caller)
    WHERE recovery_point NOT IN ('finished', 'expired', 'claimed');
