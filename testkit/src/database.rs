//! The database a test's server runs on: a fresh SQLite file in a
//! temporary folder, or, when `TEST_POSTGRES_URL` names a PostgreSQL server
//! (as `scripts/test.sh` does for its second run), a fresh database on it.
//! The same tests then run on both backends. A [`Database`] is a cheap
//! handle: clones share one database (two instances on one PostgreSQL
//! database, or a restart on the same file), and its folder lives as long
//! as the last clone.

use crate::pg_client::connect;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;

/// The environment variable naming the PostgreSQL server to make fresh
/// databases on (`postgres://USER@HOST:PORT/DB`).
pub const POSTGRES_ENV: &str = "TEST_POSTGRES_URL";

/// One database, fresh for a test.
#[derive(Debug, Clone)]
pub struct Database(Arc<Kind>);

#[derive(Debug)]
enum Kind {
    Sqlite {
        path: PathBuf,
        _dir: Option<TempDir>,
    },
    Postgres {
        url: String,
    },
}

impl Database {
    /// A fresh database on PostgreSQL when `TEST_POSTGRES_URL` is set, else
    /// a fresh SQLite file.
    pub async fn fresh() -> Result<Self> {
        if std::env::var_os(POSTGRES_ENV).is_some() {
            Self::postgres().await
        } else {
            Self::sqlite()
        }
    }

