//! The SQL of the writes: the keyed protocol (claim the key, or find its
//! record and decide; later phases under a lease), each operation's
//! business change, and the outbox. Every time is the database's `now()`.

use super::{cached, classify, exec, Run};
use crate::domain::{Caller, Charge, ChargeRow, ChargeStatus, Fingerprint, IdempotencyKey};
use crate::domain::{NewReservation, Reservation};
use crate::idempotency::record::{Lease, Record, RecoveryPoint, Step, StoredResponse};
use crate::operation;
use crate::operation::charge::{self, FinishCharge, RecordCharge, StartCharge};
use crate::operation::receipt::Receipt;
use crate::store::StoreError;
use crate::store::{
    Advanced, Execution, Finish, Finished, IdempotentRequest, Operation, RunContext,
};
use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Transaction};
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// The times one call works with: the process's clock only for the
/// `created` seconds of new rows; every expiry and lease is the database's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// Unix milliseconds, this process's clock.
    pub(super) now_ms: i64,
    /// `--key-ttl`, seconds.
    pub(super) ttl_secs: f64,
    /// `--operation-lease`, seconds.
    pub(super) lease_secs: f64,
}

/// A key's record columns, in the order [`record`] and [`execute`] read.
const RECORD_COLUMNS: &str = "fingerprint, status, headers, body";

