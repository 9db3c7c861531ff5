//! Receipts by SMTP (`--smtp-url`): the engine's outbox relay sends the
//! shop's receipts through this [`Transport`], each with its stable
//! `Message-ID`. Each connection has a transport (and a pool) of its own,
//! kept open from one message to the next by lettre's pool: a send given
//! up halfway leaves its connection in the middle of a command, and a pool
//! shared with other sends could hand that connection on, so the relay
//! closes it and makes it anew instead.

use crate::config::SmtpUrl;
use crate::metrics::ShopMetrics;
use async_trait::async_trait;
use exactly_once::outbox::{Message, SendError, Transport};
use lettre::message::header::ContentType;
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
    pub smtp: SmtpUrl,
    /// Counts receipts accepted.
    pub metrics: Arc<ShopMetrics>,
}

#[async_trait]
impl Transport for Mailer {
    type Connection = AsyncSmtpTransport<Tokio1Executor>;

    /// A transport whose pool keeps one connection open between messages.
    fn connect(&self) -> Self::Connection {
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&self.smtp.host)
            .port(self.smtp.port)
            .timeout(Some(CONNECT_TIMEOUT))
            .pool_config(PoolConfig::new().min_idle(0).max_size(1).idle_timeout(IDLE))
            .build()
    }

    async fn send(
        &self,
        connection: &Self::Connection,
        message: &Message,
    ) -> Result<(), SendError> {
        // A receipt that cannot even be written (a bad address) never will.
        let email = email(message).map_err(SendError::Permanent)?;
        connection.send(email).await.map_err(|e| {
            // 5xx: the server refused this message for good (no such
            // mailbox, rejected); anything else may pass later.
            if e.is_permanent() {
                SendError::Permanent(e.to_string())
            } else {
                SendError::Temporary(e.to_string())
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
