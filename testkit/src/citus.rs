//! Citus for tests: a cluster of the test's own ([`Citus`]: a coordinator
//! and workers, each a [`Postgres`] to kill and restart like any other),
//! and a fresh database on any Citus cluster (`scripts/citus.sh`'s too):
//! the coordinator creates it on every node
//! (`citus.enable_create_database_propagation`), but the extension and the
//! nodes' registration are per database, so each new database gets them
//! here, as the cluster's first got them at its start.

use crate::Postgres;
use anyhow::{Context, Result};
use std::sync::Arc;

/// A Citus cluster of the test's own: a coordinator and workers, each a
/// PostgreSQL cluster with the extension loaded and created in its first
/// database, the workers registered there. [`Database::postgres_on`](crate::Database::postgres_on)
/// the coordinator's URL (or a proxy's in front of it) makes a fresh
/// Citus database on it.
#[derive(Debug)]
pub struct Citus {
    pub coordinator: Arc<Postgres>,
    pub workers: Vec<Arc<Postgres>>,
}

impl Citus {
    /// Starts a coordinator and `workers` workers (Citus installed:
    /// `scripts/citus.sh install`); returns once they are registered.
    pub async fn start(workers: usize) -> Result<Self> {
        Self::start_nodes(workers, Postgres::start_with).await
    }

    /// [`Citus::start`], each node archiving its WAL
    /// ([`Postgres::start_archiving`]): a backup of each can be recovered
    /// to a restore point of the whole cluster
    /// (`citus_create_restore_point`, [`Postgres::recover_to`]).
    pub async fn start_archiving(workers: usize) -> Result<Self> {
        Self::start_nodes(workers, Postgres::start_archiving).await
    }

    async fn start_nodes(workers: usize, start: fn(&[&str]) -> Result<Postgres>) -> Result<Self> {
        // Two-phase commits (a write to the stock, on every node) need
        // prepared transactions; a worker bounds its lock waits as the
        // engine's own sessions do (Citus does not carry them there).
        let node = |worker: bool| {
            let mut settings = vec![
                "shared_preload_libraries=citus",
                "max_prepared_transactions=100",
            ];
            if worker {
                settings.push("lock_timeout=5s");
            } else {
                settings.push("citus.enable_create_database_propagation=on");
            }
            start(&settings).context("starting a Citus node (scripts/citus.sh install)")
        };
        let coordinator = Arc::new(node(false)?);
        let workers = (0..workers)
            .map(|_| node(true).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        for node in std::iter::once(&coordinator).chain(&workers) {
            crate::pg_client::connect(&node.url())
                .await?
                .batch_execute("CREATE EXTENSION citus")
                .await
                .context("CREATE EXTENSION citus")?;
        }
        let admin = crate::pg_client::connect(&coordinator.url()).await?;
        let port = |node: &Postgres| i32::from(node.addr().port());
        admin
            .execute(
                "SELECT citus_set_coordinator_host('127.0.0.1', $1)",
                &[&port(&coordinator)],
            )
            .await
            .context("registering the coordinator")?;
        for worker in &workers {
            admin
                .execute("SELECT citus_add_node('127.0.0.1', $1)", &[&port(worker)])
                .await
                .context("registering a worker")?;
        }
        Ok(Self {
            coordinator,
            workers,
        })
    }
}

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
        // Each registration is idempotent: a failed one is tried twice
        // more, and said on stderr, so a passing fault of the loaded
        // cluster fails no test but still shows in the output.
        let mut attempt = 1;
        while let Err(error) = coordinator.execute(register, &[&host, &port]).await {
            let error = anyhow::Error::new(error)
                .context(format!("registering {host}:{port} in {database}"));
            if attempt == 3 {
                return Err(error);
            }
            eprintln!("attempt {attempt} failed, trying again in a second: {error:#}");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            attempt += 1;
        }
    }
    Ok(())
}
