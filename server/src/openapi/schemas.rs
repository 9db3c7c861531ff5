//! The JSON bodies and headers of the API as the document describes them,
//! one Rust type each. They exist for the document only: the server
//! parses requests through [`crate::domain`] and writes answers from its
//! own types. The ranges and patterns come from the domain types'
//! constants where those have them; `scripts/schemathesis.sh` checks the
//! real server against these schemas both ways (valid data accepted,
//! invalid data refused, every answer conforming), so a drift shows up as a
//! finding.

use crate::chaos::Fault;
use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// The body of `POST /charges`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    as = NewCharge,
    example = json!({"amount": 1999, "currency": "usd", "description": "cart 42"})
)]
pub struct NewChargeBody {
    /// Minor units (cents).
    #[schema(minimum = 1, maximum = 100_000_000)]
    pub amount: i64,
    /// Three lowercase letters.
    #[schema(pattern = "^[a-z]{3}$", example = "usd")]
    pub currency: String,
    /// What the charge is for: no control characters.
    #[schema(max_length = 500, pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*$")]
    pub description: Option<String>,
    /// The card to charge at the provider (`--psp-url`); default
    /// `pm_card_visa`, and `pm_card_chargeDeclined` is declined (402).
    #[schema(pattern = "^pm_[A-Za-z0-9_]{1,100}$", example = "pm_card_visa")]
    pub payment_method: Option<String>,
    /// Where the receipt goes (`--smtp-url`); no receipt when absent.
    #[schema(format = Email, max_length = 254)]
    pub receipt_email: Option<String>,
}

/// Where a charge stands.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChargeStatus {
    /// Started, the provider's answer not yet recorded (`--psp-url`).
    Pending,
    /// Charged (always, without a provider).
    Succeeded,
    /// Declined by the provider.
    Failed,
}

/// A charge, as `POST /charges` creates it and `GET /charges` lists it.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Charge)]
pub struct ChargeBody {
    /// `ch_` and 32 hex digits, ordered by creation.
    #[schema(pattern = "^ch_[0-9a-f]{32}$")]
    pub id: String,
    /// Minor units.
    #[schema(minimum = 1, maximum = 100_000_000)]
    pub amount: i64,
    /// Three lowercase letters.
    #[schema(pattern = "^[a-z]{3}$")]
    pub currency: String,
    /// The caller's description, or null.
    #[schema(required = true, max_length = 500)]
    pub description: Option<String>,
    /// `succeeded` without a provider.
    pub status: ChargeStatus,
    /// The provider's charge (`pch_…`), or null (no provider, not yet
    /// charged, or declined).
    #[schema(required = true, pattern = "^pch_")]
    pub provider_charge: Option<String>,
    /// Where the receipt goes, or null.
    #[schema(required = true)]
    pub receipt_email: Option<String>,
    /// Unix seconds.
    pub created: i64,
}

/// A page of the caller's charges, newest first.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ChargeList)]
pub struct ChargeListBody {
    /// At most `limit` charges.
    pub data: Vec<ChargeBody>,
    /// Whether older charges follow the last one.
    pub has_more: bool,
}

/// The body of `POST /reservations`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    as = NewReservation,
    example = json!({"item_id": "sku-poster", "quantity": 1})
)]
pub struct NewReservationBody {
    /// An item of the inventory (`sku-tee`, `sku-mug`, `sku-poster`).
    #[schema(pattern = "^[a-z0-9_-]{1,64}$", example = "sku-poster")]
    pub item_id: String,
    /// How many to take.
    #[schema(minimum = 1, maximum = 1000)]
    pub quantity: i64,
}

/// A reservation's state: taken.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReservationStatus {
    /// The stock is held.
    Reserved,
}

/// A reservation, as `POST /reservations` creates it.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Reservation)]
pub struct ReservationBody {
    /// `res_` and 32 hex digits.
    #[schema(pattern = "^res_[0-9a-f]{32}$")]
    pub id: String,
    /// The item taken.
    #[schema(pattern = "^[a-z0-9_-]{1,64}$")]
    pub item_id: String,
    /// How many.
    #[schema(minimum = 1, maximum = 1000)]
    pub quantity: i64,
    /// Always `reserved`.
    pub status: ReservationStatus,
}

/// The stock left of one item.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// The item.
    pub item_id: String,
    /// How many are left; never below zero.
    #[schema(minimum = 0)]
    pub available: i64,
}

/// The server is up, its database reachable and migrated.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// Always `ok`.
    #[schema(pattern = "^ok$")]
    pub status: String,
    /// The PostgreSQL server the check wrote to, `host:port` (with
    /// several hosts in `--database`, the primary it found); `null` on
    /// SQLite or over a Unix socket.
    pub database_host: Option<String>,
}

/// What the demo page needs to know about this server.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Whether `X-Chaos` is honoured (`--chaos`).
    pub chaos: bool,
    /// Whether charges go through a payment provider (`--psp-url`).
    #[schema(nullable = false)]
    pub provider: Option<bool>,
    /// Whether receipts are e-mailed (`--smtp-url`).
    #[schema(nullable = false)]
    pub receipts: Option<bool>,
}

