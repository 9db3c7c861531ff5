//! `partner`: the outside world of the bookings service, simulated. It
//! confirms seats (`POST /confirmations`), deduplicated by
//! `Idempotency-Key`: the same key gets the same confirmation and its
//! effect is recorded once; another body under a key is a 422. Its ledger
//! (`GET /ledger`) lists every effect, with how many requests asked for
//! it. In memory: a restart forgets everything.
//!
//! To let a test kill the caller between the partner's effect and the
//! caller's record of it, an answer can be held back after its effect is
//! recorded: every answer by `--delay`, and all of them from
//! `POST /hold` until `POST /release` (at most a minute). While any is
//! held, the ledger's `held` counts them.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest an answer is held by `POST /hold`.
const MAX_HOLD: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
#[command(
    name = "partner",
    about = "A simulated seat partner with idempotent confirmations"
)]
struct Flags {
    /// The address to listen on (port 0 picks one; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
    /// How long every answer waits after its effect is recorded.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    delay: Duration,
}

/// One confirmation asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Request {
    booking: String,
    seat: String,
}

/// An effect: a seat confirmed once, under one key.
#[derive(Debug, Clone, Serialize)]
struct Effect {
    key: String,
    booking: String,
    seat: String,
    confirmation: String,
    /// How many requests came with this key (the first included).
    requests: u32,
}

#[derive(Default)]
struct Ledger {
    effects: Vec<Effect>,
    by_key: HashMap<String, usize>,
}

struct Partner {
    ledger: Mutex<Ledger>,
    hold: tokio::sync::watch::Sender<bool>,
    held: AtomicUsize,
    delay: Duration,
}

type Shared = Arc<Partner>;

fn main() {
    // ring, whatever the features Cargo unified with other packages built
    // beside this one (reqwest can be given rustls without a provider);
    // an `Err` only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let flags = Flags::parse();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime starts");
    runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(&flags.listen).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", flags.listen);
                std::process::exit(1);
            }
        };
        let partner = Arc::new(Partner {
            ledger: Mutex::default(),
            hold: tokio::sync::watch::Sender::new(false),
            held: AtomicUsize::new(0),
            delay: flags.delay,
        });
        let app = Router::new()
            .route("/confirmations", post(confirm))
            .route("/ledger", get(ledger))
            .route("/hold", post(hold))
            .route("/release", post(release))
            .with_state(partner);
        let addr = listener.local_addr().expect("a bound address");
        println!("listening on http://{addr}");
        axum::serve(listener, app)
            .await
            .expect("the partner serves");
    });
}

/// `POST /confirmations {"booking","seat"}` with `Idempotency-Key`.
async fn confirm(
    State(partner): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<Request>,
) -> Response {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
    else {
        return (StatusCode::BAD_REQUEST, "an Idempotency-Key is required").into_response();
    };
    let confirmation = {
        let mut ledger = partner.ledger.lock().unwrap_or_else(|e| e.into_inner());
        match ledger.by_key.get(key).copied() {
            Some(i) => {
                let effect = &mut ledger.effects[i];
                if (effect.booking.as_str(), effect.seat.as_str())
                    != (request.booking.as_str(), request.seat.as_str())
                {
                    return (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "this Idempotency-Key was used for another confirmation",
                    )
                        .into_response();
                }
                effect.requests += 1;
                effect.confirmation.clone()
            }
            None => {
                let confirmation = format!(
                    "PN-{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..8].to_uppercase()
                );
                let i = ledger.effects.len();
                ledger.effects.push(Effect {
                    key: key.to_owned(),
                    booking: request.booking,
                    seat: request.seat,
                    confirmation: confirmation.clone(),
                    requests: 1,
                });
                ledger.by_key.insert(key.to_owned(), i);
                confirmation
            }
        }
    };
    // The effect is recorded; the answer may wait.
    let _held = Held::new(&partner);
    if !partner.delay.is_zero() {
        tokio::time::sleep(partner.delay).await;
    }
    let mut hold = partner.hold.subscribe();
    let _ = tokio::time::timeout(MAX_HOLD, hold.wait_for(|held| !*held)).await;
    Json(serde_json::json!({ "confirmation": confirmation })).into_response()
}

/// Counts an answer held back while it lives.
struct Held<'a>(&'a Partner);

impl<'a> Held<'a> {
    fn new(partner: &'a Partner) -> Self {
        partner.held.fetch_add(1, Ordering::SeqCst);
        Self(partner)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `GET /ledger`: `{"effects": [...], "held": N}`.
async fn ledger(State(partner): State<Shared>) -> Response {
    let effects = partner
        .ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .effects
        .clone();
    let held = partner.held.load(Ordering::SeqCst);
    Json(serde_json::json!({ "effects": effects, "held": held })).into_response()
}

/// `POST /hold`: from now on, answers wait after their effect.
async fn hold(State(partner): State<Shared>) -> StatusCode {
    partner.hold.send_replace(true);
    StatusCode::NO_CONTENT
}

/// `POST /release`: the answers held go out, and no more are held.
async fn release(State(partner): State<Shared>) -> StatusCode {
    partner.hold.send_replace(false);
    StatusCode::NO_CONTENT
}