/// A new key's claim that also records its (already known) answer: the
/// start of [`OneStatement`]'s statement. A finished, expired record counts
/// as absent: the claim replaces it. A live one is left alone (and its
/// transaction, if still running, waited for).
const CLAIM_FINISHED: &str = "INSERT INTO idempotency_keys
       (caller, key, fingerprint, recovery_point, status, headers, body, created_at, expires_at)
     VALUES ($1, $2, $3, 'finished', $4, $5, $6, now(), now() + $7 * interval '1 second')
     ON CONFLICT (caller, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'finished', state = NULL,
           lease_token = NULL, leased_until = NULL, status = EXCLUDED.status,
           headers = EXCLUDED.headers, body = EXCLUDED.body, created_at = EXCLUDED.created_at,
           expires_at = EXCLUDED.expires_at
       WHERE idempotency_keys.recovery_point = 'finished'
         AND idempotency_keys.expires_at <= now()
     RETURNING 1";

/// An operation whose answer is known before the database is touched and
/// whose change cannot be refused (a charge without a provider) runs as
/// part of its key's claim: one statement, one round trip, committed on its
/// own. `ctes` are data-modifying CTEs that insert `FROM claim` (so only
/// when the key was claimed), numbering their parameters from `$8`.
pub struct OneStatement {
    /// `name AS (INSERT … SELECT … FROM claim)`, comma-separated.
    pub ctes: String,
    /// `$8` onwards.
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// The answer recorded with the key.
    pub response: StoredResponse,
}

/// Claims the key (waiting for a transaction that holds it) and runs the
/// operation's first phase, or finds the key's record and decides.
pub(super) async fn execute(
    client: &mut deadpool_postgres::Object,
    request: &IdempotentRequest,
    operation: &dyn Operation,
    finish: Finish,
    clock: Clock,
) -> Result<Execution, StoreError> {
    let context = RunContext {
        caller: &request.caller,
        now_ms: clock.now_ms,
    };
    if finish == Finish::Commit {
        if let Some(one) = operation.one_statement(&context) {
            return execute_one_statement(client, request, one, clock).await;
        }
    }
    let tx = client.transaction().await.map_err(classify)?;
    let (ttl_secs, lease_secs, now_ms) = (clock.ttl_secs, clock.lease_secs, clock.now_ms);
    let caller = &request.caller.as_bytes()[..];
    let key = request.key.as_ref();
    // A finished, expired record counts as absent: the claim replaces it.
    let claimed = tx
        .query_opt(
            &cached(
                &tx,
                "INSERT INTO idempotency_keys
                   (caller, key, fingerprint, recovery_point, created_at, expires_at)
                 VALUES ($1, $2, $3, 'claimed', now(), now() + $4 * interval '1 second')
                 ON CONFLICT (caller, key) DO UPDATE
                   SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'claimed',
                       state = NULL, lease_token = NULL, leased_until = NULL, status = NULL,
                       headers = NULL, body = NULL, created_at = EXCLUDED.created_at,
                       expires_at = EXCLUDED.expires_at
                   WHERE idempotency_keys.recovery_point = 'finished'
                     AND idempotency_keys.expires_at <= now()
                 RETURNING 1",
            )
            .await?,
            &[
                &caller,
                &key,
                &&request.fingerprint.as_bytes()[..],
                &ttl_secs,
            ],
        )
        .await;
    let claimed = match in_use_or(claimed)? {
        None => return Ok(Execution::InUse),
        Some(claimed) => claimed.is_some(),
    };
    if !claimed {
        // The key's record is live: its transaction committed (the claim
        // waited for it), so read it and decide.
        let execution = decide(&tx, request, clock).await?;
        commit(tx).await?;
        return Ok(execution);
    }

    let context = RunContext {
        caller: &request.caller,
        now_ms,
    };
    let step = operation.run_postgres(&tx, &context).await?;
    let execution = match step {
        Step::Finished(response) => {
            record_response(&tx, &request.caller, &request.key, &response).await?;
            Execution::Ran(response)
        }
        Step::Stopped(point, state) => {
            let token = Lease::new_token();
            exec(
                &tx,
                "UPDATE idempotency_keys SET recovery_point = $3, state = $4, lease_token = $5,
                        leased_until = now() + $6 * interval '1 second'
                 WHERE caller = $1 AND key = $2",
                &[
                    &caller,
                    &key,
                    &point.as_str(),
                    &state,
                    &&token[..],
                    &lease_secs,
                ],
            )
            .await?;
            Execution::Stopped(Lease {
                caller: request.caller,
                key: request.key.clone(),
                token,
                point,
                state,
            })
        }
    };
    match finish {
        Finish::RollBack => {
            tx.rollback().await.map_err(classify)?;
            Ok(Execution::RolledBack)
        }
        Finish::Commit => {
            commit(tx).await?;
            Ok(execution)
        }
    }
}

/// A live record of the key: finished (replay or refuse), or stopped at a
/// recovery point (refuse another request, wait for the lease's holder,
/// or take an abandoned operation over).
async fn decide(
    tx: &impl GenericClient,
    request: &IdempotentRequest,
    clock: Clock,
) -> Result<Execution, StoreError> {
    let caller = &request.caller.as_bytes()[..];
    let row = tx
        .query_one(
            &cached(
                tx,
                &format!(
                    "SELECT {RECORD_COLUMNS}, recovery_point, state, lease_token,
                            coalesce(leased_until > now(), false),
                            greatest(extract(epoch FROM expires_at - now()), 0)::float8
                     FROM idempotency_keys WHERE caller = $1 AND key = $2"
                ),
            )
            .await?,
            &[&caller, &request.key.as_ref()],
        )
        .await
        .map_err(classify)?;
    let existing = record(&row)?;
    let Some(point) = RecoveryPoint::from_stored(row.get(4)) else {
        return Ok(Execution::Found(Finished {
            record: existing,
            life: Duration::from_secs_f64(row.get(8)),
        }));
    };
    if existing.fingerprint != request.fingerprint {
        return Ok(Execution::Mismatch);
    }
    if row.get::<_, bool>(7) {
        return Ok(Execution::InUse);
    }
    let old: Option<&[u8]> = row.get(6);
    let token = Lease::new_token();
    let taken = tx
        .execute(
            &cached(
                tx,
                "UPDATE idempotency_keys
                 SET lease_token = $3, leased_until = now() + $4 * interval '1 second'
                 WHERE caller = $1 AND key = $2 AND lease_token IS NOT DISTINCT FROM $5
                   AND recovery_point <> 'finished'",
            )
            .await?,
            &[
                &caller,
                &request.key.as_ref(),
                &&token[..],
                &clock.lease_secs,
                &old,
            ],
        )
        .await;
    Ok(match in_use_or(taken)? {
        Some(1) => Execution::Resumed(Lease {
            caller: request.caller,
            key: request.key.clone(),
            token,
            point,
            state: row.get::<_, Option<String>>(5).unwrap_or_default(),
        }),
        _ => Execution::InUse,
    })
}

/// The one-statement path of [`OneStatement`]: claimed, the answer is the
/// one recorded; not claimed, the key's record decides.
async fn execute_one_statement(
    client: &deadpool_postgres::Object,
    request: &IdempotentRequest,
    one: OneStatement,
    clock: Clock,
) -> Result<Execution, StoreError> {
    let sql = format!(
        "WITH claim AS ({CLAIM_FINISHED}), {} SELECT count(*) FROM claim",
        one.ctes
    );
    let response = &one.response;
    let status = response.status as i16;
    let headers = response.encoded_headers();
    let body = &response.body[..];
    let caller = &request.caller.as_bytes()[..];
    let key: &str = request.key.as_ref();
    let fingerprint = &request.fingerprint.as_bytes()[..];
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &caller,
        &key,
        &fingerprint,
        &status,
        &headers,
        &body,
        &clock.ttl_secs,
    ];
    params.extend(one.params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
    let statement = cached(client, &sql).await?;
    let claimed = match client.query_one(&statement, &params).await {
        // The statement commits on its own: a connection that breaks while
        // it runs leaves its outcome unknown, as during a COMMIT.
        Err(e) if e.code().is_none() => {
            return Err(StoreError::outcome_unknown(
                "the connection broke during a statement that commits on its own",
            )
            .caused_by(e))
        }
        claimed => claimed,
    };
    match in_use_or(claimed)? {
        None => Ok(Execution::InUse),
        Some(row) if row.get::<_, i64>(0) == 1 => Ok(Execution::Ran(one.response)),
        Some(_) => decide(client, request, clock).await,
    }
}

/// Commits. A connection that breaks during the commit leaves its outcome
/// unknown: it may have committed. That is never answered as "nothing was
/// done" ([`StoreErrorKind::OutcomeUnknown`](crate::store::StoreErrorKind::OutcomeUnknown)): the retry learns which.
async fn commit(tx: Transaction<'_>) -> Result<(), StoreError> {
    tx.commit().await.map_err(|e| {
        if e.code().is_none() {
            StoreError::outcome_unknown("the connection broke during COMMIT").caused_by(e)
        } else {
            classify(e)
        }
    })
}

/// `None` when the statement gave up waiting for a lock another
/// transaction holds (`lock_timeout`): the key is in use.
fn in_use_or<T>(result: Result<T, tokio_postgres::Error>) -> Result<Option<T>, StoreError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(None),
        Err(e) => Err(classify(e)),
    }
}

