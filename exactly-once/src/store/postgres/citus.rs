//! The engine on Citus (the `citus` extension present in the database).
//! Migrating on the coordinator places the tables: the engine's records,
//! outbox and audit sharded by the caller, its ledgers as Citus local
//! tables, and each application table as its migration says
//! ([`Placement`]), co-located with the records, so that an operation's
//! transaction touches one shard. An instance connected to a worker
//! serves but does not migrate. The sweeper's batches become router
//! statements, one record each, since Citus refuses `FOR UPDATE SKIP
//! LOCKED` across shards (docs/CITUS.md; the relay's claims, likewise, in
//! `outbox.rs`).

use super::error::classify;
use super::statement::{one_row, Exec, Statement};
use super::value::{Kind, ToArg};
use crate::store::placement::{Placement, PlacementKind};
use crate::store::schema::{Migrations, APP_LEDGER, ENGINE_LEDGER};
use crate::store::Result;
use futures_util::future::try_join_all;

/// The table every caller-sharded table is co-located with.
const ANCHOR: &str = "idempotency_keys";

/// The engine's own placements: the records, the outbox and the
/// operators' audit rows sharded by caller and co-located, so that an
/// operation with its message, or an operator's action with its record,
/// commits on one worker; the two migration ledgers on the coordinator, in
/// Citus's metadata (Citus local tables), so that an instance connected to
/// a worker reads the schema's version as the coordinator's do.
const ENGINE: &[Placement] = &[
    Placement::local(ENGINE_LEDGER),
    Placement::local(APP_LEDGER),
    Placement::by_caller(ANCHOR, "caller"),
    Placement::by_caller("outbox", "caller"),
    Placement::by_caller("operator_actions", "caller"),
];

/// What the engine's tables change before Citus shards them, which wants
/// the shard column in every primary key and unique constraint: a
/// message is unique per caller (its id names its operation's charge),
/// a row is keyed by its caller and id. Each can run again after a
/// placement that failed halfway.
const BEFORE_SHARDING: &[(&str, &str)] = &[
    (
        "outbox",
        "ALTER TABLE outbox
           DROP CONSTRAINT IF EXISTS outbox_message_id_key,
           DROP CONSTRAINT IF EXISTS outbox_caller_message_id_key,
           DROP CONSTRAINT IF EXISTS outbox_pkey,
           ADD PRIMARY KEY (caller, id),
           ADD CONSTRAINT outbox_caller_message_id_key UNIQUE (caller, message_id)",
    ),
    (
        "operator_actions",
        "ALTER TABLE operator_actions
           DROP CONSTRAINT IF EXISTS operator_actions_pkey,
           ADD PRIMARY KEY (caller, id)",
    ),
];

/// Whether a store's database is a Citus coordinator's, asked once (the
/// extension is there before the store's migrations place its tables).
#[derive(Debug, Default)]
pub(super) struct OnCitus(tokio::sync::OnceCell<bool>);

impl OnCitus {
    /// The answer, asked on `client` the first time.
    pub(super) async fn ask(&self, client: &impl Exec) -> Result<bool> {
        self.0.get_or_try_init(|| present(client)).await.copied()
    }

    /// The answer, if it was asked already.
    #[cfg(feature = "postgres")]
    pub(super) fn known(&self) -> Option<bool> {
        self.0.get().copied()
    }
}

/// Whether the database is a Citus coordinator's.
async fn present(client: &impl Exec) -> Result<bool> {
    const PRESENT: Statement = Statement::new(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
        &[],
    );
    Ok(PRESENT.query_one(client, &[]).await?.get(0))
}

/// Whether the database is a Citus worker's (its node group is not the
/// coordinator's 0): an instance connected to it serves, but migrates
/// through the coordinator only, where DDL runs.
pub(super) async fn on_worker(client: &impl Exec) -> Result<bool> {
    const GROUP: Statement = Statement::new("SELECT groupid FROM pg_dist_local_group", &[]);
    if !present(client).await? {
        return Ok(false);
    }
    let group: Option<i32> = GROUP.query_opt(client, &[]).await?.map(|row| row.get(0));
    Ok(group.is_some_and(|group| group != 0))
}

