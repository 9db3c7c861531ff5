//! Numbered migrations of a SQLite file, each applied once, in order, and
//! recorded in a ledger table of its own: the engine's in
//! `exactly_once_migrations`, an application's in `schema_migrations`.
//! Each ledger row keeps the migration's name and which earlier releases
//! can run beside it ([`Migration`]).

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::store::schema::{ledger_columns, Applied};
pub use crate::store::schema::{version_query, Migration};

/// Applies the migrations newer than the version the `schema_migrations`
/// ledger records, as [`migrate_in`] does.
pub fn migrate(
    conn: &mut Connection,
    migrations: &[Migration],
    applied_at: i64,
    applied: impl FnMut(i64),
) -> rusqlite::Result<i64> {
    migrate_in(conn, "schema_migrations", migrations, applied_at, applied)
}

/// Applies the migrations newer than the version the `ledger` table
/// records, in order, each recorded at `applied_at` (Unix milliseconds)
/// with its name and what it runs beside. Consecutive migrations share one
/// transaction (all of them, or none, are applied); one that runs
/// [outside a transaction](Migration::outside_transaction) is applied on
/// its own and recorded once it succeeded. `applied` hears each version
/// before its commit. Returns the version the file was at: a file newer
/// than the last migration is left as it is, for the caller to judge.
pub fn migrate_in(
    conn: &mut Connection,
    ledger: &str,
    migrations: &[Migration],
    applied_at: i64,
    mut applied: impl FnMut(i64),
) -> rusqlite::Result<i64> {
    prepare_ledger(conn, ledger)?;
    let found: i64 = conn.query_row(&version_query(ledger), [], |r| r.get(0))?;
    let mut current = found;
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated since: read again under the lock.
        current = current.max(tx.query_row(&version_query(ledger), [], |r| r.get(0))?);
        let from = current;
        let mut pending = migrations.iter().filter(|m| m.version > from).peekable();
        let Some(&first) = pending.peek() else {
            tx.commit()?;
            return Ok(found);
        };
        if first.outside_transaction {
            drop(tx);
            conn.execute_batch(first.sql)?;
            record(conn, ledger, first, applied_at)?;
            applied(first.version);
            current = first.version;
            continue;
        }
        while let Some(migration) = pending.next_if(|m| !m.outside_transaction) {
            tx.execute_batch(migration.sql)?;
            record(&tx, ledger, migration, applied_at)?;
            applied(migration.version);
            current = migration.version;
        }
        tx.commit()?;
    }
}

/// Creates the ledger, or gives an older one (version and time only) the
/// columns it now records.
fn prepare_ledger(conn: &Connection, ledger: &str) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {ledger} ({})",
        ledger_columns("INTEGER")
    ))?;
    for (column, kind) in [("runs_beside", "INTEGER"), ("name", "TEXT")] {
        if !has_column(conn, ledger, column)? {
            conn.execute_batch(&format!("ALTER TABLE {ledger} ADD COLUMN {column} {kind}"))?;
        }
    }
    Ok(())
}

fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        params![table, column],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

fn record(
    conn: &Connection,
    ledger: &str,
    migration: &Migration,
    applied_at: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        &format!(
            "INSERT INTO {ledger} (version, applied_at, runs_beside, name) VALUES (?1, ?2, ?3, ?4)"
        ),
        params![
            migration.version,
            applied_at,
            migration.runs_beside,
            migration.name
        ],
    )?;
    Ok(())
}