async fn record_response(
    tx: &Transaction<'_>,
    caller: &Caller,
    key: &IdempotencyKey,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    exec(
        tx,
        "UPDATE idempotency_keys
         SET recovery_point = 'finished', state = NULL, lease_token = NULL, leased_until = NULL,
             status = $3, headers = $4, body = $5
         WHERE caller = $1 AND key = $2",
        &[
            &&caller.as_bytes()[..],
            &key.as_ref(),
            &(response.status as i16),
            &response.encoded_headers(),
            &&response.body[..],
        ],
    )
    .await?;
    Ok(())
}

/// The next phase of the lease's operation, if the lease is still its
/// holder's (the row stays locked until the commit, so nobody takes it
/// over meanwhile); records how the phase ended.
pub(super) async fn advance(
    tx: Transaction<'_>,
    lease: &Lease,
    phase: &dyn Operation,
    lease_secs: f64,
    now_ms: i64,
) -> Result<Advanced, StoreError> {
    let caller = &lease.caller.as_bytes()[..];
    let held = tx
        .query_opt(
            &cached(
                &tx,
                "SELECT 1 FROM idempotency_keys
                 WHERE caller = $1 AND key = $2 AND lease_token = $3
                   AND recovery_point <> 'finished'
                 FOR UPDATE",
            )
            .await?,
            &[&caller, &lease.key.as_ref(), &&lease.token[..]],
        )
        .await;
    match in_use_or(held)? {
        Some(Some(_)) => {}
        _ => return Ok(Advanced::LeaseLost),
    }
    let context = RunContext {
        caller: &lease.caller,
        now_ms,
    };
    let advanced = match phase.run_postgres(&tx, &context).await? {
        Step::Finished(response) => {
            record_response(&tx, &lease.caller, &lease.key, &response).await?;
            Advanced::Finished(response)
        }
        Step::Stopped(point, state) => {
            exec(
                &tx,
                "UPDATE idempotency_keys SET recovery_point = $3, state = $4,
                        leased_until = now() + $5 * interval '1 second'
                 WHERE caller = $1 AND key = $2",
                &[
                    &caller,
                    &lease.key.as_ref(),
                    &point.as_str(),
                    &state,
                    &lease_secs,
                ],
            )
            .await?;
            Advanced::Stopped(Lease {
                point,
                state,
                ..lease.clone()
            })
        }
    };
    commit(tx).await?;
    Ok(advanced)
}

