//! Target `request`: whole HTTP requests through the router, checked
//! against the contract's invariants for every answer.

use super::app::App;
use crate::db::Db;
use crate::startup;
use axum::body::Body;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// Requests one input may carry, separated by `0x1E`.
const MAX_REQUESTS: usize = 4;
/// Separates the requests of one input.
const REQUEST_SEPARATOR: u8 = 0x1e;

const METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::HEAD,
    Method::PUT,
    Method::DELETE,
    Method::OPTIONS,
    Method::PATCH,
];

/// The problem types of docs/CONTRACT.md section 3.
const PROBLEM_SLUGS: [&str; 11] = [
    "missing-idempotency-key",
    "invalid-idempotency-key",
    "unauthorized",
    "invalid-request",
    "payload-too-large",
    "idempotency-key-mismatch",
    "idempotency-key-in-use",
    "insufficient-inventory",
    "not-found",
    "unavailable",
    "internal",
];

/// Target `request`: up to four HTTP requests, sent in order through
/// [`startup::router`] on a fresh database (so an input's outcome does not
/// depend on the inputs before it).
///
/// Each request is `HEAD\nKEY\nAUTHORIZATION\nCONTENT-TYPE\nCOOKIE\nX-CHAOS\nTAIL\nBODY`:
/// `HEAD`'s first byte is the method (`G`ET, `P`OST, `H`EAD, P`U`T,
/// `D`ELETE, `O`PTIONS, P`A`TCH, or any byte modulo 7), its second the path
/// (`0` `/charges`, `1` `/reservations`, `2` `/inventory/TAIL`, `3`
/// `/charges?TAIL`, `4` `/healthz`, `5` `/metrics`, `6` `/config`, `7` `/`,
/// `8` `/TAIL`, `9` `/inventory/sku-poster`, or any byte modulo 10), and
/// the letters after it which headers are sent: `k` Idempotency-Key, `a`
/// Authorization, `t` Content-Type, `c` Cookie, `x` X-Chaos; `l` pads the
/// body with spaces to exactly 64 KiB, `L` to one byte more.
///
/// Invariants: no 5xx (the database is local, so not even 503); every 4xx
/// is `application/problem+json` with `type` (one of the contract's),
/// `title`, `status` (the response's) and `detail`; a 201 is JSON; only a
/// keyed POST is ever marked `Idempotent-Replayed`; a request repeated
/// after a 201 replays it byte for byte with `Idempotent-Replayed: true`.
pub fn request(data: &[u8]) {
    let requests: Vec<FuzzRequest> = data
        .split(|&b| b == REQUEST_SEPARATOR)
        .take(MAX_REQUESTS)
        .map(FuzzRequest::decode)
        .collect();
    let app = App::get();
    let db = app.fresh_database();
    let router = startup::router(
        startup::state(
            Db(std::sync::Arc::new(exactly_once::AnyStore::from(
                db.store.clone(),
            ))),
            &app.config,
            None,
        ),
        &app.config,
    );
    let mut answered: Vec<(&FuzzRequest, Answer)> = Vec::with_capacity(requests.len());
    for request in &requests {
        let answer = app
            .runtime
            .block_on(send(router.clone(), request.to_http()));
        if app.trace {
            eprintln!(
                "{} {} {:?} {:?}\n  -> {} {:?} {:?}",
                request.method,
                request.uri,
                request.headers,
                String::from_utf8_lossy(&request.body),
                answer.status,
                answer.headers,
                String::from_utf8_lossy(&answer.body)
            );
        }
        check_answer(request, &answer);
        if let Some((_, first)) = answered.iter().find(|(earlier, _)| *earlier == request) {
            check_repeat(request, first, &answer);
        }
        answered.push((request, answer));
    }
    drop(router);
    drop(db);
}

/// One decoded request, before it becomes an `http::Request`.
#[derive(Debug, PartialEq, Eq)]
struct FuzzRequest {
    method: Method,
    uri: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Vec<u8>,
}

impl FuzzRequest {
    fn decode(data: &[u8]) -> Self {
        let mut fields = data.splitn(8, |&b| b == b'\n');
        let head = fields.next().unwrap_or_default();
        let key = fields.next().unwrap_or_default();
        let authorization = fields.next().unwrap_or_default();
        let content_type = fields.next().unwrap_or_default();
        let cookie = fields.next().unwrap_or_default();
        let chaos = fields.next().unwrap_or_default();
        let tail = fields.next().unwrap_or_default();
        let mut body = fields.next().unwrap_or_default().to_vec();

        let method = match head.first() {
            Some(b'G') | None => Method::GET,
            Some(b'P') => Method::POST,
            Some(b'H') => Method::HEAD,
            Some(b'U') => Method::PUT,
            Some(b'D') => Method::DELETE,
            Some(b'O') => Method::OPTIONS,
            Some(b'A') => Method::PATCH,
            Some(&b) => METHODS[usize::from(b) % METHODS.len()].clone(),
        };
        let path = match head.get(1).copied().unwrap_or(b'0') {
            b @ b'0'..=b'9' => b - b'0',
            b => b % 10,
        };
        let uri = match path {
            0 => "/charges".to_owned(),
            1 => "/reservations".to_owned(),
            2 => format!("/inventory/{}", uri_text(tail, b"")),
            3 => format!("/charges?{}", uri_text(tail, b"=&+")),
            4 => "/healthz".to_owned(),
            5 => "/metrics".to_owned(),
            6 => "/config".to_owned(),
            7 => "/".to_owned(),
            8 => format!("/{}", uri_text(tail, b"/")),
            _ => "/inventory/sku-poster".to_owned(),
        };
        let flags = head.get(2..).unwrap_or_default();
        let mut headers = Vec::new();
        for (flag, name, value) in [
            (b'k', HeaderName::from_static("idempotency-key"), key),
            (b'a', header::AUTHORIZATION, authorization),
            (b't', header::CONTENT_TYPE, content_type),
            (b'c', header::COOKIE, cookie),
            (b'x', HeaderName::from_static("x-chaos"), chaos),
        ] {
            if flags.contains(&flag) {
                headers.push((name, header_value(value)));
            }
        }
        let pad_to = if flags.contains(&b'L') {
            Some(exactly_once::MAX_BODY_BYTES + 1)
        } else if flags.contains(&b'l') {
            Some(exactly_once::MAX_BODY_BYTES)
        } else {
            None
        };
        if let Some(len) = pad_to {
            body.resize(len.max(body.len()), b' ');
        }
        Self {
            method,
            uri,
            headers,
            body,
        }
    }

