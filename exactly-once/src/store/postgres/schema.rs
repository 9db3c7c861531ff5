//! The PostgreSQL schema: migrations applied under an advisory lock, so
//! that instances starting together migrate once, and the check of the
//! ledgers a release serves on (`schema` of the store: expand and
//! contract).

use super::error::classify;
use super::statement::{one_row as one, Exec, Statement};
use super::value::{Kind, ToArg};
use crate::store::schema::{
    ledger_columns, version_query, Applied, Fit, Migration, Migrations, APP_LEDGER, ENGINE_LEDGER,
};
use crate::store::{now_ms, Result, StoreError};

/// The engine's own schema, in order (ledger `exactly_once_migrations`).
/// The second adds columns only, but what rows mean changed with it (an
/// expired key's tombstone, a dead letter), which a release built for
/// version 1 would misread: it runs beside nothing older.
pub(super) const MIGRATIONS: Migrations = Migrations(&[
    Migration::contract(
        1,
        "0001_records",
        include_str!("../../../migrations/postgres/0001_records.sql"),
    ),
    Migration::contract(
        2,
        "0002_lives_and_dead_letters",
        include_str!("../../../migrations/postgres/0002_lives_and_dead_letters.sql"),
    ),
    Migration::expand(
        3,
        "0003_operators",
        include_str!("../../../migrations/postgres/0003_operators.sql"),
    ),
    // A nullable column of a table the releases before 0003 do not know.
    Migration::expand(
        4,
        "0004_operator_os_user",
        include_str!("../../../migrations/postgres/0004_operator_os_user.sql"),
    )
    .runs_beside(2),
    // An index: the releases 0004 runs beside do not notice it. Built in
    // the migration's transaction (not CONCURRENTLY), so that it migrates
    // on the application's own pool and behind a pooler too: writes wait
    // while it is built (docs/OPERATIONS.md, "A release deploy").
    Migration::expand(
        5,
        "0005_unfinished_by_caller",
        include_str!("../../../migrations/postgres/0005_unfinished_by_caller.sql"),
    )
    .runs_beside(2),
    // A column with a default: a release before it writes messages with
    // the empty caller, and settles them by their id as before.
    Migration::expand(
        6,
        "0006_outbox_caller",
        include_str!("../../../migrations/postgres/0006_outbox_caller.sql"),
    )
    .runs_beside(2),
]);

/// The server a connection reached, as `host:port` (NULL over a Unix
/// socket): with several hosts in the URL, the one that took writes.
pub(super) const SERVER_ADDRESS: Statement = Statement::new(
    "SELECT host(inet_server_addr()) || ':' || inet_server_port()",
    &[],
);

/// Any number, the same for every instance: the migration lock.
const MIGRATION_LOCK: i64 = 0x1de3_9071;

#[cfg(feature = "postgres")]
/// Applies the migrations the database still needs (the application's,
/// then the engine's) while holding the migration lock (a session lock:
/// a migration that runs outside a transaction is applied under it too).
/// Each ledger's run of migrations is one transaction; one that runs
/// outside a transaction (`CREATE INDEX CONCURRENTLY`) is applied on its
/// own, and recorded once it succeeded.
///
/// Behind a pooler (`pooled`: PgBouncer's transaction mode) a session lock
/// would stay with whichever server connection took it, so everything is
/// one transaction under a transaction lock, and a migration that runs
/// outside a transaction is refused: its job needs a direct URL.
pub(super) async fn migrate(
    client: &mut tokio_postgres::Client,
    app: Migrations,
    pooled: bool,
) -> Result<()> {
    if pooled {
        let tx = client.transaction().await.map_err(classify)?;
        migrate_in(&tx, app).await?;
        return tx.commit().await.map_err(classify);
    }
    if on_a_citus_worker(&*client).await? {
        return Ok(());
    }
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(classify)?;
    let mut applied = Ok(());
    for (ledger, migrations) in [(APP_LEDGER, app), (ENGINE_LEDGER, MIGRATIONS)] {
        applied = migrate_ledger(client, ledger, migrations).await;
        if applied.is_err() {
            break;
        }
    }
    if applied.is_ok() {
        applied = super::citus::place(&*client, app).await;
    }
    // A connection that broke meanwhile took the lock with its session.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    applied?;
    unlocked.map_err(classify)?;
    Ok(())
}

