//! Fault injection (`POST /admin/faults`): the next N charge requests fail
//! in a chosen way, so the checkout server's tests and demo can show what
//! it does when the provider misbehaves.
//!
//! A fault counts `POST /v1/charges` requests only, whatever they are
//! (replays and invalid requests included), and lives in memory: a
//! restart forgets it. A new fault replaces the pending one.

use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serve::ConnectionControl;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The longest `delay` accepted.
const MAX_DELAY_MS: u64 = 600_000;

/// How a charge request misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `500` `api_error` at once; nothing is charged.
    Fail,
    /// The request runs (and commits), then the connection is dropped
    /// without an answer.
    DropAfterCharge,
    /// Wait this long, then run as usual.
    Delay(Duration),
    /// `503` `api_error` at once; nothing is charged.
    Down,
    /// `409` `idempotency_error` at once, as Stripe answers a request whose
    /// key another request is still using; nothing is charged.
    Conflict,
}

/// A fault and how many more requests it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// What happens.
    pub fault: Fault,
    /// To how many more charge requests.
    pub remaining: NonZeroU32,
}

/// The body of `POST /admin/faults`, and of `GET /admin/faults`' answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRequest {
    /// `fail`, `drop-after-charge`, `delay`, `down`, `conflict` or `none`.
    pub mode: Mode,
    /// How many charge requests (default 1); not with `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// The wait of `delay`, in milliseconds (required there, refused elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

/// The modes by their names in the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No fault: clears the pending one.
    None,
    /// See [`Fault::Fail`].
    Fail,
    /// See [`Fault::DropAfterCharge`].
    DropAfterCharge,
    /// See [`Fault::Delay`].
    Delay,
    /// See [`Fault::Down`].
    Down,
    /// See [`Fault::Conflict`].
    Conflict,
}

impl FaultRequest {
    /// The fault it asks for (`None`: clear), or why it makes no sense.
    pub fn parse(&self) -> Result<Option<Pending>, String> {
        let fault = match (self.mode, self.delay_ms) {
            (Mode::None, _) if self.count.is_some() || self.delay_ms.is_some() => {
                return Err("mode none takes neither count nor delay_ms".into())
            }
            (Mode::None, _) => return Ok(None),
            (Mode::Delay, Some(ms)) if ms <= MAX_DELAY_MS => {
                Fault::Delay(Duration::from_millis(ms))
            }
            (Mode::Delay, _) => {
                return Err(format!(
                    "mode delay needs delay_ms, 0 to {MAX_DELAY_MS} milliseconds"
                ))
            }
            (_, Some(_)) => return Err("delay_ms is only for mode delay".into()),
            (Mode::Fail, None) => Fault::Fail,
            (Mode::DropAfterCharge, None) => Fault::DropAfterCharge,
            (Mode::Down, None) => Fault::Down,
            (Mode::Conflict, None) => Fault::Conflict,
        };
        let remaining = NonZeroU32::new(self.count.unwrap_or(1))
            .ok_or_else(|| String::from("count must be 1 or more"))?;
        Ok(Some(Pending { fault, remaining }))
    }

    /// The request that would set `pending` (what `GET /admin/faults` shows).
    pub fn describe(pending: Option<Pending>) -> Self {
        match pending {
            Some(Pending { fault, remaining }) => Self::set(fault, remaining.get()),
            None => Self {
                mode: Mode::None,
                count: None,
                delay_ms: None,
            },
        }
    }

    /// The request that sets `fault` for the next `count` charge requests.
    pub fn set(fault: Fault, count: u32) -> Self {
        let (mode, delay_ms) = match fault {
            Fault::Fail => (Mode::Fail, None),
            Fault::DropAfterCharge => (Mode::DropAfterCharge, None),
            Fault::Delay(d) => (
                Mode::Delay,
                Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ),
            Fault::Down => (Mode::Down, None),
            Fault::Conflict => (Mode::Conflict, None),
        };
        Self {
            mode,
            count: Some(count),
            delay_ms,
        }
    }
}

/// The pending fault, shared by the admin endpoint and the charge route.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<Option<Pending>>>);

impl Faults {
    /// Replaces the pending fault (`None` clears it).
    pub fn set(&self, pending: Option<Pending>) {
        *self.lock() = pending;
    }

    /// The pending fault, without using it up.
    pub fn pending(&self) -> Option<Pending> {
        *self.lock()
    }

