//! The answers of each operation, status by status, with the problem types
//! and headers each may carry. One type per operation, named after it;
//! the refusals every keyed request shares are written once
//! ([`keyed_refusals`]), in the order the edge checks them
//! ([`crate::idempotency::keyed`]).

use super::schemas::{
    ChargeBody, ChargeListBody, Health, Inventory, ProblemBody, ReservationBody, ServerConfig,
};
use crate::error::PROBLEM_JSON;
use std::collections::BTreeMap;
use utoipa::openapi::content::Content;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::link::{Link, LinkBuilder};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoResponses, ToSchema};

/// The header that marks a replayed answer.
pub const IDEMPOTENT_REPLAYED: &str = "Idempotent-Replayed";
/// The header that says when to retry.
pub const RETRY_AFTER: &str = "Retry-After";

/// A reference to a named schema of the document.
fn schema_ref<T: ToSchema>() -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(T::name()))
}

/// A JSON answer with a body of type `T`.
fn json<T: ToSchema>(description: &str) -> ResponseBuilder {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", Content::new(Some(schema_ref::<T>())))
}

/// The 201 of a keyed operation: `what` was done by this request or, with
/// `Idempotent-Replayed: true`, by an earlier one with the same key.
fn made<T: ToSchema>(what: &str) -> ResponseBuilder {
    replayable(json::<T>(&format!(
        "{what} now or, with `Idempotent-Replayed: true`, by an earlier request with the \
         same key."
    )))
}

/// A problem+json answer; `types` names the problem types it may carry.
fn problem(types: &[&str], what: &str) -> ResponseBuilder {
    let types = types
        .iter()
        .map(|slug| format!("`{slug}`"))
        .collect::<Vec<_>>()
        .join(", ");
    ResponseBuilder::new()
        .description(format!("{what} Problem type: {types}."))
        .content(
            PROBLEM_JSON,
            Content::new(Some(schema_ref::<ProblemBody>())),
        )
}

/// `Idempotent-Replayed: true`, on an answer that may be a replay.
fn replayable(response: ResponseBuilder) -> ResponseBuilder {
    let value = ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .enum_values(Some(["true"]));
    response.header(
        IDEMPOTENT_REPLAYED,
        HeaderBuilder::new()
            .schema(value)
            .description(Some(
                "`true` when this is the stored answer of an earlier request with the \
                 same key, replayed byte for byte; absent on the first answer.",
            ))
            .build(),
    )
}

/// `Retry-After: SECONDS`, on an answer worth retrying.
fn retry_after(response: ResponseBuilder) -> ResponseBuilder {
    let seconds = ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Integer))
        .minimum(Some(0));
    response.header(
        RETRY_AFTER,
        HeaderBuilder::new()
            .schema(seconds)
            .description(Some("Seconds to wait before retrying with the same key."))
            .build(),
    )
}

/// The 503 of any request that reaches the database.
fn unavailable(types: &[&str]) -> ResponseBuilder {
    retry_after(problem(
        types,
        "Unavailable: retry later with the same key. Before the operation started, nothing \
         was done; once it started (with a provider), or when a commit's outcome is unknown, \
         the detail says so and the same key gets the real outcome.",
    ))
}

/// The 401 of every request that needs a caller.
fn unauthorized() -> ResponseBuilder {
    problem(
        &["unauthorized"],
        "No caller: send `Authorization: Bearer TOKEN` or the `sid` cookie.",
    )
    .header(
        "WWW-Authenticate",
        HeaderBuilder::new()
            .schema(
                ObjectBuilder::new()
                    .schema_type(SchemaType::Type(Type::String))
                    .enum_values(Some(["Bearer"])),
            )
            .build(),
    )
}

/// The 429 of every request but the probes (`--caller-rate`), and of a
/// new key whose caller has too many unfinished operations.
fn rate_limited() -> ResponseBuilder {
    retry_after(problem(
        &["rate-limited"],
        "Too many requests from this caller (more than `--caller-rate` a second), or, for a \
         new key, too many of its operations unfinished (`--caller-unfinished`). Nothing was \
         done or stored; retry after `Retry-After`.",
    ))
}

/// The 500 of any request that reaches the database.
fn internal() -> ResponseBuilder {
    problem(&["internal"], "A bug; everything was rolled back.")
}

/// A link to `operation_id` with `parameters` taken from this exchange.
fn link(operation_id: &str, parameters: &[(&str, &str)], description: &str) -> Link {
    parameters
        .iter()
        .fold(LinkBuilder::new(), |link, (name, value)| {
            link.parameter(*name, *value)
        })
        .operation_id(operation_id)
        .description(description)
        .build()
}

/// Answers, status code first.
fn answers(list: impl IntoIterator<Item = (u16, ResponseBuilder)>) -> Responses {
    list.into_iter()
        .map(|(status, response)| (status.to_string(), RefOr::T(response.build())))
        .collect()
}

type Responses = BTreeMap<String, RefOr<Response>>;

/// Each operation's answers as the type its route's `#[utoipa::path]`
/// names: `Type = function`, the function building them below.
macro_rules! operation_responses {
    ($($name:ident = $answers:ident,)*) => {
        $(
            #[doc = concat!("The answers `", stringify!($answers), "` builds.")]
            pub struct $name;

            impl IntoResponses for $name {
                fn responses() -> Responses {
                    $answers()
                }
            }
        )*
    };
}

operation_responses! {
    CreateChargeResponses = create_charge,
    ListChargesResponses = list_charges,
    CreateReservationResponses = create_reservation,
    InventoryResponses = inventory,
    HealthResponses = health,
    ConfigResponses = config,
    MetricsResponses = metrics,
    DocumentResponses = document,
}

