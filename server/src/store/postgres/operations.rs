//! The SQL of the writes: the keyed protocol in one transaction (delete an
//! expired record, claim the key, run the operation, record its answer)
//! and each operation's business change.

use super::{cached, classify, Run};
use crate::domain::{Charge, Fingerprint, NewCharge, NewReservation, Reservation};
use crate::idempotency::record::{Record, StoredResponse};
use crate::operation;
use crate::store::{Execution, Finish, IdempotentRequest, Operation, RunContext, StoreError};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use deadpool_postgres::Transaction;
use tokio_postgres::error::SqlState;

/// Claims the key (waiting for a transaction that holds it), runs the
/// operation and records its answer, then commits or rolls back.
pub(super) async fn execute(
    tx: Transaction<'_>,
    request: &IdempotentRequest,
    operation: &dyn Operation,
    finish: Finish,
    now: i64,
    ttl_ms: i64,
) -> Result<Execution, StoreError> {
    let caller = &request.caller.as_bytes()[..];
    let key = request.key.as_ref();
    tx.execute(
        &cached(
            &tx,
            "DELETE FROM idempotency_keys WHERE caller = $1 AND key = $2 AND expires_at <= $3",
        )
        .await?,
        &[&caller, &key, &now],
    )
    .await
    .map_err(classify)?;
    let claim = tx
        .query_opt(
            &cached(
                &tx,
                "INSERT INTO idempotency_keys
                   (caller, key, fingerprint, status, headers, body, created_at, expires_at)
                 VALUES ($1, $2, $3, 0, '', ''::bytea, $4, $5)
                 ON CONFLICT (caller, key) DO NOTHING RETURNING id",
            )
            .await?,
            &[
                &caller,
                &key,
                &&request.fingerprint.as_bytes()[..],
                &now,
                &now.saturating_add(ttl_ms),
            ],
        )
        .await;
    let claim = match claim {
        Ok(claim) => claim,
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Ok(Execution::InUse),
        Err(e) => return Err(classify(e)),
    };
    let Some(claim) = claim else {
        // The key is recorded, and committed: the claim waited for it.
        let row = tx
            .query_one(
                &cached(
                    &tx,
                    "SELECT fingerprint, status, headers, body FROM idempotency_keys
                     WHERE caller = $1 AND key = $2",
                )
                .await?,
                &[&caller, &key],
            )
            .await
            .map_err(classify)?;
        return Ok(Execution::Found(
            record(&row)?.verdict(&request.fingerprint),
        ));
    };
    let id: i64 = claim.get(0);

    let context = RunContext {
        caller: &request.caller,
        now_ms: now,
    };
    let response = operation.run_postgres(&tx, &context).await?;
    tx.execute(
        &cached(
            &tx,
            "UPDATE idempotency_keys SET status = $2, headers = $3, body = $4 WHERE id = $1",
        )
        .await?,
        &[
            &id,
            &(response.status as i16),
            &response.encoded_headers(),
            &&response.body[..],
        ],
    )
    .await
    .map_err(classify)?;
    match finish {
        Finish::RollBack => {
            tx.rollback().await.map_err(classify)?;
            Ok(Execution::RolledBack)
        }
        Finish::Commit => {
            tx.commit().await.map_err(classify)?;
            Ok(Execution::Ran(response))
        }
    }
}

/// A record from a row of fingerprint, status, headers, body.
pub(super) fn record(row: &tokio_postgres::Row) -> Result<Record, StoreError> {
    let fingerprint: &[u8] = row.get(0);
    let fingerprint: [u8; 32] = fingerprint
        .try_into()
        .map_err(|_| StoreError::internal("a stored fingerprint is not 32 bytes"))?;
    let status: i16 = row.get(1);
    let body: &[u8] = row.get(3);
    Ok(Record {
        fingerprint: Fingerprint::from_bytes(fingerprint),
        response: StoredResponse::from_stored(
            status as u16,
            row.get(2),
            bytes::Bytes::copy_from_slice(body),
        ),
    })
}

#[async_trait]
impl Run for NewCharge {
    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<StoredResponse, StoreError> {
        let charge = Charge::new(self.clone(), at.now_ms / 1000);
        tx.execute(
            &cached(
                tx,
                "INSERT INTO charges (id, caller, amount, currency, description, created)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .await?,
            &[
                &charge.id.as_ref(),
                &&at.caller.as_bytes()[..],
                &charge.amount.get(),
                &charge.currency.as_ref(),
                &charge.description.as_ref().map(AsRef::as_ref),
                &charge.created,
            ],
        )
        .await
        .map_err(classify)?;
        Ok(operation::charge::created(&charge))
    }
}

#[async_trait]
impl Run for NewReservation {
    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<StoredResponse, StoreError> {
        // The guard is in the UPDATE: the row lock serialises buyers and
        // the condition is re-checked after the wait.
        let taken = tx
            .execute(
                &cached(
                    tx,
                    "UPDATE inventory SET available = available - $1
                     WHERE item_id = $2 AND available >= $1",
                )
                .await?,
                &[&self.quantity.get(), &self.item_id.as_ref()],
            )
            .await
            .map_err(classify)?;
        if taken == 0 {
            let available = super::available(tx, &self.item_id).await?;
            return Ok(operation::reservation::refused(self, available));
        }
        let reservation = Reservation::new(self.clone());
        tx.execute(
            &cached(
                tx,
                "INSERT INTO reservations (id, caller, item_id, quantity, created)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .await?,
            &[
                &reservation.id,
                &&at.caller.as_bytes()[..],
                &reservation.item_id.as_ref(),
                &reservation.quantity.get(),
                &(at.now_ms / 1000),
            ],
        )
        .await
        .map_err(classify)?;
        Ok(operation::reservation::reserved(&reservation))
    }
}

/// Deletes at most `limit` records expired by `now`; instances sweeping at
/// once skip each other's rows.
pub(super) async fn sweep(
    client: &impl GenericClient,
    now: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    client
        .execute(
            "DELETE FROM idempotency_keys WHERE id IN (
               SELECT id FROM idempotency_keys WHERE expires_at <= $1
               ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&now, &i64::from(limit)],
        )
        .await
        .map_err(classify)
}
