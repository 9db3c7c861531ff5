//! Whose key a key is: keys are per caller, so two callers sending the same
//! key are two operations.

use sha2::{Digest, Sha256};

/// Who is calling, as the engine keeps it: a SHA-256 hash of whatever
/// identifies the caller to your application (a session token, an account
/// id, an API key). The engine never sees or stores the identity itself.
///
/// ```
/// use exactly_once::Caller;
///
/// let alice = Caller::of(b"account:42");
/// assert_eq!(alice, Caller::of(b"account:42"));
/// assert_ne!(alice, Caller::of(b"account:43"));
/// // Logs show a short hash, never the identity.
/// assert!(!alice.to_string().contains("42"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller([u8; 32]);

impl Caller {
    /// The caller that `identity` stands for (hashed here).
    pub fn of(identity: impl AsRef<[u8]>) -> Self {
        Self(Sha256::digest(identity.as_ref()).into())
    }

    /// This caller's keys in the namespace `namespace` (a route's name):
    /// another caller, as far as keys go, so the same key in two
    /// namespaces is two operations. The same namespace always gives the
    /// same caller, across processes and releases.
    ///
    /// ```
    /// use exactly_once::Caller;
    ///
    /// let alice = Caller::of(b"account:42");
    /// assert_eq!(alice.within("refunds"), alice.within("refunds"));
    /// assert_ne!(alice.within("refunds"), alice.within("charges"));
    /// assert_ne!(alice.within("refunds"), alice);
    /// ```
    pub fn within(&self, namespace: &str) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"exactly-once namespace\0");
        hash.update((namespace.len() as u64).to_be_bytes());
        hash.update(namespace.as_bytes());
        hash.update(self.0);
        Self(hash.finalize().into())
    }

    /// The hash as stored in the database.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Rebuilds a caller from its stored hash.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

short_hash_display!(Caller);