/// Takes over the key's abandoned operation (its lease ran out).
pub(super) async fn take_over(
    client: &impl GenericClient,
    caller: &Caller,
    key: &IdempotencyKey,
    lease_secs: f64,
) -> Result<Option<Lease>, StoreError> {
    let token = Lease::new_token();
    let row = client
        .query_opt(
            &cached(
                client,
                "UPDATE idempotency_keys
                 SET lease_token = $3, leased_until = now() + $4 * interval '1 second'
                 WHERE caller = $1 AND key = $2 AND recovery_point <> 'finished'
                   AND leased_until <= now()
                 RETURNING recovery_point, state",
            )
            .await?,
            &[
                &&caller.as_bytes()[..],
                &key.as_ref(),
                &&token[..],
                &lease_secs,
            ],
        )
        .await;
    Ok(in_use_or(row)?.flatten().and_then(|row| {
        Some(Lease {
            caller: *caller,
            key: key.clone(),
            token,
            point: RecoveryPoint::from_stored(row.get(0))?,
            state: row.get::<_, Option<String>>(1).unwrap_or_default(),
        })
    }))
}

/// A record from a row whose first columns are [`RECORD_COLUMNS`] (the
/// status is 0 for an unfinished record).
pub(super) fn record(row: &tokio_postgres::Row) -> Result<Record, StoreError> {
    let fingerprint: &[u8] = row.get(0);
    let fingerprint: [u8; 32] = fingerprint
        .try_into()
        .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))?;
    let status: Option<i16> = row.get(1);
    let body: Option<&[u8]> = row.get(3);
    Ok(Record {
        fingerprint: Fingerprint::from_bytes(fingerprint),
        response: StoredResponse::from_stored(
            status.unwrap_or(0) as u16,
            row.get(2),
            bytes::Bytes::copy_from_slice(body.unwrap_or_default()),
        ),
    })
}

/// A charge's columns, in the order [`charge_row`] reads them.
pub(super) const CHARGE_COLUMNS: &str =
    "id, amount, currency, description, status, created, provider_charge, receipt_email, \
     payment_method";

/// A row of [`CHARGE_COLUMNS`].
pub(super) fn charge_row(row: &tokio_postgres::Row) -> ChargeRow {
    ChargeRow {
        id: row.get(0),
        amount: row.get(1),
        currency: row.get(2),
        description: row.get(3),
        status: row.get(4),
        created: row.get(5),
        provider_charge: row.get(6),
        receipt_email: row.get(7),
        payment_method: row.get(8),
    }
}

#[async_trait]
impl Run for RecordCharge {
    fn one_statement(&self, at: &RunContext<'_>) -> Option<OneStatement> {
        let charge = Charge::new(
            self.request.clone(),
            ChargeStatus::Succeeded,
            at.now_ms / 1000,
        );
        let mut ctes = String::from(
            "charge AS (INSERT INTO charges (caller, id, amount, currency, description, status,
                                        payment_method, receipt_email, created)
                        SELECT $1, $8::text, $9::bigint, $10::text, $11::text, $12::text,
                               $13::text, $14::text, $15::bigint FROM claim)",
        );
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![
            Box::new(charge.id.to_string()),
            Box::new(charge.amount.get()),
            Box::new(charge.currency.to_string()),
            Box::new(charge.description.as_ref().map(ToString::to_string)),
            Box::new(charge.status.as_str()),
            Box::new(charge.payment_method.to_string()),
            Box::new(charge.receipt_email.as_ref().map(ToString::to_string)),
            Box::new(charge.created),
        ];
        if let Some(receipt) = Receipt::for_charge(&charge).filter(|_| self.receipts) {
            ctes.push_str(
                ", receipt AS (INSERT INTO outbox (message_id, recipient, subject, body,
                                                  next_attempt_at)
                               SELECT $16::text, $17::text, $18::text, $19::text, now() FROM claim
                               ON CONFLICT (message_id) DO NOTHING)",
            );
            params.extend([
                Box::new(receipt.message_id) as Box<dyn ToSql + Sync + Send>,
                Box::new(receipt.recipient),
                Box::new(receipt.subject),
                Box::new(receipt.body),
            ]);
        }
        Some(OneStatement {
            ctes,
            params,
            response: charge::created(&charge),
        })
    }

    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<Step, StoreError> {
        let charge = Charge::new(
            self.request.clone(),
            ChargeStatus::Succeeded,
            at.now_ms / 1000,
        );
        insert_charge(tx, at, &charge).await?;
        if self.receipts {
            if let Some(receipt) = Receipt::for_charge(&charge) {
                enqueue(tx, &receipt).await?;
            }
        }
        Ok(Step::Finished(charge::created(&charge)))
    }
}

