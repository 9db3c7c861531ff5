//! The outbox: messages an operation writes in its own transaction
//! ([`enqueue`], the same on every backend), and the relay
//! ([`Engine::relay`](crate::Engine::relay)) that hands them to your
//! [`Transport`] (SMTP, a webhook, a queue), each with its stable id, and
//! marks each sent once the transport has accepted it. A failed send is
//! tried again later, with exponential backoff and full jitter. A message
//! is claimed for a while ([`RelaySettings::claim`]) before it is sent, so
//! that two relays (two instances on one database) do not send it at once.
//!
//! A claimed batch goes out over [`RelaySettings::connections`] connections
//! at once; the next batch is claimed while the last messages of this one
//! are on their way. A send given up halfway leaves its connection in the
//! middle of a command, so that connection is closed and made anew.
//!
//! A claim is kept, not just taken: the relay starts a send only in the
//! first half of its claim, and gives up a send that takes more than a
//! quarter of it, so every send it makes has ended, and been marked, before
//! the claim runs out and another relay may take the message. A mark names
//! its claim, and one whose claim ran out anyway (the database was slow to
//! take it) writes nothing.
//!
//! Delivery is at least once: the only ways to a second copy are a crash
//! between the transport's acceptance and the mark (at most one message
//! per connection is there at a time), and a transport that accepts a
//! message after the relay gave up waiting for its answer; that copy has
//! the same [`Message::id`], for the receiver to deduplicate.

use crate::backend::Backend;
use crate::clock::BootInstant;
use crate::engine::Engine;
pub use crate::store::enqueue::{enqueue, Enqueue};
pub use crate::store::Message;
use crate::store::{Delivery, OutboxItem, Store};
use async_trait::async_trait;
use exactly_once_retry::Policy;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio::task::JoinSet;

/// What sends the outbox's messages: SMTP, HTTP, a queue. One
/// [`Connection`](Transport::Connection) sends one message at a time; the
/// relay keeps [`RelaySettings::connections`] of them.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// One connection to the receiver, kept from one message to the next.
    type Connection: Send + Sync + 'static;

    /// A new connection (it may connect lazily, at its first send).
    fn connect(&self) -> Self::Connection;

    /// Sends `message`; `Ok` once the receiver has accepted it, `Err` with
    /// why not: [`SendError::Temporary`] is tried again later,
    /// [`SendError::Permanent`] never (a dead letter for an operator).
    async fn send(&self, connection: &Self::Connection, message: &Message)
        -> Result<(), SendError>;

    /// Closes a connection the relay gave up on halfway through a send.
    async fn close(&self, connection: Self::Connection) {
        drop(connection);
    }
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// It may go through later (the receiver is down, busy, timed out, or
    /// answered a temporary refusal such as SMTP's 4xx): tried again with
    /// backoff, for as long as it takes.
    Temporary(String),
    /// The receiver refused it for good (SMTP's 5xx: no such mailbox,
    /// rejected as spam): it is never sent again, and waits in the outbox
    /// as a dead letter (`outbox_dead_letters`) for an operator.
    Permanent(String),
}

impl From<String> for SendError {
    /// A failure that may go away: [`SendError::Temporary`].
    fn from(why: String) -> Self {
        Self::Temporary(why)
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Temporary(why) => write!(f, "{why}"),
            Self::Permanent(why) => write!(f, "refused for good: {why}"),
        }
    }
}

/// How the relay runs: the defaults, changed by a setter each.
///
/// ```
/// use exactly_once::outbox::RelaySettings;
/// use std::time::Duration;
///
/// let settings = RelaySettings::default().claim(Duration::from_secs(30)).connections(8);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RelaySettings {
    pub(crate) claim: Duration,
    pub(crate) connections: usize,
    pub(crate) batch: u32,
    pub(crate) poll: Duration,
}