    /// A fresh SQLite file (`data/shop.db` in a new temporary folder; the
    /// server creates the file and its folder).
    pub fn sqlite() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("testkit-db-").tempdir()?;
        let path = dir.path().join("data").join("shop.db");
        Ok(Self(Arc::new(Kind::Sqlite {
            path,
            _dir: Some(dir),
        })))
    }

    /// The SQLite file at `path`, in a folder the test owns (a small disk,
    /// say).
    pub fn sqlite_at(path: impl Into<PathBuf>) -> Self {
        Self(Arc::new(Kind::Sqlite {
            path: path.into(),
            _dir: None,
        }))
    }

    /// `CREATE DATABASE t_<uuid>` on the server `TEST_POSTGRES_URL` names;
    /// an error when it names none.
    pub async fn postgres() -> Result<Self> {
        let admin = std::env::var(POSTGRES_ENV)
            .map_err(|_| anyhow!("{POSTGRES_ENV} must name a PostgreSQL server"))?;
        Self::postgres_on(&admin).await
    }

    /// `CREATE DATABASE t_<uuid>` on the PostgreSQL server `admin` names
    /// (`postgres://USER@HOST:PORT/DB`: a [`Postgres`](crate::Postgres)
    /// cluster of the test's own, or a [`Proxy`](crate::Proxy) in front of
    /// it); the new database is reached the same way.
    /// The URL's parameters (`?pgbouncer=true`, `?sslmode=…`) are kept.
    pub async fn postgres_on(admin: &str) -> Result<Self> {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let client = connect(admin).await?;
        let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
        let (server, _) = base
            .rsplit_once('/')
            .ok_or_else(|| anyhow!("{admin} has no database name"))?;
        if crate::citus::is_coordinator(&client).await? {
            crate::citus::create(&client, server, &name).await?;
        } else {
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .with_context(|| format!("CREATE DATABASE {name}"))?;
        }
        let query = match query {
            "" => String::new(),
            query => format!("?{query}"),
        };
        Ok(Self(Arc::new(Kind::Postgres {
            url: format!("{server}/{name}{query}"),
        })))
    }

    /// The PostgreSQL database at `url` as it is: one made by
    /// [`Database::postgres_on`], reached another way (both hosts of a
    /// primary and its standby, `postgres://u@h1:p1,h2:p2/db?target_session_attrs=read-write`).
    pub fn postgres_url(url: impl Into<String>) -> Self {
        Self(Arc::new(Kind::Postgres { url: url.into() }))
    }

    /// The database's name, on PostgreSQL.
    pub fn postgres_name(&self) -> Option<&str> {
        match &*self.0 {
            Kind::Sqlite { .. } => None,
            Kind::Postgres { url } => {
                let name = url.rsplit_once('/')?.1;
                Some(name.split('?').next().unwrap_or(name))
            }
        }
    }

    /// The URL to pass as `--database`.
    pub fn url(&self) -> String {
        match &*self.0 {
            Kind::Sqlite { path, .. } => format!("sqlite://{}", path.display()),
            Kind::Postgres { url } => url.clone(),
        }
    }

    /// The SQLite file, or `None` on PostgreSQL.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &*self.0 {
            Kind::Sqlite { path, .. } => Some(path),
            Kind::Postgres { .. } => None,
        }
    }

    /// Whether this is a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        matches!(&*self.0, Kind::Postgres { .. })
    }

    /// Runs SQL straight on the database, behind the server's back: the
    /// `sqlite` text on SQLite, the `postgres` one on PostgreSQL.
    pub async fn sql(&self, sqlite: &str, postgres: &str) -> Result<()> {
        match &*self.0 {
            Kind::Sqlite { path, .. } => open(path)?
                .execute_batch(sqlite)
                .with_context(|| format!("running {sqlite:?}")),
            Kind::Postgres { url } => connect(url)
                .await?
                .batch_execute(postgres)
                .await
                .with_context(|| format!("running {postgres:?}")),
        }
    }

    /// A client of this PostgreSQL database of the test's own, behind the
    /// server's back (through the same pooler, if any).
    pub async fn postgres_client(&self) -> Result<tokio_postgres::Client> {
        match &*self.0 {
            Kind::Postgres { url } => connect(url).await,
            Kind::Sqlite { .. } => bail!("not a PostgreSQL database"),
        }
    }

    /// SQLite's `PRAGMA integrity_check` of the file: `"ok"` when it is
    /// sound, else what is wrong. An error on PostgreSQL.
    pub fn integrity(&self) -> Result<String> {
        match &*self.0 {
            Kind::Sqlite { path, .. } => {
                let conn = open(path)?;
                let mut verdict = conn.prepare("PRAGMA integrity_check")?;
                let lines: Vec<String> = verdict
                    .query_map([], |row| row.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(lines.join("; "))
            }
            Kind::Postgres { .. } => bail!("an integrity check is SQLite's"),
        }
    }

    /// `SELECT count(*) FROM table`, read straight from the database.
    pub async fn count(&self, table: &str) -> Result<i64> {
        self.count_of(format!("SELECT count(*) FROM {table}")).await
    }

    /// The keys' records, live or expired, not their tombstones (what an
    /// expired record leaves behind once swept: its key's generation).
    pub async fn records(&self) -> Result<i64> {
        self.count_where("idempotency_keys", "recovery_point <> 'expired'")
            .await
    }

    /// `SELECT count(*) FROM table WHERE condition`, read straight from the
    /// database (the condition in SQL both backends read alike).
    pub async fn count_where(&self, table: &str, condition: &str) -> Result<i64> {
        self.count_of(format!("SELECT count(*) FROM {table} WHERE {condition}"))
            .await
    }

    async fn count_of(&self, sql: String) -> Result<i64> {
        match &*self.0 {
            Kind::Sqlite { path, .. } => open(path)?
                .query_row(&sql, [], |row| row.get(0))
                .with_context(|| sql.clone()),
            // A simple query: one message, whatever pooler is in between.
            Kind::Postgres { url } => {
                let messages = connect(url)
                    .await?
                    .simple_query(&sql)
                    .await
                    .with_context(|| sql.clone())?;
                let count = messages.iter().find_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                    _ => None,
                });
                count
                    .ok_or_else(|| anyhow!("{sql}: no row"))?
                    .parse()
                    .with_context(|| sql.clone())
            }
        }
    }
}

fn open(path: &Path) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", path.display()))?;
    // The server may hold the write lock for a moment.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}
