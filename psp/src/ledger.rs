//! The ledger: one SQLite file (WAL, `synchronous=NORMAL`: it survives a
//! process kill, not a power loss; it is a simulator) written by one thread.
//!
//! * **One writer.** Every charge, listing and sweep is a job for a
//!   dedicated thread with its own connection and cached statements; a
//!   request waits for its job's answer on a oneshot channel (the one
//!   thread hop). Concurrent requests with one key therefore run one after
//!   the other: the second finds the first's record and replays it. Never
//!   two charges for one key, never a "key in use" error.
//! * **One transaction per charge.** The key is looked up (replay, or a
//!   mismatch), or the ledger row and the key's stored answer are inserted
//!   together and committed before the answer leaves.
//! * **Keys live 24 hours.** An expired key counts as absent (a request
//!   with it charges again) and [`Ledger::sweep`] deletes expired keys in
//!   batches.
//!
//! One file on purpose: the handle, the jobs and the SQL each job runs
//! form one unit around one connection, and its tests exercise them
//! together.

use crate::domain::{Answer, Charge, ChargeId, ChargeParams, IdempotencyKey};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use serve::migrations::Migration;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};

/// The schema, in order; a version is applied once and recorded in
/// `schema_migrations`.
const MIGRATIONS: &[Migration] = &[Migration::contract(
    1,
    "0001_init",
    include_str!("../migrations/0001_init.sql"),
)];
/// Jobs that may wait for the writer before requests wait to enqueue.
const QUEUE_DEPTH: usize = 4096;
/// How long the connection waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the ledger could not open or answer.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The database's folder could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database was written by a newer simulator.
    #[error("the database is at schema version {found}; this psp knows up to {known}")]
    NewerSchema {
        /// The version in the file.
        found: i64,
        /// The newest this build knows.
        known: i64,
    },
    /// The writer thread could not start.
    #[error("cannot start the ledger's writer thread: {0}")]
    Thread(std::io::Error),
    /// The writer thread is gone.
    #[error("the ledger's writer has stopped")]
    Stopped,
    /// SQLite failed; the transaction rolled back.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// What a charge request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChargeOutcome {
    /// The answer: new (`replayed` false) or the key's stored one.
    Answered {
        /// `201` with the charge, or `402` with the decline.
        answer: Answer,
        /// Whether it is the stored answer of an earlier request.
        replayed: bool,
    },
    /// The key is live with other parameters; nothing was done.
    Mismatch,
}

/// One charge of the ledger, as `GET /v1/charges` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    /// `pch_…`.
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// Three lowercase letters.
    pub currency: String,
    /// The key that made it.
    pub idempotency_key: String,
    /// Unix seconds.
    pub created: i64,
}

/// A page of the ledger, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The charges.
    pub data: Vec<LedgerEntry>,
    /// Whether older charges follow the last one.
    pub has_more: bool,
}

/// A handle on the ledger's writer; cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    jobs: mpsc::Sender<Job>,
}

type Reply<T> = oneshot::Sender<rusqlite::Result<T>>;

#[derive(Debug)]
enum Job {
    Charge {
        key: IdempotencyKey,
        params: ChargeParams,
        reply: Reply<ChargeOutcome>,
    },
    List {
        limit: u32,
        starting_after: Option<ChargeId>,
        reply: Reply<Page>,
    },
    Sweep {
        limit: u32,
        reply: Reply<usize>,
    },
}

