//! What a key's record holds and what it decides, with no SQL: the stored
//! response and its header encoding, the verdict on a request that finds a
//! finished record, and, for an operation in phases, where it stopped (its
//! recovery point) and who may resume it (its lease). Both stores and the
//! flow use these, so each decision is written once.

use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

/// A response as recorded with its key and replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// The headers that matter for a replay (`content-type`), in order.
    pub headers: Vec<(String, String)>,
    /// The exact body bytes.
    pub body: Bytes,
}

impl StoredResponse {
    /// A JSON response: `value` serialised, `content-type:
    /// application/json`.
    ///
    /// ```
    /// use exactly_once::StoredResponse;
    ///
    /// let created = StoredResponse::json(http::StatusCode::CREATED, &serde_json::json!({ "id": 7 }));
    /// assert_eq!(created.body, r#"{"id":7}"#);
    /// ```
    ///
    /// # Panics
    ///
    /// If `value` cannot be serialised (a map with non-string keys, a
    /// `Serialize` impl that fails): a bug of the operation's, not of the
    /// request.
    pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Self {
        let body = serde_json::to_vec(value).expect("a response body serialises as JSON");
        Self::new(status, "application/json", body)
    }

    /// A response with one `content-type` header.
    pub fn new(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status: status.as_u16(),
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    /// Rebuilds a response from its stored columns (`headers` as
    /// [`StoredResponse::encoded_headers`] wrote them).
    pub fn from_stored(status: u16, headers: Option<&str>, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: match headers {
                None => vec![DEFAULT_HEADER.map(str::to_owned).into()],
                Some(text) => decode_headers(text),
            },
            body: body.into(),
        }
    }

    /// Headers as stored: one `name: value` line each, or nothing (`None`)
    /// for the usual lone `content-type: application/json`, which most
    /// records carry: fewer bytes per commit.
    pub fn encoded_headers(&self) -> Option<String> {
        if let [(name, value)] = self.headers.as_slice() {
            if [name.as_str(), value.as_str()] == DEFAULT_HEADER {
                return None;
            }
        }
        Some(
            self.headers
                .iter()
                .map(|(name, value)| format!("{name}: {value}\n"))
                .collect(),
        )
    }
}

/// The headers a record stores as `NULL`.
const DEFAULT_HEADER: [&str; 2] = ["content-type", "application/json"];

/// Reads headers stored by [`StoredResponse::encoded_headers`].
fn decode_headers(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

/// A finished record, as read for a replay.
#[derive(Debug, Clone)]
pub struct Record {
    /// The request that first used the key.
    pub fingerprint: Fingerprint,
    /// What it answered.
    pub response: StoredResponse,
}

/// What a request gets from a finished record of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The same request: the stored response again.
    Replay(StoredResponse),
    /// Another request under the same key: 422, nothing runs.
    Mismatch,
}

impl Record {
    /// The one rule of a finished record: the same fingerprint replays,
    /// any other is refused.
    pub fn verdict(self, request: &Fingerprint) -> Verdict {
        if self.fingerprint == *request {
            Verdict::Replay(self.response)
        } else {
            Verdict::Mismatch
        }
    }
}

/// The stored recovery point of a finished record.
pub(crate) const FINISHED: &str = "finished";

/// The stored recovery point of an expired record's tombstone: its answer
/// is gone, and it keeps the key's generation so that the key's next life
/// is told apart from this one (and a run a restore forgot is not).
pub(crate) const EXPIRED: &str = "expired";

/// How a phase ends: the operation is finished (its answer is recorded) or
/// stopped at a recovery point with what resuming needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhaseEnd {
    /// The answer, recorded with the key.
    Finished(StoredResponse),
    /// Not finished: stopped at a recovery point, with what resuming
    /// needs ([`PhaseEnd::stop`] makes one).
    Stopped {
        /// Where it stopped: a name of the application's, which its
        /// [`Steps`](crate::Steps) match on; never `"finished"` nor
        /// `"expired"`.
        point: String,
        /// The state to resume from: the operation's own text (JSON, say).
        state: String,
    },
}

