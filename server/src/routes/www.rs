//! The demo page: static files from `--www`, and the `sid` session cookie.

use crate::domain::{session_cookie, SessionToken};
use crate::error::ApiError;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, get_service};
use axum::Router;
use http::{header, HeaderValue, Method};
use std::path::Path;
use tower_http::services::ServeDir;

/// What the demo page may run: its own scripts and WebAssembly, no inline
/// script, nothing evaluated (docs/CLIENT.md, "Content Security Policy").
const CONTENT_SECURITY_POLICY: &str = "script-src 'self' 'wasm-unsafe-eval'";

/// Serves `dir` at `/` under [`CONTENT_SECURITY_POLICY`], and gives a
/// browser without a valid `sid` cookie a fresh one when it loads a page.
pub fn service(dir: &Path) -> Router {
    let files = ServeDir::new(dir)
        .append_index_html_on_directories(true)
        .not_found_service(get(super::not_found));
    // GET and HEAD only: any other method answers our 405 problem, not
    // ServeDir's empty one.
    Router::new()
        .fallback_service(get_service(files).fallback(super::method_not_allowed))
        .layer(middleware::map_response(unopenable_is_not_found))
        .layer(middleware::from_fn(ensure_session))
}

/// ServeDir answers an empty 500 for paths the OS refuses to look up (a
/// name over 255 bytes, a NUL byte): no file is served there, so 404.
async fn unopenable_is_not_found(response: Response) -> Response {
    if response.status().is_server_error() {
        tracing::debug!(status = %response.status(), "static file path could not be opened");
        return ApiError::NotFound("nothing is served at this path".into()).into_response();
    }
    response
}

async fn ensure_session(request: Request, next: Next) -> Response {
    let is_page = request.method() == Method::GET
        && (request.uri().path().ends_with('/') || request.uri().path().ends_with(".html"));
    let has_session =
        session_cookie(request.headers()).is_some_and(|v| SessionToken::parse(v).is_ok());
    let mut response = next.run(request).await;
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    if is_page && !has_session && response.status().is_success() {
        let token = SessionToken::generate();
        let cookie = format!(
            "sid={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000",
            token.expose()
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}
