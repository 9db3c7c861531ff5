//! [`SqliteStore`]: the writer thread and the readers behind the
//! [`Store`] protocol, and how it opens ([`StoreOptions`](crate::StoreOptions)).

use super::backend::{classify, Sqlite, MIGRATIONS};
use super::clock::DbClock;
use super::outbox::Settled;
use super::protocol::Clock;
use super::readers::ReadPool;
use super::writer::{Keep, Kind, Writer};
use super::{checkpointer, lease, operator, outbox, protocol, queries, schema};
use crate::backend::Operation;
use crate::caller::Caller;
use crate::clock::BootInstant;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, StoredResponse};
use crate::store::operator::{
    ActionRecord, Census, ListFilter, OperationRecord, OperatorTake, OutboxCensus, Settlement,
    Taken,
};
use crate::store::schema::Migrations;
use crate::store::Result;
use crate::store::{
    millis, now_ms, stored_abandoned, Abandoned, Advanced, AfterFailure, ClaimToken, Delivery,
    Execution, FirstPhase, LiveRecord, OutboxItem, Store, StoreError, StoreOptions, TimeLimits,
    TransactionEnd,
};
use async_trait::async_trait;
use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The SQLite store: a handle to the writer thread and the read pool.
pub struct SqliteStore {
    writer: Writer,
    readers: ReadPool,
    /// The application's schema, checked with the engine's.
    app: Migrations,
    /// What every lease and expiry is measured on ([`clock`]).
    clock: DbClock,
    /// When the clock's reading was last stored (boot clock, ms).
    clock_stored: AtomicI64,
    limits: TimeLimits,
}

/// How often the database clock's reading is stored, at most: a reboot
/// goes on from the last stored reading, so a lease or an expiry written
/// since then is at most this much longer after it, never shorter.
const CLOCK_READING_EVERY_MS: i64 = 1_000;

impl SqliteStore {
    /// Creates the file (and its folder) if missing, migrates it and starts
    /// the writer thread. Fails if the database cannot be opened, or if
    /// its schema is one this release cannot serve on (a later release's
    /// migration that does not run beside it: the error names it). With
    /// [`StoreOptions::migrate`] off, the file must exist and nothing is
    /// migrated: a file behind this release is refused.
    pub fn open(path: impl Into<PathBuf>, options: StoreOptions) -> Result<Self> {
        let path: PathBuf = path.into();
        let mut conn = if options.migrate {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    StoreError::unavailable(format!("cannot create {}", dir.display())).caused_by(e)
                })?;
            }
            Connection::open(&path).map_err(classify)?
        } else {
            if !path.exists() {
                return Err(StoreError::incompatible_schema(format!(
                    "the database file {} does not exist, and this server does not migrate: \
                     migrate it first",
                    path.display()
                )));
            }
            schema::open_existing(&path).map_err(classify)?
        };
        schema::configure_writer(&conn, options.durability).map_err(classify)?;
        if options.migrate {
            schema::migrate(&mut conn, options.migrations, MIGRATIONS).map_err(classify)?;
        }
        crate::store::schema::report(&schema::check(&conn, options.migrations, MIGRATIONS)?);
        let clock = DbClock::open(&conn).map_err(classify)?;
        let generation = Arc::new(AtomicU64::new(0));
        let writer = Writer::start(
            conn,
            path.clone(),
            options.durability,
            options.migrations,
            generation.clone(),
            checkpointer::Thresholds::default(),
        )?;
        Ok(Self {
            writer,
            readers: ReadPool::new(path, generation),
            app: options.migrations,
            clock,
            clock_stored: AtomicI64::new(BootInstant::now().as_ms()),
            limits: options.limits,
        })
    }

    fn clock(&self) -> Clock {
        let limits = &self.limits;
        Clock {
            now: self.clock.now(),
            wall: now_ms(),
            ttl: millis(limits.key_ttl),
            lease: millis(limits.lease),
            attention_after: millis(limits.attention_after),
            tombstone_ttl: millis(limits.tombstone_ttl),
        }
    }

    /// The clock of a phase of `operation`: its records live for its own
    /// TTL when it has one.
    fn clock_for(&self, operation: &dyn Operation<Sqlite>) -> Clock {
        let mut clock = self.clock();
        if let Some(ttl) = operation.key_ttl() {
            clock.ttl = millis(ttl);
        }
        clock
    }

    /// Whether this write should store the clock's reading too (once a
    /// second at most, so that a reboot goes on from close to where this
    /// one stopped).
    fn clock_reading_due(&self) -> bool {
        let now = BootInstant::now().as_ms();
        let last = self.clock_stored.load(Ordering::Relaxed);
        now.saturating_sub(last) >= CLOCK_READING_EVERY_MS
            && self
                .clock_stored
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Runs `read` on one of the read connections (WAL readers beside the
    /// writer, never waiting for it), on the calling thread: for your own
    /// reads (a listing, a lookup), in the same file as the records. The
    /// engine's own replay lookups run so, inside async handlers: an
    /// indexed read of a page the cache holds takes microseconds. A read
    /// that scans (a report, an export) belongs in
    /// `tokio::task::spawn_blocking`.
    pub fn read<T>(&self, read: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.readers.with(read)
    }

    /// Runs `work` as a writer job whose savepoint is kept.
    async fn write<T: Send + 'static>(
        &self,
        kind: Kind,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        self.writer
            .submit(kind, move |batch| {
                work(batch.conn).map(|t| (t, Keep::Yes)).map_err(classify)
            })
            .await
    }
}

