//! The PostgreSQL schema: migrations applied under an advisory lock, so
//! that instances starting together migrate once.

use super::classify;
use crate::store::schema::{Migrations, VERSION_QUERY};
use crate::store::{now_ms, Result};
use deadpool_postgres::GenericClient;

/// The schema, in order.
pub(super) const MIGRATIONS: Migrations = Migrations(&[
    (
        1,
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/postgres/0002_phases.sql"),
    ),
]);

/// Any number, the same for every instance: the migration lock.
const MIGRATION_LOCK: i64 = 0x1de3_9071;

/// Applies the migrations the database still needs, in one transaction
/// that holds the migration lock.
pub(super) async fn migrate(client: &mut deadpool_postgres::Object) -> Result<()> {
    let tx = client.transaction().await.map_err(classify)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(classify)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
           version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )
    .await
    .map_err(classify)?;
    let current = version(&tx).await?;
    for (version, sql) in MIGRATIONS.after(current) {
        tx.batch_execute(sql).await.map_err(classify)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
            &[&version, &now_ms()],
        )
        .await
        .map_err(classify)?;
        tracing::info!(version, "migration applied");
    }
    tx.commit().await.map_err(classify)
}

/// The latest migration applied (0 for none).
pub(super) async fn version(client: &impl GenericClient) -> Result<i64> {
    Ok(client
        .query_one(VERSION_QUERY, &[])
        .await
        .map_err(classify)?
        .get(0))
}
