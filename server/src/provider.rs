//! The payment provider as the server calls it (`--psp-url`): `POST
//! /v1/charges` with the operation's downstream `Idempotency-Key`, retried
//! within the request by the project's one retry policy (exponential
//! backoff with full jitter, `Retry-After` honoured up to a cap), each
//! attempt bounded by `--psp-timeout`.
//!
//! An `https://` provider's certificate is checked against the platform's
//! roots and those of `SSL_CERT_FILE` (rustls).
//!
//! A repeat is harmless: the provider keeps its own record of the key, so
//! a second call for an operation (a retry, a resumption after a crash, the
//! completer) gets the first call's answer, never a second charge.

use crate::domain::ProviderChargeId;
use crate::metrics::{ProviderOutcome, ShopMetrics};
use crate::operation::charge::{PendingCharge, ProviderVerdict};
use exactly_once::secrets::redact;
use exactly_once_retry::{parse_retry_after, Attempt, Decision, Policy};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Retries within one request: a few quick ones, then the operation waits
/// at its recovery point for the client's retry or the completer.
const POLICY: Policy = Policy {
    max_attempts: 3,
    base_ms: 100.0,
    max_ms: 1_000.0,
    max_retry_after_ms: 2_000.0,
};

/// What the provider said about a charge, after any retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A final answer: charged, declined or refused.
    Verdict(ProviderVerdict),
    /// No final answer (unreachable, timed out, 5xx, or still busy with
    /// an earlier call under the same key): try again later.
    Unavailable(String),
    /// The provider refuses the request for good, or answers what it never
    /// should (401 or 403: our credentials; 404: the wrong URL; our key
    /// with other parameters; a 201 without a charge id): every retry
    /// would get the same, so the operation needs an operator.
    Refused(String),
}

/// A charge in the provider's ledger (`GET /v1/charges`), as an operator
/// reconciles an operation with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LedgerCharge {
    /// The provider's charge id (`pch_…`).
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency code.
    pub currency: String,
    /// When the provider made it (Unix seconds), if it says.
    pub created: Option<i64>,
}

/// Most ledger pages one lookup reads (1000 charges each).
const LEDGER_PAGES: usize = 1000;

/// A client of one provider.
pub struct Provider {
    http: reqwest::Client,
    charges_url: String,
    timeout: Duration,
    metrics: Arc<ShopMetrics>,
}

impl Provider {
    /// The provider at `base_url` (`http://HOST:PORT` or `https://…`),
    /// trusting `roots` over TLS.
    pub fn new(
        base_url: &str,
        timeout: Duration,
        metrics: Arc<ShopMetrics>,
        roots: rustls::RootCertStore,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(exactly_once::tls::client_config(roots))
            .build()?;
        Ok(Self {
            http,
            charges_url: format!("{base_url}/v1/charges"),
            timeout,
            metrics,
        })
    }

