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

/// Makes `database` (just created through the coordinator `admin` is
/// connected to, at `server`: `postgres://USER@HOST:PORT`) a Citus
/// database: the extension on every node, the coordinator and the
/// workers registered as in the first database.
pub(crate) async fn prepare(
    admin: &tokio_postgres::Client,
    server: &str,
    database: &str,
) -> Result<()> {
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
    for node in &nodes {
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
