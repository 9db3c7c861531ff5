//! Receipts by SMTP (`--smtp-url`): the engine's outbox relay sends the
//! shop's receipts through this [`Transport`], each with its stable
//! `Message-ID`. Each connection has a transport (and a pool) of its own,
//! kept open from one message to the next by lettre's pool: a send given
//! up halfway leaves its connection in the middle of a command, and a pool
//! shared with other sends could hand that connection on, so the relay
//! closes it and makes it anew instead.
//!
//! Over TLS (`smtps://`, or STARTTLS with `?tls=required`) the server's
//! certificate is checked against the platform's roots and those of
//! `SSL_CERT_FILE` (rustls), and `USER:PASS@` logs in (SMTP AUTH).

use crate::config::{SmtpTls, SmtpUrl};
use crate::metrics::ShopMetrics;
use async_trait::async_trait;
use exactly_once::outbox::{Message, SendError, Transport};
use exactly_once::tls::TlsError;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::sync::Arc;
use std::time::Duration;

/// SMTP connections the relay sends over at once (MailDev takes about 210
/// messages a second over one, 280 over four: docs/BENCHMARKS.md).
pub const CONNECTIONS: usize = 4;
/// How long connecting to the SMTP server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay idle in its pool before it is closed.
const IDLE: Duration = Duration::from_secs(60);
/// Who receipts come from.
const FROM: &str = "Once Shop <receipts@exactly-once.invalid>";

/// The SMTP server receipts go to.
pub struct Mailer {
    /// `--smtp-url`.
    smtp: SmtpUrl,
    /// What TLS checks the server against (`None`: plain SMTP).
    tls: Option<TlsParameters>,
    /// Counts receipts accepted.
    metrics: Arc<ShopMetrics>,
}

impl Mailer {
    /// A mailer for `smtp`; over TLS, with the trusted roots loaded now (a
    /// bad `SSL_CERT_FILE` is an error naming it).
    pub fn new(smtp: SmtpUrl, metrics: Arc<ShopMetrics>) -> Result<Self, TlsError> {
        let tls = match smtp.tls {
            SmtpTls::None => None,
            _ => Some(tls_parameters(&smtp.host)?),
        };
        Ok(Self { smtp, tls, metrics })
    }

    /// Where it sends.
    pub fn smtp(&self) -> &SmtpUrl {
        &self.smtp
    }
}

/// lettre's TLS settings: the certificate must be valid for `host` and
/// chain to a trusted root.
fn tls_parameters(host: &str) -> Result<TlsParameters, TlsError> {
    let mut builder =
        TlsParameters::builder(host.to_owned()).certificate_store(CertificateStore::None);
    for root in exactly_once::tls::trusted_root_certificates()? {
        // lettre parses each again; one it cannot use is skipped, as
        // rustls-native-certs skips them.
        if let Ok(cert) = Certificate::from_der(root.to_vec()) {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build_rustls().map_err(|e| TlsError::File {
        what: "trusted roots for the SMTP server".to_owned(),
        path: std::env::var_os(exactly_once::tls::SSL_CERT_FILE)
            .map(Into::into)
            .unwrap_or_default(),
        why: e.to_string(),
    })
}

#[async_trait]
impl Transport for Mailer {
    type Connection = AsyncSmtpTransport<Tokio1Executor>;

    /// A transport whose pool keeps one connection open between messages.
    fn connect(&self) -> Self::Connection {
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&self.smtp.host)
            .port(self.smtp.port)
            .timeout(Some(CONNECT_TIMEOUT))
            .pool_config(PoolConfig::new().min_idle(0).max_size(1).idle_timeout(IDLE));
        if let Some(tls) = &self.tls {
            builder = builder.tls(match self.smtp.tls {
                SmtpTls::Implicit => Tls::Wrapper(tls.clone()),
                SmtpTls::Required => Tls::Required(tls.clone()),
                _ => Tls::Opportunistic(tls.clone()),
            });
        }
        if let Some((user, pass)) = &self.smtp.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), pass.clone()));
        }
        builder.build()
    }

    async fn send(
        &self,
        connection: &Self::Connection,
        message: &Message,
    ) -> Result<(), SendError> {
        // A receipt that cannot even be written (a bad address) never will.
        let email = email(message).map_err(SendError::Permanent)?;
        connection.send(email).await.map_err(|e| {
            let why = exactly_once::workspace::Chain(&e).to_string();
            // 5xx: the server refused this message for good (no such
            // mailbox, rejected); anything else may pass later.
            if e.is_permanent() {
                SendError::Permanent(why)
            } else {
                SendError::Temporary(why)
            }
        })?;
        self.metrics.receipt_sent();
        tracing::info!(message_id = %message.id, "receipt sent");
        Ok(())
    }

    async fn close(&self, connection: Self::Connection) {
        connection.shutdown().await;
    }
}

/// The e-mail of a receipt.
fn email(receipt: &Message) -> Result<lettre::Message, String> {
    lettre::Message::builder()
        .from(FROM.parse().map_err(|e| format!("bad sender: {e}"))?)
        .to(receipt
            .to
            .parse()
            .map_err(|e| format!("bad recipient {:?}: {e}", receipt.to))?)
        .subject(&receipt.subject)
        .message_id(Some(receipt.id.clone()))
        .header(ContentType::TEXT_PLAIN)
        .body(receipt.body.clone())
        .map_err(|e| format!("cannot build the message: {e}"))
}