impl Ledger {
    /// Opens (creating the file and its folder if missing) and migrates the
    /// database at `path`, then starts the writer thread. Keys live
    /// `key_ttl`.
    pub fn open(path: &Path, key_ttl: Duration) -> Result<Self, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| LedgerError::CreateDir {
                path: dir.to_owned(),
                source,
            })?;
        }
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // Keep cached plans: without it SQLite re-prepares a statement with
        // a bound LIMIT on every run.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        conn.set_prepared_statement_cache_capacity(16);
        migrate(&mut conn)?;
        let writer = Writer {
            conn,
            ttl_ms: i64::try_from(key_ttl.as_millis()).unwrap_or(i64::MAX),
        };
        let (jobs, queue) = mpsc::channel(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name("psp-ledger".into())
            .spawn(move || writer.run(queue))
            .map_err(LedgerError::Thread)?;
        Ok(Self { jobs })
    }

    /// Charges `params` under `key` once: replays the key's stored answer,
    /// refuses other parameters, or records a new answer (and, for a
    /// success, its ledger row) in one transaction.
    pub async fn charge(
        &self,
        key: IdempotencyKey,
        params: ChargeParams,
    ) -> Result<ChargeOutcome, LedgerError> {
        self.ask(|reply| Job::Charge { key, params, reply }).await
    }

    /// Up to `limit` charges older than `starting_after` (all if `None`),
    /// newest first.
    pub async fn list(
        &self,
        limit: u32,
        starting_after: Option<ChargeId>,
    ) -> Result<Page, LedgerError> {
        self.ask(|reply| Job::List {
            limit,
            starting_after,
            reply,
        })
        .await
    }

    /// Deletes up to `limit` expired keys; returns how many it deleted.
    pub async fn sweep(&self, limit: u32) -> Result<usize, LedgerError> {
        self.ask(|reply| Job::Sweep { limit, reply }).await
    }

    /// Every `every`, deletes expired keys in batches of `batch` until
    /// none is left, so charges interleave with a long sweep. Runs until
    /// dropped.
    pub async fn sweep_periodically(self, every: Duration, batch: u32) {
        let ledger = &self;
        serve::sweep::every(every, batch, 0, move |limit| async move {
            ledger.sweep(limit).await.map(|n| n as u64)
        })
        .await
    }

    async fn ask<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T, LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(job(reply))
            .await
            .map_err(|_| LedgerError::Stopped)?;
        Ok(answer.await.map_err(|_| LedgerError::Stopped)??)
    }
}

/// The one thread that touches the database.
struct Writer {
    conn: Connection,
    ttl_ms: i64,
}

impl Writer {
    fn run(mut self, mut queue: mpsc::Receiver<Job>) {
        while let Some(job) = queue.blocking_recv() {
            // A requester that gave up (its client went away) is no error:
            // its charge is committed and a retry replays it.
            match job {
                Job::Charge { key, params, reply } => {
                    let _ = reply.send(self.charge(&key, &params));
                }
                Job::List {
                    limit,
                    starting_after,
                    reply,
                } => {
                    let _ = reply.send(self.list(limit, starting_after.as_ref()));
                }
                Job::Sweep { limit, reply } => {
                    let _ = reply.send(self.sweep(limit));
                }
            }
        }
        tracing::debug!("ledger writer stopped: no handles left");
    }

    fn charge(
        &mut self,
        key: &IdempotencyKey,
        params: &ChargeParams,
    ) -> rusqlite::Result<ChargeOutcome> {
        let now = now_ms();
        let fingerprint = params.fingerprint();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let existing = tx
            .prepare_cached(
                "SELECT fingerprint, status, body, expires_at FROM idempotency_keys
                 WHERE key = ?1",
            )?
            .query_row([key.as_ref()], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, u16>(1)?,
                    row.get::<_, Vec<u8>>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })
            .optional()?;
        if let Some((stored, status, body, expires_at)) = existing {
            if expires_at > now {
                // Nothing was written: dropping the transaction ends it.
                return Ok(if stored == fingerprint.as_ref() {
                    ChargeOutcome::Answered {
                        answer: Answer { status, body },
                        replayed: true,
                    }
                } else {
                    ChargeOutcome::Mismatch
                });
            }
            // Expired: it counts as absent and makes room for the new record.
            tx.prepare_cached("DELETE FROM idempotency_keys WHERE key = ?1")?
                .execute([key.as_ref()])?;
        }

        let (answer, charge_id) = match params.payment_method.decline() {
            Some(decline) => (Answer::declined(decline), None),
            None => {
                let charge = Charge::new(params, now / 1000);
                tx.prepare_cached(
                    "INSERT INTO charges
                       (id, amount, currency, payment_method, metadata, idempotency_key, created)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?
                .execute(params![
                    charge.id.as_ref(),
                    charge.amount,
                    charge.currency,
                    charge.payment_method,
                    serde_json::to_string(charge.metadata).expect("metadata always serialises"),
                    key.as_ref(),
                    charge.created,
                ])?;
                (Answer::created(&charge), Some(charge.id))
            }
        };
        tx.prepare_cached(
            "INSERT INTO idempotency_keys
               (key, fingerprint, status, body, charge_id, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            key.as_ref(),
            fingerprint.as_ref(),
            answer.status,
            &answer.body[..],
            charge_id.as_ref().map(AsRef::as_ref),
            now,
            now.saturating_add(self.ttl_ms),
        ])?;
        tx.commit()?;
        Ok(ChargeOutcome::Answered {
            answer,
            replayed: false,
        })
    }

