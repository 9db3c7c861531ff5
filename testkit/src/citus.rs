//! A fresh database on a Citus cluster (`scripts/citus.sh`): the
//! coordinator creates it on every node (`citus.enable_create_database_propagation`),
//! but the extension and the nodes' registration are per database, so
//! each new database gets them here, as `scripts/citus.sh` gave the first.

use anyhow::{Context, Result};

/// Whether the server behind `admin` (a client on its first database) is a
/// Citus coordinator with workers.
pub(crate) async fn is_coordinator(admin: &tokio_postgres::Client) -> Result<bool> {
    // One simple query: behind PgBouncer in transaction mode a prepared
    // (named) statement may reach another server connection than its parse.
    let rows = admin
        .simple_query("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
        .await?;
    let answer = rows.iter().find_map(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    Ok(answer.as_deref() == Some("t"))
}

/// Creates `database` through the coordinator `admin` is connected to (at
/// `server`: `postgres://USER@HOST:PORT`) and makes it a Citus database:
/// the extension on every node, the coordinator and the workers
/// registered as in the first database.
pub(crate) async fn create(
    admin: &tokio_postgres::Client,
    server: &str,
    database: &str,
) -> Result<()> {
    admin
        .batch_execute(&format!("CREATE DATABASE {database}"))
        .await
        .with_context(|| format!("CREATE DATABASE {database}"))?;
    let nodes = admin
        .query(
            "SELECT nodename, nodeport, groupid = 0 FROM pg_dist_node
             WHERE noderole = 'primary' ORDER BY groupid",
            &[],
        )
        .await
        .context("reading the coordinator's nodes")?;
    let user = server
        .trim_start_matches("postgres://")
        .split('@')
        .next()
        .unwrap_or("postgres");
    for node in &nodes {
        let (host, port): (String, i32) = (node.get(0), node.get(1));
        let url = format!("postgres://{user}@{host}:{port}/{database}");
        crate::pg_client::connect(&url)
            .await?
            .batch_execute("CREATE EXTENSION IF NOT EXISTS citus")
            .await
            .with_context(|| format!("CREATE EXTENSION citus on {host}:{port}"))?;
    }
    let (base, _) = server.split_once('?').unwrap_or((server, ""));
    let coordinator = crate::pg_client::connect(&format!("{base}/{database}")).await?;
    // Registering a worker copies the roles to it (`worker_create_or_alter_role`
    // updates `pg_authid`, which all its databases share): two tests
    // registering at once failed one of them with "tuple concurrently
    // updated", seen as "failure on connection marked as essential" on the
    // coordinator. A session advisory lock on the coordinator's first
    // database (released with the session, should this process die)
    // orders them, across the test processes too.
    admin
        .batch_execute(&format!(
            "SELECT pg_advisory_lock({ONE_REGISTRATION_AT_A_TIME})"
        ))
        .await
        .context("waiting for the other tests' registrations")?;
    let registered = register(&coordinator, &nodes, database).await;
    admin
        .batch_execute(&format!(
            "SELECT pg_advisory_unlock({ONE_REGISTRATION_AT_A_TIME})"
        ))
        .await
        .context("letting the next test register its nodes")?;
    registered
}

/// The advisory lock that lets one test process register nodes at a time:
/// any number no other user of the cluster's first database takes.
const ONE_REGISTRATION_AT_A_TIME: i64 = 0x0063_6974_7573;

/// Registers `nodes` (rows of the first database's `pg_dist_node`) in
/// `database`, through `coordinator`, a client on it.
async fn register(
    coordinator: &tokio_postgres::Client,
    nodes: &[tokio_postgres::Row],
    database: &str,
) -> Result<()> {
    for node in nodes {
        let (host, port, is_coordinator): (String, i32, bool) =
            (node.get(0), node.get(1), node.get(2));
        let register = if is_coordinator {
            "SELECT citus_set_coordinator_host($1, $2)"
        } else {
            "SELECT citus_add_node($1, $2)"
        };
        coordinator
            .execute(register, &[&host, &port])
            .await
            .with_context(|| format!("registering {host}:{port} in {database}"))?;
    }
    Ok(())
}
