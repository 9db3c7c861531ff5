//! The receipt relay (`--smtp-url`): hands the outbox's receipts to the
//! SMTP server, each with its stable `Message-ID`, and marks each sent once
//! the server has accepted it. A failed send is tried again later, with
//! exponential backoff and full jitter (the project's retry policy). A
//! receipt is claimed for a while (`--receipt-claim`) before it is sent, so
//! that two relays (two instances on one database) do not send it at once.
//!
//! A claimed batch goes out over [`CONNECTIONS`] SMTP connections at once,
//! each kept open from one message to the next by lettre's pool; the next
//! batch is claimed while the last messages of this one are on their way.
//! Each connection has a transport (and a pool) of its own: a send given up
//! halfway leaves its connection in the middle of a command, and a pool
//! shared with other sends could hand that connection on, so the transport
//! is shut down and made anew instead.
//!
//! A claim is kept, not just taken: the relay starts a send only in the
//! first half of its claim, and gives up a send that takes more than a
//! quarter of it, so every send it makes has ended, and been marked, before
//! the claim runs out and another relay may take the receipt. A mark names
//! its claim, and one whose claim ran out anyway (the database was slow to
//! take it) writes nothing.
//!
//! Delivery is at least once: the only ways to a second copy are a crash
//! between the SMTP server's acceptance and the mark (at most one message
//! per connection is there at a time), and a server that accepts a message
//! after the relay gave up waiting for its answer; that copy has the same
//! `Message-ID`.

use crate::config::SmtpUrl;
use crate::metrics::Metrics;
use crate::operation::receipt::Receipt;
use crate::store::{OutboxItem, Store};
use lettre::message::header::ContentType;
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use retry_policy::Policy;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio::task::JoinSet;

/// SMTP connections the relay sends over at once (MailDev takes about 210
/// messages a second over one, 280 over four: docs/BENCHMARKS.md).
pub const CONNECTIONS: usize = 4;
/// Receipts claimed at once: enough that a claim is rare beside the sends.
const BATCH: u32 = 64;
/// How long connecting to the SMTP server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay idle in its pool before it is closed.
const IDLE: Duration = Duration::from_secs(60);
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

/// A claimed receipt on its way to a connection.
struct Claimed {
    item: OutboxItem,
    window: Window,
}

/// Relays receipts until the process stops (or the future is dropped,
/// which stops its connections too).
pub async fn run(store: Arc<dyn Store>, metrics: Arc<Metrics>, settings: Settings) {
    let Settings { smtp, claim } = settings;
    tracing::info!(host = %smtp.host, port = smtp.port, connections = CONNECTIONS, "receipt relay started");
    // Claimed receipts not yet settled: a batch, and the last one's
    // messages still being sent.
    let room = Arc::new(Semaphore::new(BATCH as usize + CONNECTIONS));
    let (queue, claimed) = mpsc::unbounded_channel();
    let claimed = Arc::new(Mutex::new(claimed));
    let mut connections = JoinSet::new();
    for _ in 0..CONNECTIONS {
        connections.spawn(connection(
            store.clone(),
            metrics.clone(),
            smtp.clone(),
            claimed.clone(),
            room.clone(),
        ));
    }
    loop {
        room.acquire_many(BATCH)
            .await
            .expect("the semaphore is never closed")
            .forget();
        match store.receipts_waiting().await {
            Ok(waiting) => metrics.outbox_waiting(waiting),
            Err(e) => tracing::warn!(error = %e, "cannot count the outbox"),
        }
        let window = Window::new(Instant::now(), claim);
        let due = match store.due_receipts(BATCH, claim).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the outbox; trying again");
                Vec::new()
            }
        };
        room.add_permits(BATCH as usize - due.len());
        if due.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        for item in due {
            if queue.send(Claimed { item, window }).is_err() {
                return; // The connections are gone: the process is stopping.
            }
        }
    }
}

