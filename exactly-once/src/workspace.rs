//! Helpers this repository's own crates (the demo shop, the provider
//! simulator, their shared server plumbing) take from the engine so that
//! all follow one rule. Not part of the engine's API: hidden from its
//! documentation and changed without notice; an application has no use
//! for them.

#![doc(hidden)]

#[cfg(feature = "axum")]
pub use crate::error::log_server_error;
pub use crate::error::{BoxError, Chain, PROBLEM_JSON};
pub use crate::key::{key_text, single, BadKey, Repeated, MAX_KEY_LEN};
/// The numbered migrations of a SQLite file: the engine's runner.
#[cfg(feature = "sqlite")]
pub use crate::store::sqlite::migrations;
/// Deleting expired records in batches, every interval.
pub mod sweep {
    pub use crate::sweeper::every;
}

#[cfg(feature = "tls")]
/// A server configuration from a PEM certificate chain and its key, with
/// ALPN for HTTP/2 and HTTP/1.1.
pub fn server_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<rustls::ServerConfig, crate::tls::TlsError> {
    let chain = crate::tls::certificates("certificate", cert)?;
    let key = crate::tls::private_key("key", key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|source| crate::tls::TlsError::Rustls {
            what: format!("certificate {} with its key", cert.display()),
            source,
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
