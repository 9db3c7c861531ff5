//! Certificates a test makes for itself (rcgen): a certificate authority
//! and, signed by it, a server certificate for `127.0.0.1` and
//! `localhost`, written as PEM files in a temporary folder. A process
//! told `SSL_CERT_FILE=<the CA's file>` trusts them; another CA of the
//! same kind is the "wrong CA" a client must refuse.

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// A test CA and one server certificate it signed, as PEM files.
#[derive(Debug)]
pub struct TestCa {
    dir: TempDir,
    name: String,
}

impl TestCa {
    /// A new CA named `name` (its common name), and a server certificate
    /// for `127.0.0.1` and `localhost` signed by it.
    pub fn new(name: &str) -> Result<Self> {
        Self::for_names(name, &["127.0.0.1", "localhost"])
    }

    /// A new CA named `name`, and a server certificate for `hosts` (names
    /// or addresses) signed by it.
    pub fn for_names(name: &str, hosts: &[&str]) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("testkit-tls-").tempdir()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, format!("{name} (test CA)"));
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut server =
            CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())?;
        server
            .distinguished_name
            .push(DnType::CommonName, format!("{name} server"));
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &issuer)?;

        let ca = Self {
            dir,
            name: name.to_owned(),
        };
        ca.write("ca.pem", &ca_cert.pem())?;
        ca.write("server.pem", &server_cert.pem())?;
        ca.write("server.key", &server_key.serialize_pem())?;
        Ok(ca)
    }

    fn write(&self, file: &str, text: &str) -> Result<()> {
        let path = self.dir.path().join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CA's certificate (what `sslrootcert` or `SSL_CERT_FILE` names).
    pub fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The server's certificate.
    pub fn cert_pem(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    /// The server certificate's private key.
    pub fn key_pem(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    /// The folder of the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A reqwest client that trusts this CA only.
    pub fn client(&self) -> Result<reqwest::Client> {
        let pem = std::fs::read(self.ca_pem())?;
        Ok(reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem)?)
            .timeout(std::time::Duration::from_secs(30))
            .build()?)
    }
}
