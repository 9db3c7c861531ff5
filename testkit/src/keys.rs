//! Fresh idempotency keys and caller tokens, one per test request.

/// A fresh random idempotency key (a UUID v4).
pub fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A fresh random caller token (a customer of its own).
pub fn new_token() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}
