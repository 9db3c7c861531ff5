-- What issue 34 needs of a record and of the outbox (additive only: a
-- release that does not know these columns reads and writes the tables
-- as before). See migrations/sqlite/0002_lives_and_dead_letters.sql.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS last_error TEXT;
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS attention TEXT;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS dead_at TIMESTAMPTZ;
