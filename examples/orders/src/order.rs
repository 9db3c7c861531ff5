//! `POST /orders`: the one keyed operation, in two phases around a charge
//! at the payment provider. The first records the order `pending` and
//! stops at [`ORDER_PLACED`]; the step charges the card with the run's
//! downstream key as its `Idempotency-Key` (so a step run again, after a
//! crash, by a retry or by the completer, gets the provider's first answer,
//! never a second charge); the last records the provider's verdict and the
//! answer in one commit. Both phases write with sqlx on the engine's
//! transaction.

use async_trait::async_trait;
use exactly_once::postgres::sqlx::SqlxOperation;
use exactly_once::{
    Caller, Error, Lease, Operation, PhaseEnd, RunContext, Sqlx, StepUnavailable, Steps,
    StoredResponse,
};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The recovery point: the order is recorded `pending`; the provider has
/// not (as far as we know) charged it.
pub(crate) const ORDER_PLACED: &str = "order_placed";

/// The first phase: `{"item": "…", "amount": 1999}` recorded as `pending`.
#[derive(Debug)]
pub(crate) struct PlaceOrder {
    item: String,
    amount: i64,
}

/// A body this service refuses: 400 with why.
#[derive(Debug)]
pub(crate) struct BadOrder(pub(crate) &'static str);

impl PlaceOrder {
    /// The order a body asks for.
    pub(crate) fn parse(body: &serde_json::Value) -> Result<Self, BadOrder> {
        let item = body["item"]
            .as_str()
            .filter(|item| !item.is_empty() && item.len() <= 200)
            .ok_or(BadOrder(
                "`item` must be a non-empty string of at most 200 bytes",
            ))?;
        let amount = body["amount"]
            .as_i64()
            .filter(|amount| (1..=100_000_000).contains(amount))
            .ok_or(BadOrder(
                "`amount` must be an integer from 1 to 100000000 (minor units)",
            ))?;
        Ok(Self {
            item: item.to_owned(),
            amount,
        })
    }
}

/// What the step resumes from.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Placed {
    /// The order's id.
    pub(crate) id: String,
    /// What the provider is asked to charge.
    pub(crate) amount: i64,
}

impl SqlxOperation for PlaceOrder {
    async fn run(
        &self,
        conn: &mut sqlx::PgConnection,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        // The order's id is the operation's: a run that a restore made
        // the database forget writes the same row again.
        let id = format!("ord_{}", &at.downstream_key()[..24]);
        sqlx::query(
            "INSERT INTO orders (id, caller, idempotency_key, item, amount, status)
             VALUES ($1, $2, $3, $4, $5, 'pending') ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id)
        .bind(&at.caller.as_bytes()[..])
        .bind(at.key.as_ref())
        .bind(&self.item)
        .bind(self.amount)
        .execute(&mut *conn)
        .await?;
        let placed = Placed {
            id,
            amount: self.amount,
        };
        Ok(PhaseEnd::stop(ORDER_PLACED, &placed))
    }
}

/// The last phase: the provider's verdict recorded, and the answer.
#[derive(Debug)]
pub(crate) struct FinishOrder {
    id: String,
    verdict: Verdict,
}

/// What the provider said, finally.
#[derive(Debug)]
enum Verdict {
    Charged(String),
    Declined(String),
}

impl SqlxOperation for FinishOrder {
    async fn run(
        &self,
        conn: &mut sqlx::PgConnection,
        _at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        let (status, charge) = match &self.verdict {
            Verdict::Charged(charge) => ("paid", Some(charge.as_str())),
            Verdict::Declined(_) => ("declined", None),
        };
        let order: OrderRow = sqlx::query_as::<_, Columns>(
            "UPDATE orders SET status = $2, provider_charge = $3 WHERE id = $1
             RETURNING id, item, amount, status, provider_charge, idempotency_key",
        )
        .bind(&self.id)
        .bind(status)
        .bind(charge)
        .fetch_one(&mut *conn)
        .await?
        .into();
        let response = match &self.verdict {
            Verdict::Charged(_) => StoredResponse::new(
                StatusCode::CREATED,
                "application/json",
                serde_json::to_vec(&order).expect("an order serialises"),
            ),
            Verdict::Declined(code) => exactly_once::Problem::new(
                StatusCode::PAYMENT_REQUIRED,
                "card-declined",
                "Card declined",
                &format!("the card was declined ({code}); nothing was charged"),
            )
            .stored(),
        };
        Ok(PhaseEnd::Finished(response))
    }
}