    fn to_http(&self) -> Request<Body> {
        let mut request = Request::new(Body::from(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.parse().expect("uri_text builds valid URIs");
        for (name, value) in &self.headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        request
    }
}

/// `raw` as URI text: unreserved bytes, `%` (so bad escapes get through)
/// and `keep` as they are, everything else percent-encoded.
fn uri_text(raw: &[u8], keep: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if b.is_ascii_alphanumeric() || b"-._~%".contains(&b) || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `raw` without the bytes no header value may hold (controls but tab, DEL).
pub(super) fn header_value(raw: &[u8]) -> HeaderValue {
    let kept: Vec<u8> = raw
        .iter()
        .copied()
        .filter(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
        .collect();
    HeaderValue::from_bytes(&kept).expect("only legal header bytes are left")
}

/// What the router answered.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: bytes::Bytes,
}

async fn send(router: axum::Router, request: Request<Body>) -> Answer {
    let response = router
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .expect("an in-memory response body can be read")
        .to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

fn check_answer(request: &FuzzRequest, answer: &Answer) {
    let status = answer.status;
    let what = || {
        format!(
            "{} {} answered {status} {:?} {:?}",
            request.method,
            request.uri,
            answer.headers,
            String::from_utf8_lossy(&answer.body)
        )
    };
    assert!(!status.is_server_error(), "a 5xx: {}", what());
    let content_type = answer
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let has_body = request.method != Method::HEAD;
    if status.is_client_error() {
        assert_eq!(
            content_type,
            Some(crate::error::PROBLEM_JSON),
            "an error that is not problem+json: {}",
            what()
        );
        if has_body {
            check_problem(status, &answer.body).unwrap_or_else(|why| panic!("{why}: {}", what()));
        }
    }
    if status == StatusCode::CREATED {
        assert_eq!(content_type, Some("application/json"), "{}", what());
        assert!(
            serde_json::from_slice::<serde_json::Value>(&answer.body).is_ok_and(|v| v.is_object()),
            "a 201 whose body is not a JSON object: {}",
            what()
        );
    }
    if answer
        .headers
        .contains_key(&exactly_once::IDEMPOTENT_REPLAYED)
    {
        assert!(
            request.method == Method::POST
                && matches!(
                    request.uri.split('?').next(),
                    Some("/charges" | "/reservations")
                ),
            "a replay outside a keyed POST: {}",
            what()
        );
    }
}

fn check_problem(status: StatusCode, body: &[u8]) -> Result<(), String> {
    let problem: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("a problem that is not JSON ({e})"))?;
    let kind = problem["type"].as_str().ok_or("a problem without `type`")?;
    if !PROBLEM_SLUGS
        .iter()
        .any(|slug| kind.strip_suffix(slug).is_some_and(|p| p.ends_with('/')))
    {
        return Err(format!(
            "problem type {kind:?} is not one of the contract's"
        ));
    }
    problem["title"]
        .as_str()
        .ok_or("a problem without `title`")?;
    problem["detail"]
        .as_str()
        .ok_or("a problem without `detail`")?;
    if problem["status"].as_u64() != Some(u64::from(status.as_u16())) {
        return Err(format!("problem status {} ≠ {status}", problem["status"]));
    }
    Ok(())
}

/// `request` was sent before, byte for byte, and answered `first`.
fn check_repeat(request: &FuzzRequest, first: &Answer, again: &Answer) {
    let replayed = again
        .headers
        .get(&exactly_once::IDEMPOTENT_REPLAYED)
        .is_some_and(|v| v == "true");
    if first.status == StatusCode::CREATED {
        assert!(
            replayed && again.status == first.status && again.body == first.body,
            "{} {} answered 201 {:?}, then again {} {:?} (replayed: {replayed})",
            request.method,
            request.uri,
            String::from_utf8_lossy(&first.body),
            again.status,
            String::from_utf8_lossy(&again.body),
        );
    }
    if replayed {
        assert!(
            again.status == first.status && again.body == first.body,
            "a replay that is not the first answer: {} {:?} then {} {:?}",
            first.status,
            String::from_utf8_lossy(&first.body),
            again.status,
            String::from_utf8_lossy(&again.body),
        );
    }
}