    fn list(&mut self, limit: u32, starting_after: Option<&ChargeId>) -> rusqlite::Result<Page> {
        // Ids are `pch_` + lowercase hex, so "pch_~" sorts after every id.
        let before = starting_after.map_or("pch_~", AsRef::as_ref);
        let mut data = self
            .conn
            .prepare_cached(
                "SELECT id, amount, currency, idempotency_key, created FROM charges
                 WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
            )?
            .query_map(params![before, i64::from(limit) + 1], |row| {
                Ok(LedgerEntry {
                    id: row.get(0)?,
                    amount: row.get(1)?,
                    currency: row.get(2)?,
                    idempotency_key: row.get(3)?,
                    created: row.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let has_more = data.len() > limit as usize;
        data.truncate(limit as usize);
        Ok(Page { data, has_more })
    }

    fn sweep(&mut self, limit: u32) -> rusqlite::Result<usize> {
        self.conn
            .prepare_cached(
                "DELETE FROM idempotency_keys WHERE key IN (
                   SELECT key FROM idempotency_keys WHERE expires_at <= ?1 LIMIT ?2)",
            )?
            .execute(params![now_ms(), limit])
    }
}

fn migrate(conn: &mut Connection) -> Result<(), LedgerError> {
    let found = serve::migrations::migrate(conn, MIGRATIONS, now_ms(), |version| {
        tracing::info!(version, "ledger migration applied");
    })?;
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    if found > known {
        return Err(LedgerError::NewerSchema { found, known });
    }
    Ok(())
}

/// Unix milliseconds by the system clock.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(body: &str) -> ChargeParams {
        ChargeParams::parse(body.as_bytes()).unwrap()
    }

    fn key(raw: &str) -> IdempotencyKey {
        IdempotencyKey::parse(raw.as_bytes()).unwrap()
    }

    const VISA: &str = r#"{"amount":500,"currency":"usd","payment_method":"pm_card_visa"}"#;

    #[tokio::test]
    async fn an_expired_key_counts_as_absent_and_is_swept() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("psp.db"), Duration::ZERO).unwrap();
        for _ in 0..2 {
            let outcome = ledger.charge(key("k"), params(VISA)).await.unwrap();
            assert!(
                matches!(
                    outcome,
                    ChargeOutcome::Answered {
                        replayed: false,
                        ..
                    }
                ),
                "an expired key charges again: {outcome:?}"
            );
        }
        assert_eq!(ledger.list(10, None).await.unwrap().data.len(), 2);
        assert_eq!(ledger.sweep(100).await.unwrap(), 1, "one record per key");
        assert_eq!(ledger.sweep(100).await.unwrap(), 0);
        assert_eq!(
            ledger.list(10, None).await.unwrap().data.len(),
            2,
            "sweeping keys leaves the ledger alone"
        );
    }

    #[tokio::test]
    async fn a_live_key_replays_and_survives_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("a/b/psp.db"), Duration::from_secs(60))
            .expect("the folder is created");
        let first = ledger.charge(key("k"), params(VISA)).await.unwrap();
        let ChargeOutcome::Answered { answer, .. } = &first else {
            panic!("{first:?}")
        };
        assert_eq!(ledger.sweep(100).await.unwrap(), 0);
        assert_eq!(
            ledger.charge(key("k"), params(VISA)).await.unwrap(),
            ChargeOutcome::Answered {
                answer: answer.clone(),
                replayed: true
            }
        );
        let other = r#"{"amount":501,"currency":"usd","payment_method":"pm_card_visa"}"#;
        assert_eq!(
            ledger.charge(key("k"), params(other)).await.unwrap(),
            ChargeOutcome::Mismatch
        );
    }

    #[tokio::test]
    async fn a_database_from_a_newer_simulator_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("psp.db");
        drop(Ledger::open(&path, Duration::from_secs(60)).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)",
                [],
            )
            .unwrap();
        assert!(matches!(
            Ledger::open(&path, Duration::from_secs(60)),
            Err(LedgerError::NewerSchema { found: 99, .. })
        ));
    }
}
