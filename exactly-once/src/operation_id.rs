//! Which operation a request belongs to, as a name that carries neither the
//! caller's token nor anything a log reader could reuse.

use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
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

    /// The downstream key of releases before
    /// [`downstream_key_for`](Self::downstream_key_for): derived from the
    /// caller, the key and the run (`run`, what the run's first phase
    /// recorded, such as the id of the row it created). A run that a
    /// restore forgot had made a row of its own, so its retry sent a new
    /// key: only an operation stopped by such a release goes on with it,
    /// to send the key it may have sent already.
    pub fn downstream_key(&self, run: &str) -> String {
        let mut hash = Sha256::new();
        hash.update(b"exactly-once downstream\0");
        hash.update(self.0);
        hash.update(run.as_bytes());
        format!("eo_{}", hex::encode(hash.finalize()))
    }

    /// The `Idempotency-Key` a step of this operation sends downstream (to
    /// a partner's API): derived from the caller, the key, the request's
    /// fingerprint and the key's `generation` (which life of the key this
    /// is: 0 for the first, one more after each time its record expired).
    /// Every attempt, resumption and instance of one life sends the same
    /// one; so does a run of that life that a restore, a point-in-time
    /// recovery or an asynchronous failover made the database forget, so
    /// the service downstream answers it with what it did the first time
    /// instead of doing it again. A life after the record expired (a new
    /// operation, by the contract) sends another.
    pub fn downstream_key_for(&self, fingerprint: &Fingerprint, generation: u64) -> String {
        let mut hash = Sha256::new();
        hash.update(b"exactly-once downstream life\0");
        hash.update(self.0);
        hash.update(fingerprint.as_bytes());
        hash.update(generation.to_be_bytes());
        format!("eo_{}", hex::encode(hash.finalize()))
    }

    /// The hash itself, for an application that derives names of its own
    /// from the operation.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

short_hash_display!(OperationId);

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(token: &str) -> Caller {
        Caller::of(token)
    }

    #[test]
    fn one_operation_one_downstream_key_and_two_callers_two() {
        let key = IdempotencyKey::parse(b"8e03c5a2-1f4b").unwrap();
        let ada = caller("ada-token-0123456789");
        let bob = caller("bob-token-0123456789");
        let run = "ch_0192f0c4a2b07c3d9e8f";
        assert_eq!(
            OperationId::new(&ada, &key).downstream_key(run),
            OperationId::new(&ada, &key.clone()).downstream_key(run)
        );
        assert_ne!(OperationId::new(&ada, &key), OperationId::new(&bob, &key));
        let other = IdempotencyKey::parse(b"8e03c5a2-1f4c").unwrap();
        assert_ne!(OperationId::new(&ada, &key), OperationId::new(&ada, &other));
        let downstream = OperationId::new(&ada, &key).downstream_key(run);
        assert_eq!(downstream.len(), 67);
        assert!(!downstream.contains("ada"));
    }

    /// A key sent again after its record expired is a new run: it must not
    /// send the service downstream the key of the first run (which it holds
    /// with the first run's parameters).
    #[test]
    fn two_runs_of_one_key_send_two_downstream_keys() {
        let key = IdempotencyKey::parse(b"8e03c5a2-1f4b").unwrap();
        let op = OperationId::new(&caller("ada-token-0123456789"), &key);
        let (first, second) = (
            op.downstream_key("ch_first"),
            op.downstream_key("ch_second"),
        );
        assert_ne!(first, second);
    }
}