/// The version `ledger` records (0 when the file has no such ledger), and
/// what it records of the migrations above `above`, in order. A ledger
/// that predates `runs_beside` and `name` has them as `None`.
pub fn ledger_state(
    conn: &Connection,
    ledger: &str,
    above: i64,
) -> rusqlite::Result<(i64, Vec<Applied>)> {
    let exists: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [ledger],
            |r| r.get(0),
        )
        .optional()?;
    if exists.is_none() {
        return Ok((0, Vec::new()));
    }
    let found: i64 = conn.query_row(&version_query(ledger), [], |r| r.get(0))?;
    if found <= above {
        return Ok((found, Vec::new()));
    }
    let (runs_beside, name) = if has_column(conn, ledger, "runs_beside")? {
        ("runs_beside", "name")
    } else {
        ("NULL", "NULL")
    };
    let later = conn
        .prepare(&format!(
            "SELECT version, {runs_beside}, {name} FROM {ledger} WHERE version > ?1 ORDER BY version"
        ))?
        .query_map([above], |row| {
            Ok(Applied {
                version: row.get(0)?,
                runs_beside: row.get(1)?,
                name: row.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((found, later))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &[Migration] = &[
        Migration::contract(1, "0001_a", "CREATE TABLE a (x INTEGER)"),
        Migration::expand(2, "0002_b", "CREATE TABLE b (y INTEGER)"),
    ];

    fn version(conn: &Connection) -> i64 {
        conn.query_row(&version_query("schema_migrations"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn each_migration_is_applied_once_in_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        let mut heard = Vec::new();
        assert_eq!(migrate(&mut conn, &TWO[..1], 7, |v| heard.push(v)), Ok(0));
        assert_eq!(migrate(&mut conn, TWO, 8, |v| heard.push(v)), Ok(1));
        assert_eq!(migrate(&mut conn, TWO, 9, |v| heard.push(v)), Ok(2));
        assert_eq!(heard, [1, 2]);
        assert_eq!(version(&conn), 2);
        let row: (i64, i64, String) = conn
            .query_row(
                "SELECT applied_at, runs_beside, name FROM schema_migrations WHERE version = 2",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(row, (8, 1, "0002_b".to_owned()));
    }

    #[test]
    fn a_failed_migration_leaves_the_file_as_it_was() {
        let mut conn = Connection::open_in_memory().unwrap();
        let broken = &[
            Migration::contract(1, "0001_a", "CREATE TABLE a (x INTEGER)"),
            Migration::expand(2, "0002_broken", "NOT SQL"),
        ][..];
        assert!(migrate(&mut conn, broken, 0, |_| {}).is_err());
        assert_eq!(version(&conn), 0, "the first migration rolled back too");
        assert!(conn.prepare("SELECT x FROM a").is_err());
    }

    #[test]
    fn a_file_newer_than_the_migrations_is_reported_and_untouched() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, TWO, 0, |_| {}).unwrap();
        assert_eq!(
            migrate(&mut conn, &TWO[..1], 0, |_| panic!("applied")),
            Ok(2)
        );
        assert_eq!(version(&conn), 2);
        let (found, later) = ledger_state(&conn, "schema_migrations", 1).unwrap();
        assert_eq!(found, 2);
        assert_eq!(
            later,
            [Applied {
                version: 2,
                runs_beside: Some(1),
                name: Some("0002_b".into())
            }]
        );
    }

    #[test]
    fn a_migration_outside_a_transaction_runs_alone_and_is_recorded_once_done() {
        let mut conn = Connection::open_in_memory().unwrap();
        // VACUUM cannot run inside a transaction.
        let three = &[
            TWO[0],
            TWO[1],
            Migration::expand(3, "0003_vacuum", "VACUUM").outside_transaction(),
            Migration::expand(4, "0004_c", "CREATE TABLE c (z INTEGER)"),
        ][..];
        let mut heard = Vec::new();
        assert_eq!(migrate(&mut conn, three, 0, |v| heard.push(v)), Ok(0));
        assert_eq!(heard, [1, 2, 3, 4]);
        assert_eq!(version(&conn), 4);
        let failing = &[
            three[0],
            three[1],
            three[2],
            three[3],
            Migration::expand(5, "0005_d", "CREATE TABLE d (w INTEGER)"),
            Migration::expand(6, "0006_vacuum_bad", "VACUUM nowhere").outside_transaction(),
        ][..];
        assert!(migrate(&mut conn, failing, 0, |_| {}).is_err());
        assert_eq!(version(&conn), 5, "what came before it is kept");
    }

    #[test]
    fn an_older_ledger_gains_the_columns_and_its_rows_say_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO schema_migrations VALUES (1, 0);
             CREATE TABLE a (x INTEGER);",
        )
        .unwrap();
        assert_eq!(
            ledger_state(&conn, "schema_migrations", 0).unwrap().1[0].runs_beside,
            None
        );
        assert_eq!(migrate(&mut conn, TWO, 0, |_| {}), Ok(1));
        let (found, later) = ledger_state(&conn, "schema_migrations", 0).unwrap();
        assert_eq!(found, 2);
        assert_eq!(later[0].runs_beside, None, "an old row says nothing");
        assert_eq!(later[1].runs_beside, Some(1));
    }

    #[test]
    fn a_file_without_a_ledger_is_at_version_zero() {
        let conn = Connection::open_in_memory().unwrap();
        assert_eq!(
            ledger_state(&conn, "schema_migrations", 0).unwrap(),
            (0, vec![])
        );
    }
}