#[async_trait]
impl Store<Sqlite> for SqliteStore {
    async fn lookup(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<LiveRecord>> {
        self.readers
            .with(|conn| queries::live_record(conn, caller, key, self.clock.now()))
    }

    async fn unfinished(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Fingerprint>> {
        self.readers
            .with(|conn| queries::unfinished(conn, caller, key))
    }

    fn epoch(&self) -> u64 {
        self.readers.generation()
    }

    fn key_ttl(&self) -> Duration {
        self.limits.key_ttl
    }

    fn lease(&self) -> Duration {
        self.limits.lease
    }

    async fn execute(&self, phase: FirstPhase<Sqlite>) -> Result<Execution> {
        let clock = self.clock_for(phase.operation.as_ref());
        let db_clock = self.clock_reading_due().then_some(self.clock);
        self.writer
            .submit(Kind::Write, move |batch| {
                let FirstPhase {
                    request,
                    operation,
                    end,
                    max_unfinished,
                } = &phase;
                if let Some(db_clock) = db_clock {
                    db_clock.refresh(batch.conn).map_err(classify)?;
                }
                let execution = protocol::execute(batch.conn, request, operation.as_ref(), clock)
                    .map_err(classify)?;
                // The writer runs one job at a time: the count is exact.
                if let (Execution::Stopped(_), Some(cap)) = (&execution, *max_unfinished) {
                    if queries::over_unfinished_cap(batch.conn, &request.caller, cap)
                        .map_err(classify)?
                    {
                        return Ok((Execution::TooManyUnfinished(cap), Keep::No));
                    }
                }
                Ok(match (execution, *end) {
                    (Execution::Ran(_) | Execution::Stopped(_), TransactionEnd::RollBack) => {
                        (Execution::RolledBack, Keep::No)
                    }
                    (execution, _) => (execution, Keep::Yes),
                })
            })
            .await
    }

    async fn advance(&self, lease: &Lease, phase: Arc<dyn Operation<Sqlite>>) -> Result<Advanced> {
        let (lease, clock) = (lease.clone(), self.clock_for(phase.as_ref()));
        self.write(Kind::Write, move |conn| {
            protocol::advance(conn, &lease, phase.as_ref(), clock)
        })
        .await
    }

    async fn renew(&self, lease: &Lease, length: Duration) -> Result<bool> {
        let (lease, mut clock) = (lease.clone(), self.clock());
        clock.lease = millis(length);
        self.write(Kind::Write, move |conn| lease::renew(conn, &lease, clock))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let (lease, clock) = (lease.clone(), self.clock());
        self.write(Kind::Write, move |conn| lease::release(conn, &lease, clock))
            .await
    }

    async fn step_failed(&self, lease: &Lease, error: &str) -> Result<AfterFailure> {
        let (lease, clock, error) = (lease.clone(), self.clock(), error.to_owned());
        self.write(Kind::Write, move |conn| {
            lease::step_failed(conn, &lease, &error, clock)
        })
        .await
    }

    async fn set_aside(&self, lease: &Lease, reason: &str) -> Result<bool> {
        let (lease, reason) = (lease.clone(), reason.to_owned());
        self.write(Kind::Write, move |conn| {
            lease::set_aside(conn, &lease, &reason, None)
        })
        .await
    }

    async fn needing_attention(&self) -> Result<u64> {
        self.readers.with(lease::needing_attention)
    }

    async fn abandoned(&self, limit: u32, skip: &[String]) -> Result<Vec<Abandoned>> {
        let now = self.clock.now();
        let skip = serde_json::to_string(skip)
            .map_err(|e| StoreError::internal("cannot list the points to skip").caused_by(e))?;
        let rows = self
            .readers
            .with(|conn| protocol::abandoned(conn, now, limit, &skip))?;
        Ok(stored_abandoned(rows))
    }

    async fn take_over(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<Lease>> {
        let (caller, key, clock) = (*caller, key.clone(), self.clock());
        self.write(Kind::Write, move |conn| {
            protocol::take_over(conn, &caller, &key, clock)
        })
        .await
    }

    async fn sweep(&self, limit: u32) -> Result<u64> {
        let (db_clock, clock) = (self.clock, self.clock());
        let sent_before = now_ms().saturating_sub(millis(self.limits.outbox_retention));
        self.write(Kind::Other, move |conn| {
            db_clock.refresh(conn)?;
            outbox::prune_sent(conn, sent_before, limit)?;
            protocol::sweep(conn, clock, limit)
        })
        .await
    }

    async fn due_messages(&self, limit: u32, claim: Duration) -> Result<Vec<OutboxItem>> {
        // The outbox's schedule and claims are on the database's clock, as
        // leases are: a wall clock set back a day would hold a claim a day.
        let now = self.clock.now();
        let until = now.saturating_add(millis(claim).max(1));
        let rows = self
            .write(Kind::Other, move |conn| {
                outbox::claim_messages(conn, now, until, limit)
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, attempts, message)| OutboxItem {
                id,
                caller: Vec::new(),
                attempts,
                claim: ClaimToken(until),
                message,
            })
            .collect())
    }

    async fn message_settled(&self, item: &OutboxItem, delivery: Delivery<'_>) -> Result<bool> {
        let (id, claim, now) = (item.id, item.claim, now_ms());
        let (retry_at, error) = match delivery {
            Delivery::Sent => (None, None),
            Delivery::Retry(retry_in, error) => (
                Some(self.clock.now().saturating_add(millis(retry_in))),
                Some(error.to_owned()),
            ),
            Delivery::Refused(error) => (None, Some(error.to_owned())),
        };
        self.write(Kind::Other, move |conn| {
            let settled = match (retry_at, error.as_deref()) {
                (_, None) => Settled::Sent(now),
                (Some(at), Some(error)) => Settled::Retry(at, error),
                (None, Some(error)) => Settled::Dead(now, error),
            };
            outbox::settle_message(conn, id, claim.0, settled)
        })
        .await
    }

    async fn messages_waiting(&self) -> Result<u64> {
        self.readers.with(queries::messages_waiting)
    }

    async fn messages_dead(&self) -> Result<u64> {
        self.readers.with(queries::messages_dead)
    }

    async fn operations(&self, filter: &ListFilter) -> Result<Vec<OperationRecord>> {
        let now = self.clock.now();
        self.readers
            .with(|conn| operator::operations(conn, filter, now))
    }

    async fn operation(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<OperationRecord>> {
        let now = self.clock.now();
        self.readers
            .with(|conn| operator::operation(conn, caller, key, now))
    }

    async fn find_operations(&self, prefix: &[u8]) -> Result<Vec<(Caller, IdempotencyKey)>> {
        self.readers.with(|conn| operator::find(conn, prefix))
    }

    async fn census(&self) -> Result<Census> {
        let now = self.clock.now();
        self.readers.with(|conn| operator::census(conn, now))
    }

    async fn outbox_census(&self) -> Result<OutboxCensus> {
        let now = self.clock.now();
        self.readers.with(|conn| operator::outbox_census(conn, now))
    }

    async fn operator_take(&self, take: OperatorTake) -> Result<Taken> {
        let clock = self.clock();
        self.write(Kind::Other, move |conn| operator::take(conn, &take, clock))
            .await
    }

    async fn settle(
        &self,
        lease: &Lease,
        phase: Arc<dyn Operation<Sqlite>>,
        settlement: &Settlement,
    ) -> Result<Option<StoredResponse>> {
        let (lease, settlement) = (lease.clone(), settlement.clone());
        let clock = self.clock_for(phase.as_ref());
        self.write(Kind::Other, move |conn| {
            operator::settle(conn, &lease, phase.as_ref(), &settlement, clock)
        })
        .await
    }

    async fn actions(&self, operation: &OperationId) -> Result<Vec<ActionRecord>> {
        self.readers.with(|conn| operator::actions(conn, operation))
    }

    async fn health(&self) -> Result<()> {
        let app = self.app;
        self.writer
            .submit(Kind::Other, move |batch| {
                if let Some(e) = batch.recent_failure {
                    // Healthy means requests can commit, not just that a probe can.
                    return Err(e.clone());
                }
                schema::check(batch.conn, app, MIGRATIONS)?;
                schema::probe_write(batch.conn).map_err(classify)?;
                Ok(((), Keep::Yes))
            })
            .await
    }
}
