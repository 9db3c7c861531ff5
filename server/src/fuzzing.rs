//! The bodies of the `cargo fuzz` targets in `fuzz/`, kept here so that
//! `server/tests/fuzz_corpus.rs` replays the committed corpus through the
//! very same checks in the ordinary test run (docs/FUZZING.md).
//!
//! Each function takes arbitrary bytes and panics when an invariant of
//! CONTRACT section 3 does not hold. None of them may panic for any other
//! reason: every input is a legal input.

use crate::config::Config;
use crate::domain::{Caller, Fingerprint, IdempotencyKey, SessionToken};
use crate::metrics::Metrics;
use crate::startup;
use crate::state::AppState;
use crate::store::sqlite::{SqliteOptions, SqliteStore};
use crate::store::Store;
use axum::body::Body;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

/// The longest key the contract allows.
const MAX_KEY_LEN: usize = 255;

/// Target `idempotency_key`: `data` is one `Idempotency-Key` header value.
///
/// A key that parses is 1 to 255 bytes of 0x21..=0x7E; its structured-field
/// spelling (`"` with `\` and `"` escaped) parses to the same key; its bare
/// spelling parses to itself unless it starts with `"`; optional whitespace
/// around the value changes nothing.
pub fn idempotency_key(data: &[u8]) {
    let parsed = IdempotencyKey::parse(data);
    let mut padded = b" \t".to_vec();
    padded.extend_from_slice(data);
    padded.extend_from_slice(b"\t ");
    assert_eq!(
        IdempotencyKey::parse(&padded),
        parsed,
        "surrounding whitespace changed the answer for {data:?}"
    );
    let Ok(key) = parsed else { return };
    let raw = key.as_ref();
    assert!(
        (1..=MAX_KEY_LEN).contains(&raw.len()),
        "key of {} bytes from {data:?}",
        raw.len()
    );
    assert!(
        raw.bytes().all(|b| (0x21..=0x7e).contains(&b)),
        "key {raw:?} has a byte outside 0x21..=0x7E (from {data:?})"
    );
    let quoted = format!("\"{}\"", raw.replace('\\', "\\\\").replace('"', "\\\""));
    assert_eq!(
        IdempotencyKey::parse(quoted.as_bytes()).as_ref(),
        Ok(&key),
        "the quoted spelling {quoted:?} is another key"
    );
    if !raw.starts_with('"') {
        assert_eq!(
            IdempotencyKey::parse(raw.as_bytes()).as_ref(),
            Ok(&key),
            "the bare spelling {raw:?} is another key"
        );
    }
    let trimmed = trim_ows(data);
    if !trimmed.starts_with(b"\"") {
        assert_eq!(raw.as_bytes(), trimmed, "a bare key is the value itself");
    }
}