/// On a Citus coordinator, places every table the engine's and the
/// application's migrations name that is not placed yet: reference tables
/// first (a sharded table's foreign key may point at one), then the local
/// ones, then the engine's records, then the application's tables
/// co-located with them. Nothing on plain PostgreSQL.
pub(super) async fn place(client: &impl Exec, app: Migrations) -> Result<()> {
    // Asked anew: the schema's first migration may have made it Citus's.
    if !present(client).await? {
        return Ok(());
    }
    let app = app.0.iter().flat_map(|m| m.placements.iter());
    let all: Vec<&Placement> = ENGINE.iter().chain(app).collect();
    let of_kind = |kind: fn(&PlacementKind) -> bool| all.iter().filter(move |p| kind(&p.kind));
    let references = of_kind(|kind| *kind == PlacementKind::Reference);
    let locals = of_kind(|kind| *kind == PlacementKind::Local);
    let by_caller = of_kind(|kind| matches!(kind, PlacementKind::ByCaller { .. }));
    for placement in references.chain(locals).chain(by_caller) {
        if placed(client, placement).await? {
            continue;
        }
        let before = BEFORE_SHARDING
            .iter()
            .filter(|(table, _)| *table == placement.table);
        for (_, sql) in before {
            client.batch(sql).await.map_err(classify)?;
        }
        let table = literal(placement.table);
        let sql = match placement.kind {
            PlacementKind::Reference => format!("SELECT create_reference_table({table})"),
            PlacementKind::ByCaller { column } if placement.table == ANCHOR => {
                format!(
                    "SELECT create_distributed_table({table}, {})",
                    literal(column)
                )
            }
            PlacementKind::ByCaller { column } => format!(
                "SELECT create_distributed_table({table}, {}, colocate_with => {})",
                literal(column),
                literal(ANCHOR)
            ),
            PlacementKind::Local => format!("SELECT citus_add_local_table_to_metadata({table})"),
        };
        client.batch(&sql).await.map_err(classify)?;
        tracing::info!(table = placement.table, kind = ?placement.kind, "placed on Citus");
    }
    Ok(())
}

/// Whether the table is placed as asked already. A table with a foreign
/// key to a reference table has become a Citus local table by itself
/// (`partmethod` 'n', not replicated): placed if that is what was asked.
async fn placed(client: &impl Exec, placement: &Placement) -> Result<bool> {
    let (method, model) = match placement.kind {
        PlacementKind::ByCaller { .. } => ("h", "%"),
        PlacementKind::Reference => ("n", "t"),
        PlacementKind::Local => ("n", "s"),
    };
    Ok(one_row(
        client,
        "SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                        WHERE logicalrelid = to_regclass($1)
                          AND partmethod::text = $2 AND repmodel::text LIKE $3)",
        vec![placement.table.arg(), method.arg(), model.arg()],
    )
    .await
    .map_err(classify)?
    .get(0))
}

fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The sweeper's records on Citus: at most `limit` finished records
/// expired by now become tombstones, and as many tombstones whose time is
/// up are deleted, each by a router statement of its own that checks again
/// what the (lock-free, multi-shard) listing found, so that two sweepers
/// never expire one record twice. The tombstone's time is computed by the
/// listing (in seconds since the epoch, set by `to_timestamp`, which is
/// immutable): Citus refuses a stable function of a column (`expires_at +
/// interval`) in an `UPDATE`. How many expired.
pub(super) async fn sweep_records(
    client: &impl Exec,
    limit: u32,
    tombstone_secs: f64,
) -> Result<u64> {
    const EXPIRED: Statement = Statement::new(
        "SELECT caller, key,
                extract(epoch FROM expires_at + $3 * interval '1 second')::float8
         FROM idempotency_keys
         WHERE expires_at <= now() AND recovery_point = $2
         ORDER BY expires_at LIMIT $1",
        &[Kind::Int8, Kind::Text, Kind::Float8],
    );
    const EXPIRE: Statement = Statement::new(
        "UPDATE idempotency_keys
         SET recovery_point = 'expired', status = NULL, headers = NULL, body = NULL,
             expires_at = to_timestamp($3)
         WHERE caller = $1 AND key = $2 AND expires_at <= now() AND recovery_point = 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Float8],
    );
    const FORGET: Statement = Statement::new(
        "DELETE FROM idempotency_keys
         WHERE caller = $1 AND key = $2 AND expires_at <= now() AND recovery_point = 'expired'",
        &[Kind::Bytea, Kind::Text],
    );
    let limit = i64::from(limit);
    let finished = EXPIRED
        .query(client, &[&limit, &"finished", &tombstone_secs])
        .await?;
    let rows: Vec<(&[u8], &str, f64)> = finished
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    // Sent together: the connection pipelines them, one wait for the lot.
    let expire = rows.iter().map(|(caller, key, until)| async move {
        EXPIRE.execute(client, &[caller, key, until]).await
    });
    let expired = try_join_all(expire).await?.into_iter().sum();
    let tombstones = EXPIRED.query(client, &[&limit, &"expired", &0.0]).await?;
    let rows: Vec<(&[u8], &str)> = tombstones
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let forget = rows
        .iter()
        .map(|(caller, key)| async move { FORGET.execute(client, &[caller, key]).await });
    try_join_all(forget).await?;
    Ok(expired)
}

/// [`super::protocol::step_failed`] on Citus, which refuses `now()` inside
/// an `UPDATE`'s `CASE`: a router `SELECT` judges the operation's age by
/// the database's clock, then a router `UPDATE` counts the failure and
/// either gives the lease up or sets the operation aside, only while the
/// lease is still the holder's. `Some(true)`: set aside; `Some(false)`:
/// released; `None`: the lease was not held.
pub(super) async fn step_failed(
    client: &impl Exec,
    lease: &crate::Lease,
    error: &str,
    attention_after_secs: f64,
) -> Result<Option<bool>> {
    const AGE: Statement = Statement::new(
        "SELECT created_at <= now() - $4 * interval '1 second',
                justify_interval(date_trunc('second', now() - created_at))::text
         FROM idempotency_keys
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Float8],
    );
    const RELEASE: Statement = Statement::new(
        "UPDATE idempotency_keys SET attempts = attempts + 1, last_error = $4, leased_until = now()
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Text],
    );
    const SET_ASIDE: Statement = Statement::new(
        "UPDATE idempotency_keys SET attempts = attempts + 1, last_error = $4, attention = $5,
                lease_token = NULL, leased_until = NULL
         WHERE caller = $1 AND key = $2 AND lease_token = $3 AND recovery_point <> 'finished'",
        &[Kind::Bytea, Kind::Text, Kind::Bytea, Kind::Text, Kind::Text],
    );
    let (caller, key, token) = (&lease.caller, lease.key.as_ref(), &lease.token[..]);
    let Some(age) = AGE
        .query_opt(client, &[caller, &key, &token, &attention_after_secs])
        .await?
    else {
        return Ok(None);
    };
    let (overdue, unfinished_for): (bool, String) = (age.get(0), age.get(1));
    let changed = if overdue {
        let attention = format!("unfinished {unfinished_for} after its start; last error: {error}");
        SET_ASIDE
            .execute(client, &[caller, &key, &token, &error, &attention])
            .await?
    } else {
        RELEASE
            .execute(client, &[caller, &key, &token, &error])
            .await?
    };
    Ok((changed == 1).then_some(overdue))
}
