//! Each operation's business change in PostgreSQL, inside the transaction
//! that records its key: charges (in one phase, in one statement with the
//! claim, or started and finished around the provider) and reservations;
//! and the shop's reads. The operations' [`exactly_once::Operation`] impls
//! (in [`crate::operation`]) call these.

use crate::charge_columns;
use crate::domain::{Charge, ChargeRow, ChargeStatus, NewReservation, Reservation};
use crate::operation;
use crate::operation::charge::{self, FinishCharge, RecordCharge, StartCharge};
use exactly_once::store::postgres::Conn;
use exactly_once::store::postgres::{enqueue, Insert, OneStatement, Shape, Sql, Transaction};
use exactly_once::store::Result;
use exactly_once::{PhaseEnd, RunContext};
use tokio_postgres::types::Type;

/// A charge, from a row of [`charge_columns!`].
pub(crate) fn charge(row: &exactly_once::store::postgres::PgRow) -> Charge {
    let columns: ChargeRow = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
        row.get(6),
        row.get(7),
        row.get(8),
    );
    Charge::from(columns)
}

/// A charge's row with its key's claim, and its receipt in the outbox when
/// it has one.
static CHARGE: Shape = Shape::inserts(&[
    Insert::into(
        "charges",
        &[
            ("id", "text"),
            ("amount", "bigint"),
            ("currency", "text"),
            ("description", "text"),
            ("status", "text"),
            ("payment_method", "text"),
            ("receipt_email", "text"),
            ("created", "bigint"),
        ],
    )
    .caller("caller"),
    Insert::into(
        "outbox",
        &[
            ("message_id", "text"),
            ("recipient", "text"),
            ("subject", "text"),
            ("body", "text"),
        ],
    )
    .now(&["next_attempt_at"])
    .only_with("message_id")
    .ignoring_conflicts_on("message_id"),
]);

pub(crate) fn record_charge_one_statement(this: &RecordCharge) -> Option<OneStatement> {
    let charge = &this.charge;
    let mut row = CHARGE.row();
    row.set("id", &charge.id)
        .set("amount", charge.amount.get())
        .set("currency", &charge.currency)
        .set_optional("description", charge.description.as_ref())
        .set("status", charge.status.as_str())
        .set("payment_method", &charge.payment_method)
        .set_optional("receipt_email", charge.receipt_email.as_ref())
        .set("created", charge.created);
    if let Some(receipt) = &this.receipt {
        row.set("message_id", &receipt.message_id)
            .set("recipient", &receipt.recipient)
            .set("subject", &receipt.subject)
            .set("body", &receipt.body);
    }
    Some(row.answer(this.response.clone()))
}

pub(crate) async fn record_charge(
    this: &RecordCharge,
    tx: &Transaction<'_>,
    at: &RunContext<'_>,
) -> Result<PhaseEnd> {
    insert_charge(tx, at, &this.charge).await?;
    if let Some(receipt) = &this.receipt {
        enqueue(tx, &receipt.message()).await?;
    }
    Ok(PhaseEnd::Finished(this.response.clone()))
}

pub(crate) async fn start_charge(
    this: &StartCharge,
    tx: &Transaction<'_>,
    at: &RunContext<'_>,
) -> Result<PhaseEnd> {
    let charge = Charge::new(
        this.request.clone(),
        ChargeStatus::Pending,
        at.now_ms / 1000,
    );
    insert_charge(tx, at, &charge).await?;
    Ok(StartCharge::stop(&charge))
}

