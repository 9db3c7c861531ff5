//! Numbered migrations of a SQLite file, each applied once, in order, and
//! recorded in a ledger table of its own: the engine's in
//! `exactly_once_migrations`, an application's in `schema_migrations`.

use rusqlite::{params, Connection, TransactionBehavior};

pub use super::schema::version_query;

/// Applies the `(version, sql)` migrations newer than the version the
/// `schema_migrations` ledger records, as [`migrate_in`] does.
pub fn migrate(
    conn: &mut Connection,
    migrations: &[(i64, &str)],
    applied_at: i64,
    applied: impl FnMut(i64),
) -> rusqlite::Result<i64> {
    migrate_in(conn, "schema_migrations", migrations, applied_at, applied)
}

/// Applies the `(version, sql)` migrations newer than the version the
/// `ledger` table records, in order and in one transaction, each recorded
/// at `applied_at` (Unix milliseconds). `applied` hears each version
/// inside the transaction, before the commit. Returns the version the file
/// was at: a file newer than the last migration is left as it is, for the
/// caller to judge.
pub fn migrate_in(
    conn: &mut Connection,
    ledger: &str,
    migrations: &[(i64, &str)],
    applied_at: i64,
    mut applied: impl FnMut(i64),
) -> rusqlite::Result<i64> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {ledger} (
           version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
    ))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row(&version_query(ledger), [], |r| r.get(0))?;
    for (version, sql) in migrations.iter().filter(|(v, _)| *v > found) {
        tx.execute_batch(sql)?;
        tx.execute(
            &format!("INSERT INTO {ledger} (version, applied_at) VALUES (?1, ?2)"),
            params![version, applied_at],
        )?;
        applied(*version);
    }
    tx.commit()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &[(i64, &str)] = &[
        (1, "CREATE TABLE a (x INTEGER)"),
        (2, "CREATE TABLE b (y INTEGER)"),
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
        let applied_at: i64 = conn
            .query_row(
                "SELECT applied_at FROM schema_migrations WHERE version = 2",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(applied_at, 8);
    }

    #[test]
    fn a_failed_migration_leaves_the_file_as_it_was() {
        let mut conn = Connection::open_in_memory().unwrap();
        let broken = &[(1, "CREATE TABLE a (x INTEGER)"), (2, "NOT SQL")][..];
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
    }
}