/// [`migrate`] in one transaction, `tx`, under a transaction lock: behind
/// a pooler, and on a pool that is not the store's (sqlx's). A migration
/// that runs outside a transaction is refused: its job needs a direct
/// connection of the store's own.
pub(super) async fn migrate_in(tx: &impl Exec, app: Migrations) -> Result<()> {
    const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";
    if on_a_citus_worker(tx).await? {
        return Ok(());
    }
    tx.rows(LOCK, vec![ToArg::arg(&MIGRATION_LOCK)])
        .await
        .map_err(classify)?;
    for (ledger, migrations) in [(APP_LEDGER, app), (ENGINE_LEDGER, MIGRATIONS)] {
        prepare_ledger(tx, ledger).await?;
        let current = version(tx, ledger).await?;
        for migration in migrations.after(current) {
            if migration.outside_transaction {
                return Err(StoreError::internal(format!(
                    "migration {} ({}) runs outside a transaction, which a pooler in \
                     transaction mode cannot: run `migrate` with a direct URL to the primary",
                    migration.version, migration.name
                )));
            }
            tx.batch(migration.sql).await.map_err(classify)?;
            record(tx, ledger, migration).await?;
            tracing::info!(ledger, version = migration.version, "migration applied");
        }
    }
    super::citus::place(tx, app).await
}

/// Whether the database is a Citus worker's, where DDL does not run: an
/// instance connected to it leaves migrating to the coordinator's and
/// only checks the schema it finds (the ledgers are the coordinator's,
/// read through Citus).
async fn on_a_citus_worker(client: &impl Exec) -> Result<bool> {
    let on_worker = super::citus::on_worker(client).await?;
    if on_worker {
        tracing::info!("a Citus worker's database: migrations run through the coordinator");
    }
    Ok(on_worker)
}

/// The health check inside `tx`: this build serves on the schema, and a
/// write commits (a probe of the engine's ledger, which the caller
/// commits). The `host:port` the transaction reached.
pub(super) async fn probe(tx: &impl Exec, app: Migrations) -> Result<Option<String>> {
    const PROBE: Statement = Statement::new(
        "UPDATE exactly_once_migrations SET applied_at = applied_at WHERE version = $1",
        &[Kind::Int8],
    );
    let version = check(tx, app).await?.engine;
    PROBE.execute(tx, &[&version]).await?;
    let address = SERVER_ADDRESS.query_one(tx, &[]).await?;
    Ok(address.get(0))
}

#[cfg(feature = "postgres")]
async fn migrate_ledger(
    client: &mut tokio_postgres::Client,
    ledger: &str,
    migrations: Migrations,
) -> Result<()> {
    prepare_ledger(client, ledger).await?;
    let current = version(client, ledger).await?;
    let pending: Vec<&Migration> = migrations.after(current).collect();
    for run in pending.chunk_by(|a, b| !a.outside_transaction && !b.outside_transaction) {
        if run[0].outside_transaction {
            let migration = run[0];
            client.batch(migration.sql).await.map_err(classify)?;
            refuse_invalid_indexes(client, migration).await?;
            record(client, ledger, migration).await?;
            tracing::info!(ledger, version = migration.version, "migration applied");
            continue;
        }
        let tx = client.transaction().await.map_err(classify)?;
        for migration in run {
            tx.batch(migration.sql).await.map_err(classify)?;
            record(&tx, ledger, migration).await?;
        }
        tx.commit().await.map_err(classify)?;
        for migration in run {
            tracing::info!(ledger, version = migration.version, "migration applied");
        }
    }
    Ok(())
}

/// Creates the ledger, or gives an older one (version and time only) the
/// columns it now records. Nothing is altered when they are there (an
/// `ALTER TABLE` would lock the ledger against the health checks of the
/// instances serving meanwhile).
async fn prepare_ledger(client: &impl Exec, ledger: &str) -> Result<()> {
    client
        .batch(&format!(
            "CREATE TABLE IF NOT EXISTS {ledger} ({})",
            ledger_columns("BIGINT")
        ))
        .await
        .map_err(classify)?;
    let missing = one(
        client,
        "SELECT count(*) FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = $1
           AND column_name IN ('runs_beside', 'name')",
        vec![ToArg::arg(&ledger)],
    )
    .await
    .map_err(classify)?
    .get::<_, i64>(0)
        < 2;
    if missing {
        client
            .batch(&format!(
                "ALTER TABLE {ledger} ADD COLUMN IF NOT EXISTS runs_beside BIGINT,
                                      ADD COLUMN IF NOT EXISTS name TEXT"
            ))
            .await
            .map_err(classify)?;
    }
    Ok(())
}