/// `raw` without HTTP's optional whitespace (spaces and tabs) around it.
fn trim_ows(raw: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

/// Target `caller`: `data` is read as UTF-8 (lossily). Its first byte picks
/// the headers sent (bit 0: `Authorization`, bit 1: `Cookie`); the rest, cut
/// at `\n`, is the `Authorization` value and then one `Cookie` value a line.
///
/// `Caller::from_headers` never panics and agrees with a plain reading of
/// CONTRACT section 3; `SessionToken::parse` accepts exactly 16 to 256
/// characters of `A-Z a-z 0-9 . _ ~ + / = -`; a valid token names the same
/// caller as `Bearer`, `bearer` with extra spaces, or the `sid` cookie.
pub fn caller(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut lines = text.split('\n');
    let authorization = lines.next().unwrap_or_default();
    let cookies: Vec<&str> = lines.collect();

    for candidate in std::iter::once(&*text)
        .chain(std::iter::once(authorization))
        .chain(cookies.iter().copied())
        .chain(authorization.split_once(' ').map(|(_, token)| token))
    {
        assert_eq!(
            SessionToken::parse(candidate).is_ok(),
            is_contract_token(candidate),
            "SessionToken::parse disagrees with the contract on {candidate:?}"
        );
        if SessionToken::parse(candidate).is_ok() {
            same_caller_however_sent(candidate);
        }
    }

    let mut headers = HeaderMap::new();
    let auth_value = (mode & 1 != 0).then(|| header_value(authorization.as_bytes()));
    if let Some(value) = &auth_value {
        headers.insert(header::AUTHORIZATION, value.clone());
    }
    if mode & 2 != 0 {
        for cookie in &cookies {
            headers.append(header::COOKIE, header_value(cookie.as_bytes()));
        }
    }
    let got = Caller::from_headers(&headers).ok();
    let expected = match &auth_value {
        Some(value) => expected_bearer(value),
        None => crate::domain::session_cookie(&headers)
            .and_then(|sid| SessionToken::parse(sid).ok())
            .map(|token| Caller::from_token(&token)),
    };
    assert_eq!(got, expected, "Caller::from_headers on {headers:?}");
}

/// CONTRACT section 3, read literally.
fn is_contract_token(raw: &str) -> bool {
    (16..=256).contains(&raw.chars().count())
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._~+/=-".contains(c))
}

/// `Bearer TOKEN` (scheme case-insensitive, spaces before the token allowed).
fn expected_bearer(value: &HeaderValue) -> Option<Caller> {
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = SessionToken::parse(token.trim_start_matches(' ')).ok()?;
    Some(Caller::from_token(&token))
}

fn same_caller_however_sent(token: &str) {
    let want = Caller::from_token(&SessionToken::parse(token).expect("a valid token"));
    for (name, value) in [
        (header::AUTHORIZATION, format!("Bearer {token}")),
        (header::AUTHORIZATION, format!("bearer   {token}")),
        (header::COOKIE, format!("sid={token}")),
        (header::COOKIE, format!("theme=dark; sid={token}; x=y")),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(
            name,
            HeaderValue::from_str(&value).expect("a visible value"),
        );
        assert_eq!(
            Caller::from_headers(&headers),
            Ok(want),
            "{value:?} names another caller"
        );
    }
}

/// Target `fingerprint`: when `data` is JSON, its fingerprint does not
/// depend on spacing (pretty or compact re-serialisation), and changes with
/// the value (wrapped in an array or an object), the method and the path.
pub fn fingerprint(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let fp = |v: &serde_json::Value| Fingerprint::new(&Method::POST, "/charges", v);
    let base = fp(&value);
    for text in [
        serde_json::to_string_pretty(&value).expect("a Value serialises"),
        serde_json::to_string(&value).expect("a Value serialises"),
    ] {
        let again: serde_json::Value =
            serde_json::from_str(&text).expect("serde_json reads its own output");
        assert_eq!(
            fp(&again),
            base,
            "the same JSON value spelled {text:?} has another fingerprint (from {:?})",
            String::from_utf8_lossy(data)
        );
    }
    let others = [
        fp(&serde_json::Value::Array(vec![value.clone()])),
        fp(&serde_json::json!({ "body": value.clone() })),
        Fingerprint::new(&Method::PUT, "/charges", &value),
        Fingerprint::new(&Method::POST, "/reservations", &value),
    ];
    for other in others {
        assert_ne!(other, base, "a different request has the same fingerprint");
    }
}

// ---------------------------------------------------------------------------
// Target `request`: whole requests through the router.

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

/// The problem types of CONTRACT section 3.
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
        AppState {
            store: db.store.clone(),
            metrics: Arc::new(Metrics::new()),
            chaos: false,
        },
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
            Some(crate::idempotency::MAX_BODY_BYTES + 1)
        } else if flags.contains(&b'l') {
            Some(crate::idempotency::MAX_BODY_BYTES)
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
fn header_value(raw: &[u8]) -> HeaderValue {
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
        .contains_key(&crate::idempotency::IDEMPOTENT_REPLAYED)
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
        .get(&crate::idempotency::IDEMPOTENT_REPLAYED)
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

/// Built once per process: a runtime, a folder, the router's config and a
/// template database.
struct App {
    runtime: tokio::runtime::Runtime,
    dir: PathBuf,
    config: Config,
    /// A migrated database that every input's database is copied from.
    template: PathBuf,
    template_store: Option<SqliteStore>,
    databases: AtomicU64,
    /// `SERVER_FUZZ_TRACE=1`: print every request and answer to stderr.
    trace: bool,
}

impl App {
    fn get() -> &'static App {
        static APP: OnceLock<App> = OnceLock::new();
        APP.get_or_init(|| {
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            };
            remove_stale_folders(&base);
            let dir = base.join(format!("{FOLDER_PREFIX}{}", std::process::id()));
            let www = dir.join("www");
            std::fs::create_dir_all(&www).expect("create the fuzzing folder");
            std::fs::write(www.join("index.html"), "<!doctype html><title>fuzz</title>")
                .expect("write the demo page");
            let database = format!("sqlite://{}", dir.join("shop.db").display());
            let www_arg = www.display().to_string();
            let mut config = <Config as clap::Parser>::try_parse_from([
                "server",
                "--database",
                &database,
                "--durability",
                "relaxed",
                "--www",
                &www_arg,
            ])
            .expect("the fuzzing config parses");
            // Whatever the environment says: chaos would exit the process.
            config.chaos = false;
            #[cfg(feature = "bench")]
            {
                config.bench_unrecorded = false;
            }
            config.cors_origins.clear();
            let mut app = App {
                runtime: tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime"),
                template: dir.join("template.db"),
                template_store: None,
                dir,
                config,
                databases: AtomicU64::new(0),
                trace: std::env::var_os("SERVER_FUZZ_TRACE").is_some_and(|v| v == "1"),
            };
            // Kept open and idle for good, so its files never change.
            app.template_store = Some(app.open(&app.template));
            app
        })
    }

    /// A new database: a copy of the migrated template (migrating a new
    /// file for every input would cost more than the input), deleted again
    /// when dropped.
    fn fresh_database(&self) -> Database {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("db-{n}.db"));
        for suffix in ["", "-wal"] {
            let from = with_suffix(&self.template, suffix);
            if from.exists() {
                std::fs::copy(&from, with_suffix(&path, suffix)).expect("copy the template");
            }
        }
        Database {
            store: Arc::new(self.open(&path)),
            path,
        }
    }

    fn open(&self, path: &Path) -> SqliteStore {
        SqliteStore::open(SqliteOptions {
            path: path.to_path_buf(),
            durability: self.config.durability,
            key_ttl: self.config.key_ttl,
        })
        .expect("open a database")
    }
}

/// `path` with `suffix` appended to its file name (`-wal`, `-shm`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The fuzzing folder of process N is `FOLDER_PREFIX` + N.
const FOLDER_PREFIX: &str = "server-fuzz-";

/// Removes the folders of fuzzing processes that have exited.
fn remove_stale_folders(base: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return; // no way to tell which processes still run
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FOLDER_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// One input's database.
struct Database {
    store: Arc<dyn Store>,
    path: PathBuf,
}

impl Drop for Database {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let _ = std::fs::remove_file(with_suffix(&self.path, suffix));
        }
    }
}
