//! The SQLite database's own clock, for every lease and expiry it stores.
//!
//! PostgreSQL has one (`now()` on the database's host). An embedded file
//! does not, and the wall clock is not one: a process that ran with its
//! clock a day ahead left leases that held for a day after the clock was
//! set right (every retry 409, the completer blind to the operation), and a
//! clock a day behind left records that expired a day early (a retry ran
//! twice). So the database's time is the boot clock ([`crate::clock`]),
//! which no one sets and which counts a suspend, plus an offset kept in the
//! `clock` table for the whole boot:
//!
//! - **The same boot** (a restart, a second process): the stored offset, so
//!   time goes on exactly, whatever the wall clock did meanwhile.
//! - **A new boot** (a reboot, or the file copied to another machine): the
//!   boot clock started again, and nothing this process can read tells
//!   how long the database was down: a wall clock kept in local time, a
//!   VM restored with a skewed clock or another host's clock can be a day
//!   off. So the database's clock goes on from its latest stored reading,
//!   counting the downtime as nothing: a record lives its whole TTL of
//!   time while a server ran, and may live longer by a downtime, never
//!   shorter (an earlier release added the wall clock's move, and a boot
//!   whose clock read 25 h ahead expired every record at once). The
//!   reading is stored at most a second apart by the writes, and at
//!   every sweep, so a lease or an expiry written before a crash is at
//!   most that much longer after it.
//! - **A new database**: the wall clock, so a fresh file starts at the
//!   time people read.

use crate::clock::{boot_id, BootInstant};
use crate::store::now_ms;
use rusqlite::{params, Connection, OptionalExtension};

/// The database's clock: the boot clock plus this boot's offset.
#[derive(Debug, Clone, Copy)]
pub(super) struct DbClock {
    offset_ms: i64,
}

impl DbClock {
    /// The clock of the database `conn` is open on, stored for this boot
    /// if it was not yet.
    pub(super) fn open(conn: &Connection) -> rusqlite::Result<Self> {
        let boot = boot_id().unwrap_or_default();
        let (boot_now, wall_now) = (BootInstant::now().as_ms(), now_ms());
        let stored: Option<(String, i64, i64, i64)> = conn
            .query_row(
                "SELECT boot_id, offset_ms, db_ms, wall_ms FROM clock WHERE id = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()?;
        let offset_ms = match stored {
            Some((stored_boot, offset_ms, _, _)) if !boot.is_empty() && stored_boot == boot => {
                return Ok(Self { offset_ms })
            }
            Some((_, _, db_ms, _)) => db_ms - boot_now,
            None => wall_now - boot_now,
        };
        let clock = Self { offset_ms };
        conn.execute(
            "INSERT INTO clock (id, boot_id, offset_ms, db_ms, wall_ms) VALUES (1, ?1, ?2, ?3, ?4)
             ON CONFLICT (id) DO UPDATE SET boot_id = ?1, offset_ms = ?2, db_ms = ?3, wall_ms = ?4",
            params![boot, offset_ms, clock.now(), wall_now],
        )?;
        Ok(clock)
    }

    /// The database's time now, in milliseconds (comparable with every
    /// lease and expiry it stores).
    pub(super) fn now(&self) -> i64 {
        BootInstant::now().as_ms().saturating_add(self.offset_ms)
    }

    /// Stores the latest reading, from which the next boot goes on.
    pub(super) fn refresh(&self, conn: &Connection) -> rusqlite::Result<()> {
        conn.prepare_cached("UPDATE clock SET db_ms = ?1, wall_ms = ?2 WHERE id = 1")?
            .execute(params![self.now(), now_ms()])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("../../../migrations/sqlite/0001_records.sql"))
            .unwrap();
        conn
    }

    #[test]
    fn a_new_database_starts_at_the_wall_clock_and_a_restart_goes_on_exactly() {
        let conn = database();
        let first = DbClock::open(&conn).unwrap();
        assert!((first.now() - now_ms()).abs() < 1_000);
        // A day of wall-clock drift stored with the row changes nothing for
        // a process of the same boot: the offset is kept.
        conn.execute("UPDATE clock SET wall_ms = wall_ms + 86400000", [])
            .unwrap();
        let again = DbClock::open(&conn).unwrap();
        assert_eq!(again.offset_ms, first.offset_ms);
    }

    /// Whatever the wall clock did across the reboot (25 h ahead, a day
    /// behind, or right), the database's clock goes on from its last
    /// reading: no record expires early, and none lives shorter.
    #[test]
    fn a_new_boot_goes_on_from_the_last_reading_whatever_the_wall_clock_says() {
        let conn = database();
        DbClock::open(&conn).unwrap();
        let wall = now_ms();
        for (boot, wall_then) in [
            ("a boot whose clock is 25 h ahead now", wall - 90_000_000),
            ("a boot whose clock is a day behind now", wall + 86_400_000),
            ("a boot a minute later", wall - 60_000),
        ] {
            let reading = wall - 3_600_000;
            conn.execute(
                "UPDATE clock SET boot_id = ?1, db_ms = ?2, wall_ms = ?3",
                params![boot, reading, wall_then],
            )
            .unwrap();
            let next = DbClock::open(&conn).unwrap();
            assert!((next.now() - reading).abs() < 1_000, "{boot}");
        }
    }
}