/// What every keyed request may be refused with before it runs, in the
/// order the edge checks: nothing is stored, and the key may be sent again
/// with a corrected request. 422 is the one refusal that comes from a
/// record: the key was used before with another request.
fn keyed_refusals() -> Responses {
    answers([
        (401, unauthorized()),
        (
            400,
            problem(
                &[
                    "missing-idempotency-key",
                    "invalid-idempotency-key",
                    "invalid-request",
                ],
                "Refused before running: no key, a malformed key, a bad `X-Chaos`, \
                 a body that is not JSON or not the fields this operation takes. \
                 Nothing was stored.",
            ),
        ),
        (
            415,
            problem(&["invalid-request"], "The body is not `application/json`."),
        ),
        (
            413,
            problem(&["payload-too-large"], "The body is over 64 KiB."),
        ),
        (
            408,
            problem(&["invalid-request"], "The body did not arrive in time."),
        ),
        (
            422,
            problem(
                &["idempotency-key-mismatch"],
                "This key was used before with another method, path or body; nothing ran.",
            ),
        ),
        (429, rate_limited()),
        (500, internal()),
    ])
}

/// A keyed operation's own `answers`, with the refusals all keyed
/// requests share.
fn keyed(answers: Responses) -> Responses {
    let mut responses = keyed_refusals();
    responses.extend(answers);
    responses
}

/// `POST /charges`.
fn create_charge() -> Responses {
    let created = made::<ChargeBody>("The charge, created")
        .link(
            "ListFromIt",
            link(
                "list_charges",
                &[("starting_after", "$response.body#/id")],
                "The caller's charges older than this one.",
            ),
        )
        .link("Replay", {
            let mut replay = link(
                "create_charge",
                &[("Idempotency-Key", "$request.header.Idempotency-Key")],
                "The same request again: the same answer, replayed.",
            );
            replay.request_body = Some("$request.body".into());
            replay
        });
    keyed(answers([
        (201, created),
        (
            402,
            replayable(problem(
                &["card-declined"],
                "With `--psp-url`: the provider declined the card. Recorded: \
                 the same request replays it.",
            )),
        ),
        (
            409,
            retry_after(problem(
                &["idempotency-key-in-use"],
                "The first request with this key is still running.",
            )),
        ),
        (
            424,
            problem(
                &["operation-needs-attention"],
                "With `--psp-url`: the charge stopped at a step that cannot succeed by \
                 retrying (the provider refused it for good, or it kept failing past \
                 `--attention-after`). What it did is kept and an operator settles it; every \
                 retry of the key gets this answer until then. Not worth retrying.",
            ),
        ),
        (503, unavailable(&["unavailable", "provider-unavailable"])),
    ]))
}

/// `GET /charges`.
fn list_charges() -> Responses {
    answers([
        (
            200,
            json::<ChargeListBody>("The caller's charges, newest first."),
        ),
        (
            400,
            problem(
                &["invalid-request"],
                "`limit` is not 1 to 1000, or `starting_after` is not a charge id.",
            ),
        ),
        (401, unauthorized()),
        (429, rate_limited()),
        (500, internal()),
        (503, unavailable(&["unavailable"])),
    ])
}

/// `POST /reservations`.
fn create_reservation() -> Responses {
    let reserved = made::<ReservationBody>("The reservation, made").link(
        "StockOfItem",
        link(
            "show_inventory",
            &[("item", "$response.body#/item_id")],
            "The stock left of the item reserved.",
        ),
    );
    keyed(answers([
        (201, reserved),
        (
            404,
            replayable(problem(
                &["not-found"],
                "No such item; nothing was reserved. Recorded: the same request \
                 replays it.",
            )),
        ),
        (
            409,
            retry_after(replayable(problem(
                &["insufficient-inventory", "idempotency-key-in-use"],
                "Not enough stock, nothing reserved (recorded: the same request \
                 replays it); or the first request with this key is still running \
                 (with `Retry-After`).",
            ))),
        ),
        (503, unavailable(&["unavailable"])),
    ]))
}

/// `GET /inventory/{item}`.
fn inventory() -> Responses {
    answers([
        (200, json::<Inventory>("The stock left of the item.")),
        (404, problem(&["not-found"], "No such item.")),
        (429, rate_limited()),
        (500, internal()),
        (503, unavailable(&["unavailable"])),
    ])
}

/// `GET /healthz`.
fn health() -> Responses {
    answers([
        (
            200,
            json::<Health>(
                "The database is reachable, migrated (to this release's schema, or to a later \
                 release's whose migrations run beside this one) and writable.",
            ),
        ),
        (500, internal()),
        (503, unavailable(&["unavailable"])),
    ])
}

/// `GET /config`.
fn config() -> Responses {
    answers([
        (200, json::<ServerConfig>("This server's settings.")),
        (429, rate_limited()),
    ])
}

/// `GET /metrics`.
fn metrics() -> Responses {
    let text = || ObjectBuilder::new().schema_type(SchemaType::Type(Type::String));
    answers([(
        200,
        ResponseBuilder::new()
            .description(
                "Prometheus (OpenMetrics) text: keyed requests executed, replayed, \
                 in conflict (409) and mismatched (422), records expired, request \
                 latency by route.",
            )
            .content("application/openmetrics-text", Content::new(Some(text())))
            .content("text/plain", Content::new(Some(text()))),
    )])
}

/// `GET /openapi.json`.
fn document() -> Responses {
    let object = ObjectBuilder::new().schema_type(SchemaType::Type(Type::Object));
    answers([
        (
            200,
            ResponseBuilder::new()
                .description("This document: OpenAPI 3.1.")
                .content("application/json", Content::new(Some(object))),
        ),
        (429, rate_limited()),
    ])
}
