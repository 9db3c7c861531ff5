-- A reservation is its caller's, as a charge is: the primary key names the
-- caller too (ids stay unique on their own). A release built for version 2
-- writes the same rows. On a Citus coordinator the primary key must hold
-- the column a table is sharded by (the caller): see docs/CITUS.md.
ALTER TABLE reservations DROP CONSTRAINT reservations_pkey, ADD PRIMARY KEY (caller, id);
