//! Requests whose first phase is one statement ([`OneStatement`]) and that
//! arrive together run as one statement of many rows: group commit, the
//! way the SQLite writer does it. A collector takes whatever is queued
//! (nothing waits for more to come) while at most [`CONCURRENT`]
//! statements run, so under load each statement carries the requests that
//! queued while the previous ones ran, and a lone request goes at once.
//!
//! Each request still gets its own answer: its key claimed, the answer it
//! recorded; not claimed, its key's record decides (replay, 422, 409). A
//! statement that fails commits nothing, so its requests run again, each
//! alone, and an error (a key held past `lock_timeout`, say) reaches only
//! the request it belongs to. A connection that breaks while a statement
//! runs leaves the outcome of all its requests unknown, as during a COMMIT.

use super::clock::Clock;
use super::conn::{cache, Prepared};
use super::error::{classify, classify_commit, tokio_panicked, LOCK_NOT_AVAILABLE};
use super::one_statement::OneStatement;
use super::one_statement::{CLAIM_COLUMNS, MAX_ROWS};
use super::protocol::decide;
use super::session::LOCK_TIMEOUT;
use crate::store::Result;
use crate::store::{Execution, IdempotentRequest, StoreError};
use deadpool_postgres::{Object, Pool};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_postgres::types::{ToSql, Type};

/// Statements running at once, each on a pooled connection of its own.
/// Measured on 2 cores with PostgreSQL beside the server (docs/BENCHMARKS.md,
/// "Issue 28's PostgreSQL tail"): since a batch takes one scheduler turn
/// before it closes ([`fill`]), 4 keeps 2's new keys a second (medians
/// 12.0k and 12.3k, the minimal idempotent floor's 12.1k, 12-14 runs each
/// by turns) with a shorter, steadier tail: p99 a median 5.0 ms, above 9 ms
/// in 1 run of 14, against 6.0 ms and 4 runs of 12 (the floor's 6.0 ms).
/// Before that turn, 2 gave 0.81-0.92× the plain-INSERT floor, 1
/// 0.74-0.83×, 3 0.79-0.80×, 4 0.67-0.73×, 8 and 16 less. Those figures
/// were taken with 64 rows a statement. With 8 ([`MAX_ROWS`]), 4 was
/// measured again ("Issue 28's tail is the statement"): 6 did no better,
/// and 8 statements of 4 rows did worse.
const CONCURRENT: usize = 4;
/// Requests queued for a statement, at most; more wait to be queued.
const QUEUED: usize = 1024;

/// A request waiting for its statement.
struct Job {
    request: IdempotentRequest,
    one: OneStatement,
    clock: Clock,
    reply: oneshot::Sender<Result<Execution>>,
}

/// The queue of one-statement requests, and the collector that runs them.
pub(super) struct Batches {
    queue: mpsc::Sender<Job>,
}

impl Batches {
    /// Starts the collector, which runs statements on `pool`'s connections.
    pub(super) fn start(pool: Pool) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUED);
        tokio::spawn(collect(pool, jobs));
        Self { queue }
    }

    /// Runs `one` for `request` in the next statement and answers once it
    /// has committed.
    pub(super) async fn execute(
        &self,
        request: IdempotentRequest,
        one: OneStatement,
        clock: Clock,
    ) -> Result<Execution> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request,
            one,
            clock,
            reply,
        };
        self.queue
            .send(job)
            .await
            .map_err(|_| StoreError::unavailable("the store is shutting down"))?;
        answer.await.map_err(|_| {
            StoreError::outcome_unknown("the statement carrying this request gave no answer")
        })?
    }
}

