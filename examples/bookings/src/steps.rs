//! The step between the phases: the partner confirms the held seat. It is
//! sent the run's downstream key as its `Idempotency-Key`, so a step run
//! again (after a crash, by a retry or the completer) asks it again under
//! the same key and gets the same confirmation, never a second effect.

use crate::operation::{ConfirmSeat, Held, SEAT_HELD};
use async_trait::async_trait;
use exactly_once::{Any, Error, Lease, Operation, StepUnavailable, Steps};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The steps of this service: one, at [`SEAT_HELD`].
#[derive(Debug, Clone)]
pub struct PartnerSteps {
    http: reqwest::Client,
    url: String,
}

/// What the partner answers.
#[derive(Debug, Deserialize)]
struct Confirmed {
    confirmation: String,
}

impl PartnerSteps {
    /// The partner at `url` (`http://HOST:PORT`), each call bounded by
    /// `timeout`.
    pub fn new(url: &str, timeout: Duration) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("an HTTP client with a timeout builds"),
            url: url.trim_end_matches('/').to_owned(),
        }
    }

    /// Asks the partner to confirm `held` under `key`: its code, or why
    /// there is no final answer (the booking waits at its recovery point).
    async fn confirm(&self, key: &str, held: &Held) -> Result<String, Error> {
        let sent = self
            .http
            .post(format!("{}/confirmations", self.url))
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({ "booking": held.id, "seat": held.seat }))
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Err(unavailable(format!("the partner did not answer: {e}"))),
        };
        let status = response.status();
        if status.is_server_error() || status == http::StatusCode::CONFLICT {
            // 409: the partner is still answering another attempt of this key.
            return Err(unavailable(format!("the partner answered {status}")));
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            // A refusal that every retry would get: the booking needs an
            // operator.
            return Err(Error::StepFailedForGood(format!(
                "the partner refused a confirmation it should accept: {status} {body}"
            )));
        }
        match response.json::<Confirmed>().await {
            Ok(confirmed) => Ok(confirmed.confirmation),
            Err(e) => Err(unavailable(format!(
                "the partner's answer could not be read: {e}"
            ))),
        }
    }
}

fn unavailable(reason: String) -> Error {
    tracing::warn!(%reason, "no final answer from the partner; the booking waits at seat_held");
    Error::StepUnavailable(StepUnavailable::new(
        "partner-unavailable",
        "Partner unavailable",
        "the seat is held and the partner has not confirmed it yet; send the same request with \
         the same Idempotency-Key again to get the outcome",
        reason,
    ))
}

#[async_trait]
impl Steps<Any> for PartnerSteps {
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation<Any>>, Error> {
        match lease.point.as_str() {
            SEAT_HELD => {
                let held: Held = serde_json::from_str(&lease.state).map_err(|e| {
                    Error::StepFailedForGood(format!("a held booking's state is unreadable: {e}"))
                })?;
                let key = held.downstream_key(lease);
                let confirmation = self.confirm(&key, &held).await?;
                tracing::info!(booking = held.id, "the partner confirmed the seat");
                Ok(Arc::new(ConfirmSeat {
                    id: held.id,
                    confirmation,
                }))
            }
            other => Err(Error::internal(format!(
                "a booking stopped at {other:?}, which this service does not know"
            ))),
        }
    }

    /// `seat_held` only: a booking a later release stopped elsewhere is
    /// left to that release.
    fn knows(&self, point: &str) -> bool {
        point == SEAT_HELD
    }
}
