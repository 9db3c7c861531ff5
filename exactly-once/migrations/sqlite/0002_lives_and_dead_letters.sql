-- What issue 34 needs of a record and of the outbox (additive only: a
-- release that does not know these columns reads and writes the tables
-- as before).
--
-- `generation`: which life of the key this record is. A record that
-- expired is kept as a tombstone (recovery_point 'expired', no answer,
-- `expires_at` moved on to when the tombstone itself goes), and the key's
-- next operation is the next generation. A step's downstream key is
-- derived from caller, key, fingerprint and generation, so a run that a
-- restore or a failover forgot sends the provider the key it sent before,
-- and a run after the record's TTL sends a new one.
ALTER TABLE idempotency_keys ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
-- How many times a step of the operation failed, and the last error.
ALTER TABLE idempotency_keys ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idempotency_keys ADD COLUMN last_error TEXT;
-- Not NULL: the operation cannot finish by retrying (a dead letter). Its
-- recovery point and state are kept for the operator; nothing resumes it,
-- and every retry of the key answers 424 operation-needs-attention.
ALTER TABLE idempotency_keys ADD COLUMN attention TEXT;

-- A message the transport refused for good (Unix ms): never sent again.
ALTER TABLE outbox ADD COLUMN dead_at INTEGER;
