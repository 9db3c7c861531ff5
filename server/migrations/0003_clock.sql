-- Version 3: the database's clock (store/sqlite/clock.rs).
--
-- Leases and records' lives are measured on a clock of the database's own:
-- this machine's boot clock (which no one sets, and which counts a
-- suspend) plus an offset that stays the same for the whole boot, so a
-- wall clock that jumps by a day, while the server runs or between two of
-- its runs, moves no lease and no expiry. One row: the boot it was made in,
-- the offset, and the latest reading of the database's clock with the wall
-- clock beside it, from which the next boot goes on.
CREATE TABLE clock (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id   TEXT    NOT NULL,             -- /proc/sys/kernel/random/boot_id ('' if unknown)
    offset_ms INTEGER NOT NULL,             -- database time = boot clock (ms) + offset_ms
    db_ms     INTEGER NOT NULL,             -- the latest reading of the database's clock ...
    wall_ms   INTEGER NOT NULL              -- ... and the wall clock then (Unix ms)
);