pub(crate) async fn finish_charge(
    this: &FinishCharge,
    tx: &Transaction<'_>,
    at: &RunContext<'_>,
) -> Result<PhaseEnd> {
    const FINISH: Sql = Sql::new(
        concat!(
            "UPDATE charges SET status = $3, provider_charge = $4
             WHERE caller = $1 AND id = $2 RETURNING ",
            charge_columns!()
        ),
        &[Type::BYTEA, Type::TEXT, Type::TEXT, Type::TEXT],
    );
    let row = FINISH
        .query_one(
            &**tx,
            &[
                &at.caller,
                &this.charge.as_ref(),
                &this.verdict.status().as_str(),
                &this.verdict.provider_charge().map(AsRef::<str>::as_ref),
            ],
        )
        .await?;
    let charge = charge(&row);
    let (step, receipt) = charge::finished(&charge, &this.verdict, this.receipts);
    if let Some(receipt) = receipt {
        enqueue(tx, &receipt.message()).await?;
    }
    Ok(step)
}

async fn insert_charge(tx: &Transaction<'_>, at: &RunContext<'_>, charge: &Charge) -> Result<()> {
    const INSERT: Sql = Sql::new(
        "INSERT INTO charges (caller, id, amount, currency, description, status,
                              payment_method, receipt_email, created)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            Type::BYTEA,
            Type::TEXT,
            Type::INT8,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::INT8,
        ],
    );
    INSERT
        .execute(
            &**tx,
            &[
                &at.caller,
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

/// Takes `$1` of item `$2` if that many are left.
const TAKE_STOCK: Sql = Sql::new(
    "UPDATE inventory SET available = available - $1
     WHERE item_id = $2 AND available >= $1",
    &[Type::INT8, Type::TEXT],
);

const INSERT_RESERVATION: Sql = Sql::new(
    "INSERT INTO reservations (id, caller, item_id, quantity, created)
     VALUES ($1, $2, $3, $4, $5)",
    &[Type::TEXT, Type::BYTEA, Type::TEXT, Type::INT8, Type::INT8],
);

pub(crate) async fn new_reservation(
    this: &NewReservation,
    tx: &Transaction<'_>,
    at: &RunContext<'_>,
) -> Result<PhaseEnd> {
    // The guard is in the UPDATE: the row lock serialises buyers and
    // the condition is re-checked after the wait.
    let taken = TAKE_STOCK
        .execute(&**tx, &[&this.quantity.get(), &this.item_id.as_ref()])
        .await?;
    if taken == 0 {
        let available = available(&**tx, &this.item_id).await?;
        return Ok(PhaseEnd::Finished(operation::reservation::refused(
            this, available,
        )));
    }
    let reservation = Reservation::new(this.clone());
    INSERT_RESERVATION
        .execute(
            &**tx,
            &[
                &reservation.id,
                &at.caller,
                &reservation.item_id.as_ref(),
                &reservation.quantity.get(),
                &(at.now_ms / 1000),
            ],
        )
        .await?;
    Ok(PhaseEnd::Finished(operation::reservation::reserved(
        &reservation,
    )))
}

/// The stock left of an item, `None` if there is no such item.
pub(crate) async fn available(
    client: &impl Conn,
    item: &crate::domain::ItemId,
) -> Result<Option<i64>> {
    const AVAILABLE: Sql = Sql::new(
        "SELECT available FROM inventory WHERE item_id = $1",
        &[Type::TEXT],
    );
    let row = AVAILABLE.query_opt(client, &[&item.as_ref()]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// One page of a caller's charges, newest first (one row more than the
/// page, see [`ChargeQuery`](super::ChargeQuery)).
pub(crate) async fn charges(
    client: &impl Conn,
    query: &super::ChargeQuery<'_>,
) -> Result<Vec<Charge>> {
    // Ids are compared as bytes: the column's collation is "C".
    const PAGE: Sql = Sql::new(
        concat!(
            "SELECT ",
            charge_columns!(),
            " FROM charges WHERE caller = $1 AND id < $2 ORDER BY id DESC LIMIT $3"
        ),
        &[Type::BYTEA, Type::TEXT, Type::INT8],
    );
    let rows = PAGE
        .query(client, &[&query.caller, &query.before(), &query.rows()])
        .await?;
    Ok(rows.iter().map(charge).collect())
}