/// An order as `GET /orders` and the 201 show it.
#[derive(Debug, Serialize)]
pub(crate) struct OrderRow {
    /// `ord_…`.
    pub(crate) id: String,
    /// What was ordered.
    pub(crate) item: String,
    /// Minor units.
    pub(crate) amount: i64,
    /// `pending`, `paid` or `declined`.
    pub(crate) status: String,
    /// The provider's charge, once paid.
    pub(crate) provider_charge: Option<String>,
    /// The key of the request that placed it.
    pub(crate) idempotency_key: String,
}

/// An order's columns, in [`OrderRow`]'s order.
type Columns = (String, String, i64, String, Option<String>, String);

impl From<Columns> for OrderRow {
    fn from((id, item, amount, status, provider_charge, idempotency_key): Columns) -> Self {
        Self {
            id,
            item,
            amount,
            status,
            provider_charge,
            idempotency_key,
        }
    }
}

/// `caller`'s orders, oldest first.
pub(crate) async fn list(
    pool: &sqlx::PgPool,
    caller: &Caller,
) -> Result<Vec<OrderRow>, sqlx::Error> {
    let rows: Vec<Columns> = sqlx::query_as(
        "SELECT id, item, amount, status, provider_charge, idempotency_key FROM orders
         WHERE caller = $1 ORDER BY created_at, id",
    )
    .bind(&caller.as_bytes()[..])
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(OrderRow::from).collect())
}

/// Why the provider's client could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProviderSetupError {
    /// The trusted roots could not be read (`SSL_CERT_FILE`).
    #[error("cannot read the trusted certificates: {0}")]
    Roots(#[from] exactly_once::tls::TlsError),
    /// The HTTP client could not be built.
    #[error("cannot build the provider's HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The step at [`ORDER_PLACED`]: the charge at the provider.
#[derive(Debug, Clone)]
pub(crate) struct ProviderSteps {
    http: reqwest::Client,
    url: String,
}

impl ProviderSteps {
    /// The provider at `url` (`http://`, or `https://` trusting what the
    /// machine trusts: the platform's roots and `SSL_CERT_FILE`, through
    /// the engine's `tls`), each call bounded by `timeout`.
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Self, ProviderSetupError> {
        let roots = exactly_once::tls::trusted_roots()?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(exactly_once::tls::client_config(roots))
            .timeout(timeout)
            .build()?;
        let url = url.trim_end_matches('/').to_owned();
        Ok(Self { http, url })
    }

    /// Charges `placed` under `key`: the verdict, or why there is none yet.
    async fn charge(&self, key: &str, placed: &Placed) -> Result<Verdict, Error> {
        let sent = self
            .http
            .post(format!("{}/v1/charges", self.url))
            .header("Idempotency-Key", key)
            .json(&json!({
                "amount": placed.amount,
                "currency": "usd",
                "payment_method": "pm_card_visa",
                "metadata": { "order": placed.id },
            }))
            .send()
            .await;
        let response =
            sent.map_err(|e| unavailable(format!("the provider did not answer: {e}")))?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        match status {
            StatusCode::CREATED | StatusCode::OK => match body["id"].as_str() {
                Some(charge) => Ok(Verdict::Charged(charge.to_owned())),
                None => Err(unavailable(format!("the provider's {status} has no id"))),
            },
            StatusCode::PAYMENT_REQUIRED => Ok(Verdict::Declined(
                body["error"]["code"]
                    .as_str()
                    .unwrap_or("declined")
                    .to_owned(),
            )),
            status if status.is_server_error() || status == StatusCode::CONFLICT => {
                Err(unavailable(format!("the provider answered {status}")))
            }
            status => Err(Error::StepFailedForGood(format!(
                "the provider refused the charge: {status} {body}"
            ))),
        }
    }
}

fn unavailable(reason: String) -> Error {
    tracing::warn!(%reason, "no final answer from the provider; the order waits at order_placed");
    Error::StepUnavailable(StepUnavailable::new(
        "provider-unavailable",
        "Payment provider unavailable",
        "the order is placed and the provider has not answered yet; send the same request with \
         the same Idempotency-Key again to get the outcome",
        reason,
    ))
}

#[async_trait]
impl Steps<Sqlx> for ProviderSteps {
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation<Sqlx>>, Error> {
        if lease.point != ORDER_PLACED {
            return Err(Error::internal(format!(
                "an order stopped at {:?}, which this service does not know",
                lease.point
            )));
        }
        let placed: Placed = serde_json::from_str(&lease.state).map_err(|e| {
            Error::StepFailedForGood(format!("a placed order's state is unreadable: {e}"))
        })?;
        let verdict = self.charge(&lease.downstream_key(), &placed).await?;
        Ok(Arc::new(FinishOrder {
            id: placed.id,
            verdict,
        }))
    }

    fn knows(&self, point: &str) -> bool {
        point == ORDER_PLACED
    }
}