/// Every problem type the API answers with, as `/problems/<slug>`
/// (docs/CONTRACT.md section 3).
// The API test (server/tests/api/openapi.rs) checks this list against
// every `ApiError` and the recorded business refusals.
#[derive(Serialize, ToSchema)]
pub enum ProblemType {
    /// 400: no `Idempotency-Key` on a POST.
    #[serde(rename = "/problems/missing-idempotency-key")]
    MissingIdempotencyKey,
    /// 400: the key is not 1 to 255 visible ASCII characters, bare or quoted.
    #[serde(rename = "/problems/invalid-idempotency-key")]
    InvalidIdempotencyKey,
    /// 401: no caller, or a malformed one.
    #[serde(rename = "/problems/unauthorized")]
    Unauthorized,
    /// 400, 405, 408, 415: the request is not one the API takes.
    #[serde(rename = "/problems/invalid-request")]
    InvalidRequest,
    /// 413: the body is over 64 KiB.
    #[serde(rename = "/problems/payload-too-large")]
    PayloadTooLarge,
    /// 422: the key was used before with another method, path or body.
    #[serde(rename = "/problems/idempotency-key-mismatch")]
    IdempotencyKeyMismatch,
    /// 409: the first request with this key is still running.
    #[serde(rename = "/problems/idempotency-key-in-use")]
    IdempotencyKeyInUse,
    /// 409, recorded: not enough stock.
    #[serde(rename = "/problems/insufficient-inventory")]
    InsufficientInventory,
    /// 402, recorded: the provider declined the card.
    #[serde(rename = "/problems/card-declined")]
    CardDeclined,
    /// 503: the provider could not be reached; a retry resumes.
    #[serde(rename = "/problems/provider-unavailable")]
    ProviderUnavailable,
    /// 424: the operation stopped at a step that cannot succeed by
    /// retrying (the provider refused the charge for good, or it kept
    /// failing past `--attention-after`); it is set aside for an operator,
    /// and every retry of the key gets this answer until it is settled.
    #[serde(rename = "/problems/operation-needs-attention")]
    OperationNeedsAttention,
    /// 404: no such item, or nothing served at the path.
    #[serde(rename = "/problems/not-found")]
    NotFound,
    /// 503: the database cannot be reached, a commit's outcome is unknown,
    /// or a started operation has not finished; retry with the same key.
    #[serde(rename = "/problems/unavailable")]
    Unavailable,
    /// 500: a bug; everything was rolled back.
    #[serde(rename = "/problems/internal")]
    Internal,
    /// 429: the caller sent more than `--caller-rate` requests a second, or
    /// holds `--caller-unfinished` unfinished operations already; nothing
    /// was done, retry after `Retry-After`.
    #[serde(rename = "/problems/rate-limited")]
    RateLimited,
}

/// An RFC 9457 problem: every error answer, `application/problem+json`.
#[derive(Serialize, ToSchema)]
#[schema(as = Problem)]
pub struct ProblemBody {
    /// Which problem.
    #[serde(rename = "type")]
    pub kind: ProblemType,
    /// Short, human, the same for every problem of the type.
    pub title: String,
    /// The HTTP status, as in the status line.
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    /// What happened to this request.
    pub detail: String,
}

/// The `X-Chaos` request header: where the request should fail, as
/// [`Fault::parse`] reads it. Only honoured with `--chaos`.
pub struct ChaosHeader;

impl PartialSchema for ChaosHeader {
    fn schema() -> RefOr<Schema> {
        const MS: &str = "=MS";
        let named = Fault::NAMES.iter().filter(|name| !name.ends_with(MS));
        let delays = Fault::NAMES
            .iter()
            .filter_map(|name| name.strip_suffix(MS))
            .map(|prefix| {
                ObjectBuilder::new()
                    .schema_type(SchemaType::Type(Type::String))
                    .pattern(Some(format!("^{prefix}=[0-9]{{1,6}}$")))
                    .into()
            });
        let named = ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .enum_values(Some(named.copied()));
        delays
            .fold(OneOfBuilder::new().item(named), |one_of, delay: Schema| {
                one_of.item(delay)
            })
            .description(Some(
                "Where the request should fail (docs/CONTRACT.md section 5); MS is \
                 milliseconds, at most 600000. Only honoured with `--chaos`; \
                 ignored otherwise.",
            ))
            .into()
    }
}

impl ToSchema for ChaosHeader {
    fn name() -> std::borrow::Cow<'static, str> {
        "ChaosFault".into()
    }
}

/// Keeps the schemas' bounds in step with the domain's own constants.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Amount, Description};

    fn property(schema: RefOr<Schema>, name: &str) -> serde_json::Value {
        let schema = serde_json::to_value(schema).unwrap();
        schema["properties"][name].clone()
    }

    #[test]
    fn charge_bounds_are_the_domain_ones() {
        for schema in [NewChargeBody::schema(), ChargeBody::schema()] {
            let amount = property(schema.clone(), "amount");
            assert_eq!(amount["minimum"], *Amount::RANGE.start());
            assert_eq!(amount["maximum"], *Amount::RANGE.end());
            let description = property(schema, "description");
            assert_eq!(description["maxLength"], Description::MAX_CHARS);
        }
    }
}
