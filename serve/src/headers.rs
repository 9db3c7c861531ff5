//! Reading request headers that may appear at most once, and the text of
//! an `Idempotency-Key`, which both binaries accept by the same rule: the
//! engine's ([`exactly_once::IdempotencyKey`]).

pub use exactly_once::workspace::{key_text, single, BadKey, Repeated, MAX_KEY_LEN};