/// Adds what is queued to `batch`, up to [`MAX_ROWS`]. When the queue
/// looks empty after the first job, the request tasks already woken run
/// first (one turn of the scheduler, no timer): the answers of the last
/// statement all send their next request at once, and without the turn
/// its first one or two would take a statement for themselves.
async fn fill(batch: &mut Vec<Job>, jobs: &mut mpsc::Receiver<Job>) {
    loop {
        let before = batch.len();
        while batch.len() < MAX_ROWS {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if batch.len() == MAX_ROWS || (batch.len() == before && before > 1) {
            return;
        }
        tokio::task::yield_now().await;
        if batch.len() == before && jobs.is_empty() {
            return;
        }
    }
}

/// Takes whatever is queued, up to [`MAX_ROWS`], whenever fewer than
/// [`CONCURRENT`] statements run.
async fn collect(pool: Pool, mut jobs: mpsc::Receiver<Job>) {
    let running = Arc::new(Semaphore::new(CONCURRENT));
    loop {
        let Ok(permit) = running.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = jobs.recv().await else {
            return;
        };
        let mut batch = vec![first];
        fill(&mut batch, &mut jobs).await;
        let pool = pool.clone();
        tokio::spawn(async move {
            run(&pool, batch).await;
            drop(permit);
        });
    }
}

/// Runs a batch: the requests of the first one's shape, each key once, in
/// one statement; the others (another shape, a key already in it) after
/// it, each alone, so they find what it recorded.
async fn run(pool: &Pool, batch: Vec<Job>) {
    let client = match pool.get().await {
        Ok(client) => client,
        Err(e) => {
            let error = StoreError::unavailable("no database connection").caused_by(e);
            for job in batch {
                let _ = job.reply.send(Err(error.clone()));
            }
            return;
        }
    };
    let shape = batch[0].one.shape;
    let mut keys = HashSet::new();
    let (together, later): (Vec<Job>, Vec<Job>) = batch.into_iter().partition(|job| {
        std::ptr::eq(job.one.shape, shape)
            && keys.insert((job.request.caller, job.request.key.clone()))
    });
    match <[Job; 1]>::try_from(together) {
        Ok([job]) => alone(&client, job, LOCK_TIMEOUT).await,
        Err(together) => many(&client, together).await,
    }
    for job in later {
        alone(&client, job, LOCK_TIMEOUT).await;
    }
}

/// Requests of one shape and distinct keys, in one statement.
async fn many(client: &Object, jobs: Vec<Job>) {
    let rows: Vec<Row<'_>> = jobs
        .iter()
        .map(|job| Row {
            request: &job.request,
            one: &job.one,
        })
        .collect();
    let result = execute(client, &rows, jobs[0].clock, LOCK_TIMEOUT).await;
    drop(rows);
    match result {
        Ok(claimed) => {
            // The claimed first: their answers need nothing more.
            let (ran, others): (Vec<_>, Vec<_>) = jobs
                .into_iter()
                .zip(claimed)
                .partition(|(_, claimed)| *claimed);
            for (job, claimed) in ran.into_iter().chain(others) {
                answer(client, job, claimed).await;
            }
        }
        Err(StatementError::Failed(e)) if backend_lost(&e) => {
            let error = outcome_unknown(e);
            for job in jobs {
                let _ = job.reply.send(Err(error.clone()));
            }
        }
        // A key of the statement is held by another transaction, and every
        // row has waited `lock_timeout` for it already: each runs again on
        // its own, waiting only a moment more, so the blocked row's 409
        // comes after one `lock_timeout`, not two.
        Err(StatementError::Failed(e))
            if e.code().map(|state| state.code()) == Some(LOCK_NOT_AVAILABLE) =>
        {
            for job in jobs {
                alone(client, job, RETRY_LOCK_TIMEOUT).await;
            }
        }
        // Nothing was committed: each runs again on its own.
        Err(_) => {
            for job in jobs {
                alone(client, job, LOCK_TIMEOUT).await;
            }
        }
    }
}

/// How long a row of a statement that gave up waiting for a lock waits
/// again when it runs on its own.
const RETRY_LOCK_TIMEOUT: &str = "100ms";

/// One request in a statement of its own, waiting at most `lock_timeout`
/// for a transaction that holds its key.
async fn alone(client: &Object, job: Job, lock_timeout: &str) {
    let row = Row {
        request: &job.request,
        one: &job.one,
    };
    let result = execute(client, &[row], job.clock, lock_timeout).await;
    let error = match result {
        Ok(claimed) => return answer(client, job, claimed[0]).await,
        Err(StatementError::NotRun(e)) => classify(e),
        Err(StatementError::Failed(e)) if backend_lost(&e) => outcome_unknown(e),
        Err(StatementError::Failed(e))
            if e.code().map(|state| state.code()) == Some(LOCK_NOT_AVAILABLE) =>
        {
            let _ = job.reply.send(Ok(Execution::InUse));
            return;
        }
        Err(StatementError::Failed(e)) => classify(e),
    };
    let _ = job.reply.send(Err(error));
}

/// Claimed, the request's answer is the one it recorded; otherwise its
/// key's record (committed: the claim waited for it) decides.
async fn answer(client: &Object, job: Job, claimed: bool) {
    let execution = match claimed {
        true => Ok(Execution::Ran(job.one.response)),
        false => decide(client, &job.request, job.clock).await,
    };
    let _ = job.reply.send(execution);
}

/// Whether the statement's backend was lost (or the server panicked): it
/// may have committed.
fn backend_lost(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_none_or(|state| matches!(&state.code()[..2], "08" | "57"))
        || tokio_panicked(e)
}

fn outcome_unknown(e: tokio_postgres::Error) -> StoreError {
    classify_commit(e, "a statement that commits on its own")
}

/// One request's row: its key and its operation's statement.
pub(super) struct Row<'a> {
    pub(super) request: &'a IdempotentRequest,
    pub(super) one: &'a OneStatement,
}

