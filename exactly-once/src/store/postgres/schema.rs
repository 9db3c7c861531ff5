//! The PostgreSQL schema: migrations applied under an advisory lock, so
//! that instances starting together migrate once.

use super::classify;
use crate::store::schema::{version_query, Migrations, APP_LEDGER, ENGINE_LEDGER};
use crate::store::{now_ms, Result};
use tokio_postgres::GenericClient;

/// The engine's own schema, in order (ledger `exactly_once_migrations`).
pub(super) const MIGRATIONS: Migrations = Migrations(&[
    (
        1,
        include_str!("../../../migrations/postgres/0001_records.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/postgres/0002_lives_and_dead_letters.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/postgres/0003_operators.sql"),
    ),
]);

/// Any number, the same for every instance: the migration lock.
const MIGRATION_LOCK: i64 = 0x1de3_9071;

/// Applies the migrations the database still needs (the application's,
/// then the engine's), in one transaction that holds the migration lock,
/// on a connection of its own (no bound on a statement's silence).
pub(super) async fn migrate(client: &mut tokio_postgres::Client, app: Migrations) -> Result<()> {
    let tx = client.transaction().await.map_err(classify)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(classify)?;
    for (ledger, migrations) in [(APP_LEDGER, app), (ENGINE_LEDGER, MIGRATIONS)] {
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {ledger} (
               version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)"
        ))
        .await
        .map_err(classify)?;
        let current = version(&tx, ledger).await?;
        for (version, sql) in migrations.after(current) {
            tx.batch_execute(sql).await.map_err(classify)?;
            tx.execute(
                &format!("INSERT INTO {ledger} (version, applied_at) VALUES ($1, $2)"),
                &[&version, &now_ms()],
            )
            .await
            .map_err(classify)?;
            tracing::info!(ledger, version, "migration applied");
        }
    }
    tx.commit().await.map_err(classify)
}

/// Ok when both ledgers are at the versions this build needs; the
/// engine's version.
pub(super) async fn check(client: &impl GenericClient, app: Migrations) -> Result<i64> {
    app.check_in(APP_LEDGER, version(client, APP_LEDGER).await?)?;
    let engine = version(client, ENGINE_LEDGER).await?;
    MIGRATIONS.check_in(ENGINE_LEDGER, engine)?;
    Ok(engine)
}

/// The latest migration `ledger` records (0 for none).
async fn version(client: &impl GenericClient, ledger: &str) -> Result<i64> {
    Ok(client
        .query_one(&version_query(ledger), &[])
        .await
        .map_err(classify)?
        .get(0))
}
