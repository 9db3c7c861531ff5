//! TLS clients (rustls with *ring*) that trust what the machine trusts:
//! the platform's roots, plus a PEM bundle named by `SSL_CERT_FILE`. The
//! PostgreSQL store connects with them (`sslmode`), and a service on the
//! engine can use the same roots for its own clients (the shop's provider
//! client and mailer do).
//!
//! `SSL_CERT_FILE` **adds** roots here: rustls-native-certs, when the
//! variable is set, reads that file *instead of* the platform's bundle, so
//! the platform's bundle is then read from its usual places as well.
//!
//! ```no_run
//! let roots = exactly_once::tls::trusted_roots()?;
//! let config = exactly_once::tls::client_config(roots);
//! # Ok::<(), exactly_once::tls::TlsError>(())
//! ```

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The variable naming a PEM bundle of extra trusted roots.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// Where Linux distributions keep the platform's bundle (Debian and
/// Ubuntu, Fedora and RHEL, openSUSE, Alpine), read beside `SSL_CERT_FILE`.
const PLATFORM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// A certificate, key or bundle that cannot be used; the message names
/// the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds nothing usable.
    #[error("{what} {}: {why}", path.display())]
    File {
        /// What the file is for (`sslrootcert`, `SSL_CERT_FILE`, …).
        what: String,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A certificate and key that rustls refuses together.
    #[error("{what}: {source}")]
    Rustls {
        /// What they are for.
        what: String,
        /// rustls's reason.
        source: rustls::Error,
    },
}

impl TlsError {
    fn file(what: &str, path: &Path, why: impl std::fmt::Display) -> Self {
        Self::File {
            what: what.to_owned(),
            path: path.to_owned(),
            why: why.to_string(),
        }
    }
}

/// The crypto provider every client and server of the workspace uses
/// (*ring*: no C toolchain beyond the one Rust needs).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The platform's roots and those of `SSL_CERT_FILE`. An error only for
/// an `SSL_CERT_FILE` that cannot be read or holds no certificate (a
/// platform without a bundle just trusts nothing of its own).
pub fn trusted_roots() -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(trusted_root_certificates()?);
    Ok(store)
}

/// The certificates [`trusted_roots`] trusts, for a client that takes
/// certificates one by one (lettre).
pub fn trusted_root_certificates() -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut roots = Vec::new();
    let native = rustls_native_certs::load_native_certs();
    let extra = std::env::var_os(SSL_CERT_FILE).map(PathBuf::from);
    if let Some(file) = &extra {
        // rustls-native-certs read only this file: its errors are its.
        if let Some(e) = native.errors.first() {
            return Err(TlsError::file(SSL_CERT_FILE, file, e));
        }
        if native.certs.is_empty() {
            return Err(TlsError::file(
                SSL_CERT_FILE,
                file,
                "no PEM certificate in it",
            ));
        }
        if let Some(bundle) = PLATFORM_BUNDLES
            .iter()
            .map(Path::new)
            .find(|p| p.is_file() && Some(*p) != extra.as_deref())
        {
            let platform = rustls_native_certs::load_certs_from_paths(Some(bundle), None);
            roots.extend(platform.certs);
        }
    }
    roots.extend(native.certs);
    Ok(roots)
}

/// The certificates of a PEM file (`what` names it in errors); at least one.
pub fn certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::file(what, path, pem_error(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(what, path, pem_error(e)))?;
    if certs.is_empty() {
        return Err(TlsError::file(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(what: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::file(what, path, pem_error(e)))
}

/// A root store of exactly the certificates in `path`.
pub fn roots_from(what: &str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(what, path)? {
        store
            .add(cert)
            .map_err(|e| TlsError::file(what, path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(store)
}

/// A client configuration that checks servers against `roots` (chain and
/// name), TLS 1.2 and 1.3.
pub fn client_config(roots: RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// rustls-pki-types' PEM errors, said plainly.
fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(e) => e.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of that kind in it".to_owned(),
        other => format!("not valid PEM ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = certificates("sslrootcert", &missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("sslrootcert {}: ", missing.display())),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = roots_from("sslrootcert", &empty).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("sslrootcert {}: no PEM certificate in it", empty.display())
        );
    }
}
