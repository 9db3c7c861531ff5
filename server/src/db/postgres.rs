//! The shop's reads on PostgreSQL: a page of charges, an item's stock. Each
//! operation's own SQL lives with it, in [`crate::operation`].

use crate::charge_columns;
use crate::domain::{Charge, ChargeRow};
use exactly_once::postgres::Result;
use exactly_once::postgres::{Conn, Sql};
use tokio_postgres::types::Type;

/// A charge, from a row of [`charge_columns!`].
pub(crate) fn charge(row: &exactly_once::postgres::PgRow) -> Charge {
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
/// page, see [`ChargeQuery`](super::page::ChargeQuery)).
pub(crate) async fn charges(
    client: &impl Conn,
    query: &super::page::ChargeQuery<'_>,
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
