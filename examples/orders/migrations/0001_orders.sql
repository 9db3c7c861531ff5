-- The team's own table, created at start as before the engine came (its
-- own migration, not the engine's): the engine adds its tables beside it,
-- in its own ledgers.
CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY,
  caller BYTEA NOT NULL,
  idempotency_key TEXT NOT NULL,
  item TEXT NOT NULL,
  amount BIGINT NOT NULL CHECK (amount > 0),
  status TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'declined')),
  provider_charge TEXT,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS orders_by_caller ON orders (caller, created_at);