impl RelaySettings {
    /// How long a claimed message is this relay's before another may send
    /// it (a minute by default).
    pub fn claim(mut self, claim: Duration) -> Self {
        self.claim = claim;
        self
    }

    /// Connections sending at once (4 by default).
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = connections;
        self
    }

    /// Messages claimed at once (64 by default).
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch;
        self
    }

    /// How often the outbox is looked at when it is empty (every half
    /// second by default).
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }
}

impl Default for RelaySettings {
    /// A minute's claim, four connections, batches of 64, polled twice a
    /// second.
    fn default() -> Self {
        Self {
            claim: Duration::from_secs(60),
            connections: 4,
            batch: 64,
            poll: Duration::from_millis(500),
        }
    }
}

/// Backoff between sends of one message: from a second up to ten minutes.
const BACKOFF: Policy = Policy {
    max_attempts: u32::MAX,
    base_ms: 1_000.0,
    max_ms: 600_000.0,
    max_retry_after_ms: 600_000.0,
};

/// A claimed message on its way to a connection.
struct Claimed {
    item: OutboxItem,
    window: Window,
}

impl<B: Backend> Engine<B> {
    /// The relay: sends the outbox's messages through `transport` until
    /// the future is dropped (which stops its connections too). Spawn it.
    pub fn relay<T: Transport>(
        &self,
        transport: T,
        settings: RelaySettings,
    ) -> impl Future<Output = ()> + Send + 'static {
        run(self.clone(), Arc::new(transport), settings)
    }
}

async fn run<B: Backend, T: Transport>(
    engine: Engine<B>,
    transport: Arc<T>,
    settings: RelaySettings,
) {
    let RelaySettings {
        claim,
        connections: lines,
        batch,
        poll,
    } = settings;
    let lines = lines.max(1);
    tracing::info!(connections = lines, "outbox relay started");
    // Claimed messages not yet settled: a batch, and the last one's
    // messages still being sent.
    let room = Arc::new(Semaphore::new(batch as usize + lines));
    let (queue, claimed) = mpsc::unbounded_channel();
    let claimed = Arc::new(Mutex::new(claimed));
    let mut connections = JoinSet::new();
    for _ in 0..lines {
        connections.spawn(connection(
            engine.clone(),
            transport.clone(),
            claimed.clone(),
            room.clone(),
        ));
    }
    let store = &engine.0.store;
    loop {
        room.acquire_many(batch)
            .await
            .expect("the semaphore is never closed")
            .forget();
        match store.outbox_census().await {
            Ok(census) => engine.0.metrics.outbox(&census),
            Err(e) => tracing::warn!(error = %e, "cannot count the outbox"),
        }
        let window = Window::new(BootInstant::now(), claim);
        let due = match store.due_messages(batch, claim).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the outbox; trying again");
                Vec::new()
            }
        };
        room.add_permits(batch as usize - due.len());
        if due.is_empty() {
            tokio::time::sleep(poll).await;
            continue;
        }
        for item in due {
            if queue.send(Claimed { item, window }).is_err() {
                return; // The connections are gone: the process is stopping.
            }
        }
    }
}

/// One connection: sends the claimed messages it takes, one after the
/// other, while their claim leaves time for it.
async fn connection<B: Backend, T: Transport>(
    engine: Engine<B>,
    transport: Arc<T>,
    claimed: Arc<Mutex<mpsc::UnboundedReceiver<Claimed>>>,
    room: Arc<Semaphore>,
) {
    let mut line = transport.connect();
    loop {
        let Some(Claimed { item, window }) = claimed.lock().await.recv().await else {
            return;
        };
        match window.send_limit(BootInstant::now()) {
            Some(limit) => {
                if send(&*engine.0.store, &*transport, &line, item, limit).await == Sent::GaveUp {
                    transport.close(line).await;
                    line = transport.connect();
                }
            }
            // It waits for the claim to run out.
            None => tracing::debug!(
                message_id = %item.message.id,
                "the claim is half gone; leaving the message to the next claim"
            ),
        }
        room.add_permits(1);
    }
}

