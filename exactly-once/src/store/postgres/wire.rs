//! The byte stream under one PostgreSQL connection: a TCP or Unix socket,
//! TLS on it or not, and a tap that counts the protocol's requests and
//! answers as they pass, so the connection's driver can tell a server that
//! owes an answer and has gone silent (a hung primary) from an idle one.
//!
//! The tap sits above TLS (it sees the protocol in clear) and below
//! tokio-postgres. Every frontend message that the server answers with
//! `ReadyForQuery` (the startup message, `Query`, `Sync`, `FunctionCall`)
//! is a request; every `ReadyForQuery` is its answer. While requests are
//! outstanding, the last byte received (or the request that started the
//! wait) is the last sign of life.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;

/// A connected socket.
pub(super) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The socket, in clear or under TLS.
pub(super) enum Transport {
    Plain(Socket),
    Tls(Box<TlsStream<Socket>>),
}

macro_rules! delegate {
    ($self:ident, $inner:ident => $call:expr) => {
        match $self.get_mut() {
            Self::Tcp($inner) => {
                let $inner = Pin::new($inner);
                $call
            }
            Self::Unix($inner) => {
                let $inner = Pin::new($inner);
                $call
            }
        }
    };
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_shutdown(cx))
    }
}

macro_rules! delegate_transport {
    ($self:ident, $inner:ident => $call:expr) => {
        match $self.get_mut() {
            Self::Plain($inner) => {
                let $inner = Pin::new($inner);
                $call
            }
            Self::Tls($inner) => {
                let $inner = Pin::new(&mut **$inner);
                $call
            }
        }
    };
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate_transport!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate_transport!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate_transport!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate_transport!(self, s => s.poll_shutdown(cx))
    }
}

/// What the tap saw, shared with the connection's driver.
#[derive(Debug)]
pub(super) struct Activity {
    origin: Instant,
    /// Requests sent that the server answers with `ReadyForQuery`.
    requests: AtomicU64,
    /// `ReadyForQuery` messages received.
    answers: AtomicU64,
    /// Milliseconds since `origin` of the last sign of life while
    /// requests were outstanding.
    progress_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            requests: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            progress_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// How long the server has owed an answer without a byte, if it owes one.
    pub(super) fn silent_for(&self) -> Option<Duration> {
        let owed = self.requests.load(Ordering::Acquire) > self.answers.load(Ordering::Acquire);
        owed.then(|| {
            let since = self.progress_ms.load(Ordering::Acquire);
            Duration::from_millis(self.now_ms().saturating_sub(since))
        })
    }

    fn requested(&self, count: u64) {
        if count == 0 {
            return;
        }
        let before = self.requests.fetch_add(count, Ordering::AcqRel);
        if before <= self.answers.load(Ordering::Acquire) {
            // Nothing was owed: the wait starts now.
            self.progress_ms.store(self.now_ms(), Ordering::Release);
        }
    }

    fn received(&self, answers: u64) {
        self.progress_ms.store(self.now_ms(), Ordering::Release);
        if answers > 0 {
            self.answers.fetch_add(answers, Ordering::AcqRel);
        }
    }
}

/// Splits a byte stream into protocol messages (a tag byte, then a 4-byte
/// length that counts itself) and counts those with the given tags.
#[derive(Debug)]
struct Framer {
    /// The next message has no tag (the frontend's startup message).
    untagged_next: bool,
    header: [u8; 5],
    have: usize,
    /// Body bytes of the current message still to pass.
    body_left: usize,
}

impl Framer {
    fn new(untagged_first: bool) -> Self {
        Self {
            untagged_next: untagged_first,
            header: [0; 5],
            have: 0,
            body_left: 0,
        }
    }

    /// Feeds `bytes`; how many messages began whose tag is in `tags` (an
    /// untagged message counts as one of them).
    fn feed(&mut self, mut bytes: &[u8], tags: &[u8]) -> u64 {
        let mut counted = 0;
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let skip = self.body_left.min(bytes.len());
                self.body_left -= skip;
                bytes = &bytes[skip..];
                continue;
            }
            let header_len = if self.untagged_next { 4 } else { 5 };
            let take = (header_len - self.have).min(bytes.len());
            self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have < header_len {
                break;
            }
            let (tag, length) = if self.untagged_next {
                (None, &self.header[..4])
            } else {
                (Some(self.header[0]), &self.header[1..5])
            };
            let length = u32::from_be_bytes(length.try_into().expect("4 bytes")) as usize;
            if tag.is_none_or(|t| tags.contains(&t)) {
                counted += 1;
            }
            self.body_left = length.saturating_sub(4);
            self.have = 0;
            self.untagged_next = false;
        }
        counted
    }
}

/// The frontend messages the server answers with `ReadyForQuery`.
const REQUESTS: &[u8] = b"QSF";
/// `ReadyForQuery`.
const ANSWERS: &[u8] = b"Z";

/// A stream that counts requests and answers (see the module's doc).
pub(super) struct Tapped<S> {
    inner: S,
    activity: Arc<Activity>,
    sent: Framer,
    received: Framer,
}

impl<S> Tapped<S> {
    /// `inner`, before the startup message was sent.
    pub(super) fn new(inner: S) -> (Self, Arc<Activity>) {
        let activity = Arc::new(Activity::new());
        let tapped = Self {
            inner,
            activity: activity.clone(),
            sent: Framer::new(true),
            received: Framer::new(false),
        };
        (tapped, activity)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tapped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                let answers = this.received.feed(new, ANSWERS);
                this.activity.received(answers);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tapped<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            let requests = this.sent.feed(&buf[..n], REQUESTS);
            this.activity.requested(requests);
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn requests_are_counted_across_any_split_of_the_stream() {
        let mut stream = Vec::new();
        // The startup message: a length, then the body.
        stream.extend_from_slice(&12u32.to_be_bytes());
        stream.extend_from_slice(&[0, 3, 0, 0, b'u', 0, 0, 0]);
        stream.extend(message(b'p', b"secret\0"));
        stream.extend(message(b'P', b"\0SELECT 1\0\0\0"));
        stream.extend(message(b'B', &[0; 10]));
        stream.extend(message(b'E', &[0; 5]));
        stream.extend(message(b'S', &[]));
        stream.extend(message(b'Q', b"COMMIT\0"));
        for chunk in 1..stream.len() {
            let mut framer = Framer::new(true);
            let counted: u64 = stream.chunks(chunk).map(|c| framer.feed(c, REQUESTS)).sum();
            assert_eq!(counted, 3, "chunks of {chunk}");
        }
    }

    #[test]
    fn a_server_owes_an_answer_from_the_request_until_ready_for_query() {
        let activity = Activity::new();
        assert_eq!(activity.silent_for(), None);
        activity.requested(1);
        assert!(activity.silent_for().is_some());
        activity.received(0);
        assert!(activity.silent_for().is_some(), "a notice is no answer");
        activity.received(1);
        assert_eq!(activity.silent_for(), None);
    }
}