/// Runs `rows` (at least one, at most [`MAX_ROWS`], all of one shape, no
/// key twice) as one statement that commits on its own, waiting at most
/// `lock_timeout` for a key another transaction holds; for each row,
/// whether its key was claimed (its answer is then the one recorded).
///
/// Behind a pooler in transaction mode (`pgbouncer=true`) the connection
/// carries no settings of its own, so the statement runs, unnamed, in a
/// transaction that sets them (`SET LOCAL`), its `BEGIN`, statement and
/// `COMMIT` sent together: still one round trip.
pub(super) async fn execute(
    client: &deadpool_postgres::ClientWrapper,
    rows: &[Row<'_>],
    clock: Clock,
    lock_timeout: &str,
) -> std::result::Result<Vec<bool>, StatementError> {
    let shape = rows[0].one.shape;
    let count = i32::try_from(rows.len()).expect("at most MAX_ROWS rows");
    let numbers: Vec<i32> = (0..count).collect();
    let callers: Vec<&[u8]> = rows
        .iter()
        .map(|r| &r.request.caller.as_bytes()[..])
        .collect();
    let keys: Vec<&str> = rows.iter().map(|r| r.request.key.as_ref()).collect();
    let fingerprints: Vec<&[u8]> = rows
        .iter()
        .map(|r| &r.request.fingerprint.as_bytes()[..])
        .collect();
    let statuses: Vec<i16> = rows.iter().map(|r| r.one.response.status as i16).collect();
    let headers: Vec<Option<String>> = rows
        .iter()
        .map(|r| r.one.response.encoded_headers())
        .collect();
    let bodies: Vec<&[u8]> = rows.iter().map(|r| &r.one.response.body[..]).collect();
    let own: Vec<Vec<Option<&str>>> = (0..rows[0].one.params.len())
        .map(|column| {
            rows.iter()
                .map(|r| r.one.params[column].as_deref())
                .collect()
        })
        .collect();
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&clock.ttl_secs, Type::FLOAT8),
        (&numbers, Type::INT4_ARRAY),
        (&callers, Type::BYTEA_ARRAY),
        (&keys, Type::TEXT_ARRAY),
        (&fingerprints, Type::BYTEA_ARRAY),
        (&statuses, Type::INT2_ARRAY),
        (&headers, Type::TEXT_ARRAY),
        (&bodies, Type::BYTEA_ARRAY),
    ];
    debug_assert_eq!(params.len(), 1 + CLAIM_COLUMNS.len());
    params.extend(
        own.iter()
            .map(|column| (column as &(dyn ToSql + Sync), Type::TEXT_ARRAY)),
    );
    let text = shape.text();
    let claimed_rows = match clock.session.per_transaction(lock_timeout) {
        // The connection's own session, set at its start, for the usual
        // wait; a shorter one is set around this statement. A named
        // statement, prepared once per connection, unless the connection
        // runs them unnamed.
        None => {
            let prepared = Prepared::get(Some(cache(client)), text, &params)
                .await
                .map_err(StatementError::NotRun)?;
            let set = |timeout: &str| format!("SET lock_timeout = '{timeout}'");
            let shortened = lock_timeout != LOCK_TIMEOUT;
            if shortened {
                client
                    .batch_execute(&set(lock_timeout))
                    .await
                    .map_err(StatementError::NotRun)?;
            }
            let rows = match &prepared {
                Some(prepared) => client.query(&prepared.statement, &prepared.values()).await,
                None => client.query_typed(text, &params).await,
            };
            if shortened {
                // If this fails the connection is broken, and the pool
                // drops it.
                let _ = client.batch_execute(&set(LOCK_TIMEOUT)).await;
            }
            rows.map_err(StatementError::Failed)?
        }
        Some(settings) => {
            let begin = format!("BEGIN; {settings}");
            let (began, rows, committed) = futures_util::future::join3(
                client.batch_execute(&begin),
                client.query_typed(text, &params),
                client.batch_execute("COMMIT"),
            )
            .await;
            began.map_err(StatementError::NotRun)?;
            let rows = rows.map_err(StatementError::Failed)?;
            committed.map_err(StatementError::Failed)?;
            rows
        }
    };
    let mut claimed = vec![false; rows.len()];
    for row in claimed_rows {
        let n: i32 = row.get(0);
        claimed[usize::try_from(n).expect("a row's number")] = true;
    }
    Ok(claimed)
}

/// Why a statement of [`execute`] gave no answer.
pub(super) enum StatementError {
    /// It never ran (the transaction around it could not begin).
    NotRun(tokio_postgres::Error),
    /// PostgreSQL answered with an error, or the connection broke while it
    /// ran (no SQLSTATE: its outcome is unknown).
    Failed(tokio_postgres::Error),
}
