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
//! - **A new boot**: the boot clock started again, so the database's clock
//!   goes on from its latest stored reading by as much as the wall clock
//!   moved since (never backwards: a wall clock set back across a reboot
//!   counts the downtime as nothing, which keeps records longer, never
//!   shorter). The reading is refreshed at every sweep.
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
            Some((_, _, db_ms, wall_ms)) => {
                let db_now = db_ms.saturating_add(wall_now.saturating_sub(wall_ms).max(0));
                db_now - boot_now
            }
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

    #[test]
    fn a_new_boot_goes_on_from_the_last_reading_and_never_backwards() {
        let conn = database();
        DbClock::open(&conn).unwrap();
        // The last boot's reading: database time 5 000 ms ahead of the wall
        // clock, taken a minute ago.
        let wall = now_ms();
        conn.execute(
            "UPDATE clock SET boot_id = 'another boot', db_ms = ?1, wall_ms = ?2",
            params![wall - 60_000 + 5_000, wall - 60_000],
        )
        .unwrap();
        let next = DbClock::open(&conn).unwrap();
        assert!(
            (next.now() - (wall + 5_000)).abs() < 1_000,
            "a minute later"
        );
        // A wall clock set back a day across the reboot counts nothing.
        conn.execute(
            "UPDATE clock SET boot_id = 'a third boot', db_ms = ?1, wall_ms = ?2",
            params![wall + 10_000, wall + 86_400_000],
        )
        .unwrap();
        let after = DbClock::open(&conn).unwrap();
        assert!((after.now() - (wall + 10_000)).abs() < 1_000);
    }
}