    /// Asks the provider to charge `charge` under `key`, with `metadata`,
    /// retrying what is worth retrying.
    pub async fn charge(&self, key: &str, charge: &PendingCharge, metadata: Value) -> Reply {
        let body = json!({
            "amount": charge.amount,
            "currency": charge.currency,
            "payment_method": charge.payment_method,
            "metadata": metadata,
        });
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = self
                .http
                .post(&self.charges_url)
                .header("Idempotency-Key", key)
                .timeout(self.timeout)
                .json(&body)
                .send()
                .await;
            let (kind, retry_after, why) = match sent {
                Ok(answer) => {
                    let status = answer.status().as_u16();
                    let retry_after = answer
                        .headers()
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, unix_ms()));
                    match read_json(answer).await {
                        Ok(body) => {
                            if let Some(reply) = self.final_reply(status, &body) {
                                return reply;
                            }
                            let why = format!("the provider answered {status}: {body}");
                            (
                                Attempt::Answer {
                                    status,
                                    problem_type: in_use(status, &body)
                                        .then_some("idempotency-key-in-use"),
                                },
                                retry_after,
                                why,
                            )
                        }
                        // An answer cut off or garbled on the way, a 201
                        // included (the card may be charged): asked again
                        // with the same key, the provider repeats it.
                        Err(e) => (
                            Attempt::Network,
                            None,
                            format!("the provider's {status} answer could not be read: {e}"),
                        ),
                    }
                }
                Err(e) if e.is_timeout() => (
                    Attempt::Timeout,
                    None,
                    format!("no answer from the provider within {:?}", self.timeout),
                ),
                Err(e) => (Attempt::Network, None, unreachable_reason(&e)),
            };
            self.metrics.provider_call(ProviderOutcome::failed);
            match POLICY.decide(attempt, kind, retry_after, rand::random()) {
                Decision::RetryAfter(ms) => {
                    tracing::warn!(attempt, retry_in_ms = ms, reason = %why, "provider call failed; retrying");
                    tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)).await;
                }
                Decision::GiveUp => return Reply::Unavailable(why),
                Decision::Done => return Reply::Refused(why),
            }
        }
    }

    /// The charges the provider's ledger holds under the `Idempotency-Key`
    /// `key` (at most one, as the provider makes one charge per key),
    /// read page by page, newest first. An error when the ledger cannot be
    /// read whole. A real provider would be asked by its own search (Stripe:
    /// charges by `metadata['operation']`).
    pub async fn charges_under(&self, key: &str) -> Result<Vec<LedgerCharge>, String> {
        let mut found = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..LEDGER_PAGES {
            let mut request = self
                .http
                .get(&self.charges_url)
                .timeout(self.timeout)
                .query(&[("limit", "1000")]);
            if let Some(after) = &after {
                request = request.query(&[("starting_after", after.as_str())]);
            }
            let answer = request
                .send()
                .await
                .map_err(|e| format!("the provider's ledger cannot be reached: {e}"))?;
            let status = answer.status();
            let page = read_json(answer).await?;
            if !status.is_success() {
                return Err(format!("the provider's ledger answered {status}: {page}"));
            }
            let rows = page["data"]
                .as_array()
                .ok_or_else(|| format!("the provider's ledger answered no data: {page}"))?;
            for row in rows {
                if row["idempotency_key"] == key {
                    found.push(LedgerCharge {
                        id: row["id"].as_str().unwrap_or_default().to_owned(),
                        amount: row["amount"].as_i64().unwrap_or_default(),
                        currency: row["currency"].as_str().unwrap_or_default().to_owned(),
                        created: row["created"].as_i64(),
                    });
                }
            }
            after = rows
                .last()
                .and_then(|row| row["id"].as_str())
                .map(str::to_owned);
            if page["has_more"] != true || after.is_none() {
                return Ok(found);
            }
        }
        Err(format!(
            "the provider's ledger has more than {LEDGER_PAGES} pages; look the key up there"
        ))
    }

    /// Where the ledger is read.
    pub fn charges_url(&self) -> &str {
        &self.charges_url
    }

    /// The reply an answer is final for, if it is one.
    fn final_reply(&self, status: u16, body: &Value) -> Option<Reply> {
        let error = &body["error"];
        let reply = match status {
            201 => match body["id"].as_str().and_then(ProviderChargeId::parse) {
                Some(id) => Reply::Verdict(ProviderVerdict::Charged(id)),
                None => Reply::Refused(format!("a 201 without a charge id: {body}")),
            },
            402 => Reply::Verdict(ProviderVerdict::Declined {
                code: error["decline_code"]
                    .as_str()
                    .or(error["code"].as_str())
                    .unwrap_or("card_declined")
                    .to_owned(),
            }),
            400 if error["type"] == "idempotency_error" => Reply::Refused(format!(
                "the provider says our key was used with other parameters: {body}"
            )),
            400 => Reply::Verdict(ProviderVerdict::Refused {
                message: error["message"]
                    .as_str()
                    .unwrap_or("the request was refused")
                    .to_owned(),
            }),
            _ => return None,
        };
        self.metrics.provider_call(match &reply {
            Reply::Verdict(ProviderVerdict::Charged(_)) => ProviderOutcome::succeeded,
            Reply::Verdict(_) => ProviderOutcome::declined,
            _ => ProviderOutcome::failed,
        });
        Some(reply)
    }
}

/// Whether an answer says that the provider is still running an earlier
/// request under the same key (Stripe answers such a concurrent request
/// 409 `idempotency_error`): worth retrying, as the server's own 409
/// `idempotency-key-in-use` is.
fn in_use(status: u16, body: &Value) -> bool {
    status == 409 && body["error"]["type"] == "idempotency_error"
}

/// Why a provider call got no answer, with reqwest's causes (the
/// certificate rustls refused, the connection refused); the URL reqwest
/// names shows its password as `***`.
fn unreachable_reason(e: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = source {
        if cause.downcast_ref::<rustls::Error>().is_some() {
            return format!(
                "the provider's TLS certificate was refused (trusting the platform's roots and \
                 SSL_CERT_FILE): {}",
                redact(&exactly_once::workspace::Chain(e).to_string())
            );
        }
        source = cause.source();
    }
    format!(
        "the provider cannot be reached: {}",
        redact(&exactly_once::workspace::Chain(e).to_string())
    )
}

/// The whole body of an answer, as JSON: an error when it was cut off or is
/// not JSON at all (an empty body reads as `null`).
async fn read_json(answer: reqwest::Response) -> Result<Value, String> {
    let bytes = answer
        .bytes()
        .await
        .map_err(|e| redact(&e.to_string()).into_owned())?;
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("not JSON ({e})"))
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