/// The time a claim leaves for sending: sends start in its first half,
/// and each may take a quarter, so the last one ends a quarter before the
/// claim does, which leaves that quarter for its mark.
///
/// It is measured on the boot clock, as the claims are kept (SQLite's
/// database clock is the boot clock plus an offset; PostgreSQL's `now()`
/// goes on through this host's suspend too): the monotonic clock, which
/// an earlier release used, stops while the host is suspended, so a relay
/// woken after its claims ran out still thought it had them.
#[derive(Debug, Clone, Copy)]
struct Window {
    claimed_at: BootInstant,
    claim: Duration,
}

impl Window {
    /// A claim for `claim` asked for at `claimed_at` (before the database
    /// wrote its deadline, so the window ends no later than the claim).
    fn new(claimed_at: BootInstant, claim: Duration) -> Self {
        Self { claimed_at, claim }
    }

    /// How long a send that starts at `now` may take; `None` once sends
    /// may no longer start.
    fn send_limit(&self, now: BootInstant) -> Option<Duration> {
        (now.saturating_since(self.claimed_at) < self.claim / 2).then_some(self.claim / 4)
    }
}

/// How a send ended, for its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The receiver answered (accepted or refused), or the message was not
    /// sent at all: the connection is as the transport left it.
    Answered,
    /// The send took longer than its limit and was dropped halfway.
    GaveUp,
}

/// Sends one message within `limit` and marks it.
async fn send<B: Backend, T: Transport>(
    store: &dyn Store<B>,
    transport: &T,
    line: &T::Connection,
    item: OutboxItem,
    limit: Duration,
) -> Sent {
    let mut ended = Sent::Answered;
    let result = match tokio::time::timeout(limit, transport.send(line, &item.message)).await {
        Ok(sent) => sent,
        Err(_) => {
            ended = Sent::GaveUp;
            Err(SendError::Temporary(format!(
                "the transport took longer than {limit:?}"
            )))
        }
    };
    let settled = match result {
        Ok(()) => {
            tracing::info!(message_id = %item.message.id, "message sent");
            store.message_settled(&item, Delivery::Sent).await
        }
        Err(SendError::Temporary(error)) => {
            let retry = BACKOFF.backoff_ms(item.attempts, rand::random());
            let retry_in = Duration::from_secs_f64(retry.max(BACKOFF.base_ms) / 1000.0);
            tracing::warn!(message_id = %item.message.id, %error, ?retry_in, "message not sent; trying again later");
            store
                .message_settled(&item, Delivery::Retry(retry_in, &error))
                .await
        }
        Err(SendError::Permanent(error)) => {
            tracing::error!(message_id = %item.message.id, %error, "message refused for good; it waits in the outbox as a dead letter");
            store
                .message_settled(&item, Delivery::Refused(&error))
                .await
        }
    };
    match settled {
        Ok(true) => {}
        // The claim ran out before the mark: another relay has the message
        // and sends it again, with the same id.
        Ok(false) => tracing::warn!(
            message_id = %item.message.id,
            "the claim ran out before the message was marked"
        ),
        // Sent and not marked: the claim runs out and it is sent again,
        // with the same id.
        Err(e) => {
            tracing::warn!(error = %e, message_id = %item.message.id, "cannot mark the message")
        }
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_start_in_the_first_half_of_a_claim_and_take_a_quarter_at_most() {
        let at = BootInstant::now();
        let window = Window::new(at, Duration::from_secs(60));
        let limit = Some(Duration::from_secs(15));
        assert_eq!(window.send_limit(at), limit);
        assert_eq!(
            window.send_limit(at.after(Duration::from_millis(29_999))),
            limit
        );
        assert_eq!(window.send_limit(at.after(Duration::from_secs(30))), None);
        assert_eq!(window.send_limit(at.after(Duration::from_secs(90))), None);
    }
}