#[cfg(feature = "postgres")]
/// A concurrent index build that failed leaves an invalid index behind,
/// which `IF NOT EXISTS` would then take for done: such a migration is
/// not recorded, and the error names the index to drop.
async fn refuse_invalid_indexes(client: &impl Exec, migration: &Migration) -> Result<()> {
    let invalid: Option<String> = one(
        client,
        "SELECT string_agg(indexrelid::regclass::text, ', ') FROM pg_index WHERE NOT indisvalid",
        vec![],
    )
    .await
    .map_err(classify)?
    .get(0);
    match invalid {
        None => Ok(()),
        Some(indexes) => Err(StoreError::internal(format!(
            "migration {} ({}) left the invalid index {indexes} (a concurrent build that \
             failed): drop it and migrate again",
            migration.version, migration.name
        ))),
    }
}

async fn record(client: &impl Exec, ledger: &str, migration: &Migration) -> Result<()> {
    client
        .changed(
            &format!(
                "INSERT INTO {ledger} (version, applied_at, runs_beside, name)
                 VALUES ($1, $2, $3, $4)"
            ),
            vec![
                ToArg::arg(&migration.version),
                ToArg::arg(&now_ms()),
                ToArg::arg(&migration.runs_beside),
                ToArg::arg(&migration.name),
            ],
        )
        .await
        .map_err(classify)?;
    Ok(())
}

/// Ok when this build can serve on both ledgers: at its versions, or ahead
/// of them with later migrations that run beside it
/// ([`Migrations::check_in`]). What it found of each ledger, and the
/// engine's version.
pub(super) async fn check(client: &impl Exec, app: Migrations) -> Result<Checked> {
    let (app_found, later) = ledger_state(client, APP_LEDGER, app.latest()).await?;
    let app_fit = app.check_in(APP_LEDGER, app_found, &later)?;
    let (engine, later) = ledger_state(client, ENGINE_LEDGER, MIGRATIONS.latest()).await?;
    let engine_fit = MIGRATIONS.check_in(ENGINE_LEDGER, engine, &later)?;
    Ok(Checked {
        fits: [(APP_LEDGER, app_fit), (ENGINE_LEDGER, engine_fit)],
        engine,
    })
}

/// What [`check`] found.
pub(super) struct Checked {
    /// How this build stands with each ledger.
    pub(super) fits: [(&'static str, Fit); 2],
    /// The version the engine's ledger records.
    pub(super) engine: i64,
}

/// The version `ledger` records (0 when there is no such ledger), and what
/// it records of the migrations above `above`. A ledger that predates
/// `runs_beside` and `name` has them as `None` (read through `to_jsonb`,
/// which has no error for a column that is not there).
async fn ledger_state(client: &impl Exec, ledger: &str, above: i64) -> Result<(i64, Vec<Applied>)> {
    let exists: bool = one(
        client,
        "SELECT to_regclass($1) IS NOT NULL",
        vec![ToArg::arg(&ledger)],
    )
    .await
    .map_err(classify)?
    .get(0);
    if !exists {
        return Ok((0, Vec::new()));
    }
    let found = version(client, ledger).await?;
    if found <= above {
        return Ok((found, Vec::new()));
    }
    let rows = client
        .rows(
            &format!(
                "SELECT version, (to_jsonb(l) ->> 'runs_beside')::bigint, to_jsonb(l) ->> 'name'
                 FROM {ledger} l WHERE version > $1 ORDER BY version"
            ),
            vec![ToArg::arg(&above)],
        )
        .await
        .map_err(classify)?;
    let later = rows
        .iter()
        .map(|row| Applied {
            version: row.get(0),
            runs_beside: row.get(1),
            name: row.get(2),
        })
        .collect();
    Ok((found, later))
}

/// The latest migration `ledger` records (0 for none).
async fn version(client: &impl Exec, ledger: &str) -> Result<i64> {
    Ok(one(client, &version_query(ledger), vec![])
        .await
        .map_err(classify)?
        .get(0))
}