#[async_trait]
impl Run for StartCharge {
    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<Step, StoreError> {
        let charge = Charge::new(
            self.request.clone(),
            ChargeStatus::Pending,
            at.now_ms / 1000,
        );
        insert_charge(tx, at, &charge).await?;
        Ok(StartCharge::stop(&charge))
    }
}

#[async_trait]
impl Run for FinishCharge {
    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<Step, StoreError> {
        let row = tx
            .query_one(
                &cached(
                    tx,
                    &format!(
                        "UPDATE charges SET status = $3, provider_charge = $4
                         WHERE caller = $1 AND id = $2 RETURNING {CHARGE_COLUMNS}"
                    ),
                )
                .await?,
                &[
                    &&at.caller.as_bytes()[..],
                    &self.charge.as_ref(),
                    &self.verdict.status().as_str(),
                    &self.verdict.provider_charge().map(AsRef::<str>::as_ref),
                ],
            )
            .await
            .map_err(classify)?;
        let charge = Charge::from(charge_row(&row));
        let (step, receipt) = charge::finished(&charge, &self.verdict, self.receipts);
        if let Some(receipt) = receipt {
            enqueue(tx, &receipt).await?;
        }
        Ok(step)
    }
}

async fn insert_charge(
    tx: &Transaction<'_>,
    at: &RunContext<'_>,
    charge: &Charge,
) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO charges (caller, id, amount, currency, description, status,
                              payment_method, receipt_email, created)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &&at.caller.as_bytes()[..],
            &charge.id.as_ref(),
            &charge.amount.get(),
            &charge.currency.as_ref(),
            &charge.description.as_ref().map(AsRef::<str>::as_ref),
            &charge.status.as_str(),
            &charge.payment_method.as_ref(),
            &charge.receipt_email.as_ref().map(AsRef::<str>::as_ref),
            &charge.created,
        ],
    )
    .await?;
    Ok(())
}

/// Writes a receipt to the outbox, due now; never twice for one charge.
async fn enqueue(tx: &Transaction<'_>, receipt: &Receipt) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO outbox (message_id, recipient, subject, body, next_attempt_at)
         VALUES ($1, $2, $3, $4, now()) ON CONFLICT (message_id) DO NOTHING",
        &[
            &receipt.message_id,
            &receipt.recipient,
            &receipt.subject,
            &receipt.body,
        ],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl Run for NewReservation {
    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<Step, StoreError> {
        // The guard is in the UPDATE: the row lock serialises buyers and
        // the condition is re-checked after the wait.
        let taken = exec(
            tx,
            "UPDATE inventory SET available = available - $1
             WHERE item_id = $2 AND available >= $1",
            &[&self.quantity.get(), &self.item_id.as_ref()],
        )
        .await?;
        if taken == 0 {
            let available = super::available(tx, &self.item_id).await?;
            return Ok(Step::Finished(operation::reservation::refused(
                self, available,
            )));
        }
        let reservation = Reservation::new(self.clone());
        exec(
            tx,
            "INSERT INTO reservations (id, caller, item_id, quantity, created)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &reservation.id,
                &&at.caller.as_bytes()[..],
                &reservation.item_id.as_ref(),
                &reservation.quantity.get(),
                &(at.now_ms / 1000),
            ],
        )
        .await?;
        Ok(Step::Finished(operation::reservation::reserved(
            &reservation,
        )))
    }
}
