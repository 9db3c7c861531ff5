-- A caller's unfinished operations (additive only: a release that does not
-- know this index reads and writes as before). A new key's operation that
-- stops at a recovery point counts its caller's through it, in the
-- transaction that records the stop, against the cap an application sets
-- (the shop's `--caller-unfinished`). Only operations in phases are ever
-- in it, and only until they finish: a one-phase record (the new-key
-- path) is not.
CREATE INDEX IF NOT EXISTS idempotency_keys_open_by_caller ON idempotency_keys (caller)
    WHERE recovery_point NOT IN ('finished', 'expired');
