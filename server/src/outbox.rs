//! The receipt relay (`--smtp-url`): hands the outbox's receipts to the
//! SMTP server, each with its stable `Message-ID`, and marks each sent once
//! the server has accepted it. A failed send is tried again later, with
//! exponential backoff and full jitter (the project's retry policy). A
//! receipt is claimed for a while before it is sent, so that two relays
//! (two instances on one PostgreSQL database) do not send it at once.
//!
//! Delivery is at least once: the only way to a second copy is a crash
//! between the SMTP server's acceptance and the mark, and that copy has the
//! same `Message-ID`.

use crate::config::SmtpUrl;
use crate::metrics::Metrics;
use crate::operation::receipt::Receipt;
use crate::store::{OutboxItem, Store};
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use retry_policy::Policy;
use std::sync::Arc;
use std::time::Duration;

/// Receipts claimed at once.
const BATCH: u32 = 20;
/// How often the relay looks at the outbox when it is idle.
const POLL: Duration = Duration::from_millis(500);
/// Backoff between sends of one receipt: from a second up to ten minutes.
const BACKOFF: Policy = Policy {
    max_attempts: u32::MAX,
    base_ms: 1_000.0,
    max_ms: 600_000.0,
    max_retry_after_ms: 600_000.0,
};
/// Who receipts come from.
const FROM: &str = "Once Shop <receipts@exactly-once.invalid>";

/// What the relay is told.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The SMTP server (`--smtp-url`).
    pub smtp: SmtpUrl,
    /// How long a claimed receipt is the relay's before another may send
    /// it (`--receipt-claim`).
    pub claim: Duration,
}

/// Relays receipts until the process stops.
pub async fn run(store: Arc<dyn Store>, metrics: Arc<Metrics>, settings: Settings) {
    let Settings { smtp, claim } = settings;
    let mailer = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host)
        .port(smtp.port)
        .timeout(Some(Duration::from_secs(10)))
        .build();
    tracing::info!(host = %smtp.host, port = smtp.port, "receipt relay started");
    loop {
        match store.receipts_waiting().await {
            Ok(waiting) => metrics.outbox_waiting(waiting),
            Err(e) => tracing::warn!(error = %e, "cannot count the outbox"),
        }
        let due = match store.due_receipts(BATCH, claim).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the outbox; trying again");
                Vec::new()
            }
        };
        if due.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        for item in due {
            send(&*store, &metrics, &mailer, item).await;
        }
    }
}

async fn send(
    store: &dyn Store,
    metrics: &Metrics,
    mailer: &AsyncSmtpTransport<Tokio1Executor>,
    item: OutboxItem,
) {
    let result = match message(&item.receipt) {
        Ok(message) => mailer
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let settled = match result {
        Ok(()) => {
            metrics.receipt_sent();
            tracing::info!(message_id = %item.receipt.message_id, "receipt sent");
            store.receipt_sent(item.id).await
        }
        Err(error) => {
            let retry = BACKOFF.backoff_ms(item.attempts, rand::random());
            let retry_in = Duration::from_secs_f64(retry.max(BACKOFF.base_ms) / 1000.0);
            tracing::warn!(message_id = %item.receipt.message_id, %error, ?retry_in, "receipt not sent; trying again later");
            store.receipt_failed(item.id, retry_in, &error).await
        }
    };
    if let Err(e) = settled {
        // Sent and not marked: the claim runs out and it is sent again,
        // with the same Message-ID.
        tracing::warn!(error = %e, message_id = %item.receipt.message_id, "cannot mark the receipt");
    }
}

/// The e-mail of a receipt.
fn message(receipt: &Receipt) -> Result<Message, String> {
    Message::builder()
        .from(FROM.parse().map_err(|e| format!("bad sender: {e}"))?)
        .to(receipt
            .recipient
            .parse()
            .map_err(|e| format!("bad recipient {:?}: {e}", receipt.recipient))?)
        .subject(&receipt.subject)
        .message_id(Some(receipt.message_id.clone()))
        .header(ContentType::TEXT_PLAIN)
        .body(receipt.body.clone())
        .map_err(|e| format!("cannot build the message: {e}"))
}
