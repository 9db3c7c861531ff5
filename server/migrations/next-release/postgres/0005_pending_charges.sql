-- Only in a build with the `next-release` feature (see 0004_charge_note).
-- An index built without blocking the writes of the instances serving
-- meanwhile: CONCURRENTLY, so outside any transaction, and one statement
-- that can run again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_pending ON charges (created) WHERE status = 'pending'
