-- The caller whose operation wrote a message. On Citus the outbox is
-- sharded by it beside the records, so that an operation and its message
-- commit on one worker (docs/CITUS.md); elsewhere it is only recorded.
-- Messages written before it have the empty caller.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS caller BYTEA NOT NULL DEFAULT '\x';