    /// Uses up one request of the pending fault and returns what it does.
    pub fn take(&self) -> Option<Fault> {
        let mut pending = self.lock();
        let current = (*pending)?;
        *pending = NonZeroU32::new(current.remaining.get() - 1).map(|remaining| Pending {
            remaining,
            ..current
        });
        Some(current.fault)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        // The guarded value is plain data, always whole: a panic elsewhere
        // cannot leave it half-written.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Middleware on `POST /v1/charges`: applies the pending fault, if any.
pub async fn inject(State(faults): State<Faults>, request: Request, next: Next) -> Response {
    let Some(fault) = faults.take() else {
        return next.run(request).await;
    };
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    match fault {
        Fault::Fail => {
            tracing::warn!(key, outcome = "fault-fail", replayed = false, "charge");
            ApiError::SimulatedFailure.into_response()
        }
        Fault::Down => {
            tracing::warn!(key, outcome = "fault-down", replayed = false, "charge");
            ApiError::SimulatedOutage.into_response()
        }
        Fault::Conflict => {
            tracing::warn!(key, outcome = "fault-conflict", replayed = false, "charge");
            ApiError::IdempotencyKeyInUse(key).into_response()
        }
        Fault::Delay(delay) => {
            tracing::warn!(
                key,
                delay_ms = delay.as_millis(),
                "fault: delaying a charge"
            );
            tokio::time::sleep(delay).await;
            next.run(request).await
        }
        Fault::DropAfterCharge => {
            let control = request.extensions().get::<ConnectionControl>().cloned();
            let answer = next.run(request).await;
            tracing::warn!(
                key,
                status = answer.status().as_u16(),
                "fault: dropping the answer"
            );
            match control {
                Some(control) => {
                    control.drop_connection();
                    // The connection's task drops this future with the socket.
                    std::future::pending().await
                }
                None => ApiError::Internal(
                    "drop-after-charge on a connection the simulator does not manage".into(),
                )
                .into_response(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> Result<Option<Pending>, String> {
        serde_json::from_str::<FaultRequest>(json)
            .map_err(|e| e.to_string())?
            .parse()
    }

    fn pending(fault: Fault, remaining: u32) -> Option<Pending> {
        Some(Pending {
            fault,
            remaining: NonZeroU32::new(remaining).unwrap(),
        })
    }

    #[test]
    fn fault_bodies_parse_as_the_contract_names_them() {
        assert_eq!(request(r#"{"mode":"fail"}"#), Ok(pending(Fault::Fail, 1)));
        assert_eq!(
            request(r#"{"mode":"drop-after-charge","count":3}"#),
            Ok(pending(Fault::DropAfterCharge, 3))
        );
        assert_eq!(
            request(r#"{"mode":"delay","delay_ms":250}"#),
            Ok(pending(Fault::Delay(Duration::from_millis(250)), 1))
        );
        assert_eq!(
            request(r#"{"mode":"down","count":2}"#),
            Ok(pending(Fault::Down, 2))
        );
        assert_eq!(
            request(r#"{"mode":"conflict","count":2}"#),
            Ok(pending(Fault::Conflict, 2))
        );
        assert_eq!(request(r#"{"mode":"none"}"#), Ok(None));
        for bad in [
            "{}",
            r#"{"mode":"explode"}"#,
            r#"{"mode":"fail","count":0}"#,
            r#"{"mode":"fail","count":-1}"#,
            r#"{"mode":"fail","delay_ms":5}"#,
            r#"{"mode":"delay"}"#,
            r#"{"mode":"delay","delay_ms":600001}"#,
            r#"{"mode":"none","count":1}"#,
            r#"{"mode":"fail","extra":1}"#,
        ] {
            assert!(request(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_fault_applies_to_exactly_count_requests() {
        let faults = Faults::default();
        faults.set(pending(Fault::Down, 2));
        assert_eq!(faults.take(), Some(Fault::Down));
        assert_eq!(faults.pending(), pending(Fault::Down, 1));
        assert_eq!(faults.take(), Some(Fault::Down));
        assert_eq!(faults.take(), None);
        assert_eq!(faults.pending(), None);
    }

    #[test]
    fn the_pending_fault_reads_back_as_the_request_that_set_it() {
        for json in [
            r#"{"mode":"none"}"#,
            r#"{"mode":"fail","count":1}"#,
            r#"{"mode":"delay","count":4,"delay_ms":30}"#,
        ] {
            let described = FaultRequest::describe(request(json).unwrap());
            assert_eq!(serde_json::to_string(&described).unwrap(), json);
        }
    }
}
