//! Which operation a request belongs to, as a name that carries neither the
//! caller's token nor anything a log reader could reuse.

use super::{Caller, IdempotencyKey};
use sha2::{Digest, Sha256};

/// SHA-256 of the caller and the key: the same for every attempt of one
/// operation, on any instance, and different for two operations (two
/// callers with one key are two operations).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OperationId([u8; 32]);

impl OperationId {
    /// The operation of `key` for `caller`.
    pub fn new(caller: &Caller, key: &IdempotencyKey) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"exactly-once operation\0");
        hash.update(caller.as_bytes());
        hash.update(key.as_ref().as_bytes());
        Self(hash.finalize().into())
    }

    /// The `Idempotency-Key` this operation sends downstream (to the
    /// payment provider): derived from the caller and the key alone, so
    /// every attempt, resumption and instance sends the same one.
    pub fn downstream_key(&self) -> String {
        format!("eo_{}", hex::encode(self.0))
    }
}

short_hash_display!(OperationId);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::SessionToken;

    fn caller(token: &str) -> Caller {
        Caller::from_token(&SessionToken::parse(token).unwrap())
    }

    #[test]
    fn one_operation_one_downstream_key_and_two_callers_two() {
        let key = IdempotencyKey::parse(b"8e03c5a2-1f4b").unwrap();
        let ada = caller("ada-token-0123456789");
        let bob = caller("bob-token-0123456789");
        assert_eq!(
            OperationId::new(&ada, &key).downstream_key(),
            OperationId::new(&ada, &key.clone()).downstream_key()
        );
        assert_ne!(OperationId::new(&ada, &key), OperationId::new(&bob, &key));
        let other = IdempotencyKey::parse(b"8e03c5a2-1f4c").unwrap();
        assert_ne!(OperationId::new(&ada, &key), OperationId::new(&ada, &other));
        let downstream = OperationId::new(&ada, &key).downstream_key();
        assert_eq!(downstream.len(), 67);
        assert!(!downstream.contains("ada"));
    }
}