/// One SMTP connection: sends the claimed receipts it takes, one after
/// the other, while their claim leaves time for it.
async fn connection(
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    smtp: SmtpUrl,
    claimed: Arc<Mutex<mpsc::UnboundedReceiver<Claimed>>>,
    room: Arc<Semaphore>,
) {
    let mut mailer = transport(&smtp);
    loop {
        let Some(Claimed { item, window }) = claimed.lock().await.recv().await else {
            return;
        };
        match window.send_limit(Instant::now()) {
            Some(limit) => {
                if send(&*store, &metrics, &mailer, item, limit).await == Sent::GaveUp {
                    mailer.shutdown().await;
                    mailer = transport(&smtp);
                }
            }
            // It waits for the claim to run out.
            None => tracing::debug!(
                message_id = %item.receipt.message_id,
                "the claim is half gone; leaving the receipt to the next claim"
            ),
        }
        room.add_permits(1);
    }
}

/// A transport whose pool keeps one connection open between messages.
fn transport(smtp: &SmtpUrl) -> AsyncSmtpTransport<Tokio1Executor> {
    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host)
        .port(smtp.port)
        .timeout(Some(CONNECT_TIMEOUT))
        .pool_config(PoolConfig::new().min_idle(0).max_size(1).idle_timeout(IDLE))
        .build()
}

/// The time a claim leaves for sending: sends start in its first half,
/// and each may take a quarter, so the last one ends a quarter before the
/// claim does, which leaves that quarter for its mark.
#[derive(Debug, Clone, Copy)]
struct Window {
    claimed_at: Instant,
    claim: Duration,
}

impl Window {
    /// A claim for `claim` asked for at `claimed_at` (before the database
    /// wrote its deadline, so the window ends no later than the claim).
    fn new(claimed_at: Instant, claim: Duration) -> Self {
        Self { claimed_at, claim }
    }

    /// How long a send that starts at `now` may take; `None` once sends
    /// may no longer start.
    fn send_limit(&self, now: Instant) -> Option<Duration> {
        (now.saturating_duration_since(self.claimed_at) < self.claim / 2).then_some(self.claim / 4)
    }
}

/// How a send ended, for its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The server answered (accepted or refused), or the message was not
    /// sent at all: the connection is as lettre left it.
    Answered,
    /// The send took longer than its limit and was dropped halfway.
    GaveUp,
}

/// Sends one receipt within `limit` and marks it.
async fn send(
    store: &dyn Store,
    metrics: &Metrics,
    mailer: &AsyncSmtpTransport<Tokio1Executor>,
    item: OutboxItem,
    limit: Duration,
) -> Sent {
    let mut ended = Sent::Answered;
    let result = match message(&item.receipt) {
        Ok(message) => match tokio::time::timeout(limit, mailer.send(message)).await {
            Ok(sent) => sent.map(|_| ()).map_err(|e| e.to_string()),
            Err(_) => {
                ended = Sent::GaveUp;
                Err(format!("the SMTP server took longer than {limit:?}"))
            }
        },
        Err(e) => Err(e),
    };
    let settled = match result {
        Ok(()) => {
            metrics.receipt_sent();
            tracing::info!(message_id = %item.receipt.message_id, "receipt sent");
            store.receipt_sent(&item).await
        }
        Err(error) => {
            let retry = BACKOFF.backoff_ms(item.attempts, rand::random());
            let retry_in = Duration::from_secs_f64(retry.max(BACKOFF.base_ms) / 1000.0);
            tracing::warn!(message_id = %item.receipt.message_id, %error, ?retry_in, "receipt not sent; trying again later");
            store.receipt_failed(&item, retry_in, &error).await
        }
    };
    match settled {
        Ok(true) => {}
        // The claim ran out before the mark: another relay has the receipt
        // and sends it again, with the same Message-ID.
        Ok(false) => tracing::warn!(
            message_id = %item.receipt.message_id,
            "the claim ran out before the receipt was marked"
        ),
        // Sent and not marked: the claim runs out and it is sent again,
        // with the same Message-ID.
        Err(e) => {
            tracing::warn!(error = %e, message_id = %item.receipt.message_id, "cannot mark the receipt")
        }
    }
    ended
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_start_in_the_first_half_of_a_claim_and_take_a_quarter_at_most() {
        let at = Instant::now();
        let window = Window::new(at, Duration::from_secs(60));
        let limit = Some(Duration::from_secs(15));
        assert_eq!(window.send_limit(at), limit);
        assert_eq!(window.send_limit(at + Duration::from_millis(29_999)), limit);
        assert_eq!(window.send_limit(at + Duration::from_secs(30)), None);
        assert_eq!(window.send_limit(at + Duration::from_secs(90)), None);
    }
}
