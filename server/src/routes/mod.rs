//! One module per resource.

/// A keyed operation's handler, declared to the OpenAPI document: a `POST`
/// that takes the keyed headers (`Idempotency-Key`, `X-Chaos`), a JSON
/// body and either credential, which every keyed operation shares and so
/// is written here once. The route names the rest: its path, operation id
/// and tag, its body's schema (in `openapi::schemas`) and its answers (in
/// `openapi::responses`). The handler's doc comment is its description.
/// rustfmt leaves the handler inside the macro as written: keep it a few
/// lines that hand the body to `Engine::run`.
// rustfmt indents an attribute inside a macro further on every run.
#[rustfmt::skip]
macro_rules! keyed_post {
    (
        path = $path:literal, operation_id = $id:literal, tag = $tag:literal,
        body = $body:ident, answers = $answers:ident,
        $handler:item
    ) => {
        #[utoipa::path(
            post,
            path = $path,
            operation_id = $id,
            tag = $tag,
            params(crate::openapi::KeyedHeaders),
            request_body = crate::openapi::schemas::$body,
            responses(crate::openapi::responses::$answers),
            security(("bearer" = []), ("session" = []))
        )]
        $handler
    };
}

pub mod api;
pub mod charges;
pub mod config;
pub mod health;
pub mod inventory;
pub mod metrics;
pub mod operations;
pub mod reservations;
pub mod www;

use crate::chaos::Chaos;
use crate::domain::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use http::request::Parts;

/// A keyed request of the shop: its caller by bearer token or session
/// cookie, its faults by `X-Chaos`.
pub type Keyed = exactly_once::Keyed<Authenticated, Chaos>;

/// The caller of a request that needs one (401 otherwise).
#[derive(Debug, Clone, Copy)]
pub struct Authenticated(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // `--caller-rate` found it already (only server code sets it).
        if let Some(found) = parts.extensions.get::<Caller>() {
            return Ok(Self(*found));
        }
        Ok(Self(crate::domain::caller_from_headers(&parts.headers)?))
    }
}

/// `X-Chaos`, honoured only when the server runs with `--chaos`.
impl FromRequestParts<AppState> for Chaos {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Self::from_request(&parts.headers, &parts.extensions, state.chaos)
    }
}

impl From<Authenticated> for Caller {
    fn from(authenticated: Authenticated) -> Self {
        authenticated.0
    }
}

/// Answers a method a route does not take, as problem+json.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Answers a path nothing serves, as problem+json.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("nothing is served at this path".into())
}
