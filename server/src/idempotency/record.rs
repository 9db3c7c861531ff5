//! What a key's record holds and what it decides, with no SQL: the stored
//! response and its header encoding, and the verdict on a request that
//! finds a finished record. Both stores and the flow use these, so the
//! decision is written once.

use crate::domain::Fingerprint;
use bytes::Bytes;
use http::StatusCode;

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
    /// A response with one `content-type` header.
    pub fn new(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status: status.as_u16(),
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    /// Rebuilds a response from its stored columns.
    pub fn from_stored(status: u16, headers: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: decode_headers(headers),
            body: body.into(),
        }
    }

    /// Headers as stored: one `name: value` line each.
    pub fn encoded_headers(&self) -> String {
        self.headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\n"))
            .collect()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_headers_round_trip() {
        let r = StoredResponse::new(StatusCode::CREATED, "application/json", &b"{}"[..]);
        let back = StoredResponse::from_stored(r.status, &r.encoded_headers(), r.body.clone());
        assert_eq!(back, r);
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