impl PhaseEnd {
    /// Stops at the recovery point `point` with `state` as JSON.
    ///
    /// ```
    /// use exactly_once::PhaseEnd;
    ///
    /// let step = PhaseEnd::stop("seat_held", &serde_json::json!({ "seat": "12A" }));
    /// assert_eq!(
    ///     step,
    ///     PhaseEnd::Stopped { point: "seat_held".into(), state: r#"{"seat":"12A"}"#.into() }
    /// );
    /// ```
    pub fn stop(point: &str, state: &impl serde::Serialize) -> Self {
        debug_assert!(
            point != FINISHED && point != EXPIRED,
            "{point:?} is not a recovery point"
        );
        Self::Stopped {
            point: point.to_owned(),
            state: serde_json::to_string(state).expect("a recovery state serialises"),
        }
    }
}

/// The right to run an unfinished operation's next phase, held by one
/// request or the completer at a time, until `leased_until`. Every phase
/// checks the token, so a holder whose lease was taken over cannot record
/// anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Whose operation.
    pub caller: Caller,
    /// Its key.
    pub key: IdempotencyKey,
    /// Random, new at every acquisition.
    pub token: [u8; 16],
    /// Where the operation stands: the recovery point its last phase
    /// named.
    pub point: String,
    /// What it needs to go on.
    pub state: String,
    /// The request that started it.
    pub fingerprint: Fingerprint,
    /// Which life of the key it is (0 for the first; one more each time
    /// the key's record expired before it).
    pub generation: u64,
}

impl Lease {
    /// A fresh token for a new holder.
    pub fn new_token() -> [u8; 16] {
        rand::random()
    }

    /// The operation the lease is of.
    pub fn operation(&self) -> OperationId {
        OperationId::new(&self.caller, &self.key)
    }

    /// The `Idempotency-Key` a step of this operation sends downstream:
    /// derived from the caller, the key, the request and the key's
    /// generation, so every attempt, resumption and instance sends the same
    /// one, and so does a run that a restore or a failover made the
    /// database forget; a later life of the key (after its record expired:
    /// a new operation) sends another. Make what you send with it a pure
    /// function of the request, so that the service downstream sees the
    /// same request under the same key. See
    /// [`OperationId::downstream_key_for`].
    pub fn downstream_key(&self) -> String {
        self.operation()
            .downstream_key_for(&self.fingerprint, self.generation)
    }

    /// The downstream key of releases before [`Lease::downstream_key`],
    /// for an operation such a release stopped: see
    /// [`OperationId::downstream_key`].
    pub fn downstream_key_of_run(&self, run: &str) -> String {
        self.operation().downstream_key(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_headers_round_trip_and_the_usual_one_costs_nothing() {
        let json = StoredResponse::new(StatusCode::CREATED, "application/json", &b"{}"[..]);
        assert_eq!(json.encoded_headers(), None);
        let problem = StoredResponse::new(StatusCode::CONFLICT, "application/problem+json", "{}");
        assert_eq!(
            problem.encoded_headers().as_deref(),
            Some("content-type: application/problem+json\n")
        );
        for r in [json, problem] {
            let back = StoredResponse::from_stored(
                r.status,
                r.encoded_headers().as_deref(),
                r.body.clone(),
            );
            assert_eq!(back, r);
        }
    }

    #[test]
    fn a_record_replays_only_to_its_own_request() {
        let response = StoredResponse::new(StatusCode::CREATED, "application/json", "{}");
        let mine = Fingerprint::from_bytes([1; 32]);
        let record = Record {
            fingerprint: mine,
            response: response.clone(),
        };
        assert_eq!(record.clone().verdict(&mine), Verdict::Replay(response));
        assert_eq!(
            record.verdict(&Fingerprint::from_bytes([2; 32])),
            Verdict::Mismatch
        );
    }
}

/// The header that marks a replayed answer.
pub static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// What a keyed request is answered, with no HTTP types: the operation's
/// own answer, or the stored one again for a retry (`replayed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status, headers and body, byte for byte as recorded.
    pub response: StoredResponse,
    /// A retry's answer: send `Idempotent-Replayed: true` with it.
    pub replayed: bool,
}

impl Answer {
    /// The answer as an HTTP response, over any body that takes [`Bytes`]
    /// (axum's, hyper's `Full`, `String` does not).
    pub fn into_http<B: From<Bytes>>(self) -> http::Response<B> {
        let mut response = http::Response::new(B::from(self.response.body));
        *response.status_mut() =
            StatusCode::from_u16(self.response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in &self.response.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::try_from(value.as_str()),
            ) {
                headers.append(name, value);
            }
        }
        if self.replayed {
            headers.insert(
                IDEMPOTENT_REPLAYED.clone(),
                HeaderValue::from_static("true"),
            );
        }
        response
    }
}
