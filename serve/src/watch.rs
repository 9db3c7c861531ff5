//! A connection's clock: what a client may hold of the listener, as
//! [`Limits`] fixes it, and the stream wrapper that enforces it.
//!
//! A connection is, at any moment, in one of three states:
//!
//! - **waiting for a request's headers**: from its first byte (or, on a
//!   new connection, from the accept) the request's headers must have
//!   arrived within [`Limits::header_read_timeout`], however slowly they
//!   trickle in (a slowloris);
//! - **busy**: a request is being handled; no clock runs (the body has its
//!   own timeout, the handler its own bounds);
//! - **idle**: a keep-alive connection between requests; it is closed
//!   after [`Limits::idle_timeout`] without a byte.
//!
//! The clock is read when the connection reads and finds nothing to read:
//! a request's path costs a counter and no timer of its own (one timer per
//! connection, re-armed at most every [`Limits::header_read_timeout`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a keep-alive connection may stay idle between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How many connections may be open at once.
pub const MAX_CONNECTIONS: usize = 4096;

/// What one client may hold of the listener (docs/CONTRACT.md section 7,
/// "the listener"). The defaults are the contract's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request's headers must arrive within this, from its first byte
    /// (a new connection's first request: from the accept).
    pub header_read_timeout: Duration,
    /// A keep-alive connection without a request is closed after this.
    pub idle_timeout: Duration,
    /// Connections open at once; past it, new connections wait in the
    /// listen backlog until one closes.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// The requests of one connection: the service enters when a request's
/// headers have arrived, and leaves when the handler has answered (or was
/// dropped). A request handled at once, between two reads, is seen by the
/// count of those started.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    handling: AtomicUsize,
    started: AtomicUsize,
}

impl InFlight {
    /// A request is being handled until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> Handling {
        self.handling.fetch_add(1, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        Handling(Arc::clone(self))
    }

    fn any(&self) -> bool {
        self.handling.load(Ordering::Relaxed) > 0
    }

    fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }
}

/// One request being handled ([`InFlight::enter`]).
#[derive(Debug)]
pub(crate) struct Handling(Arc<InFlight>);

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a connection stands (see the module's documentation).
#[derive(Debug, Clone, Copy)]
enum State {
    Head { since: Instant },
    Busy,
    Idle { since: Instant },
}

/// A connection's stream, closed (a read error, `TimedOut`) when its
/// client overstays [`Limits`].
pub(crate) struct Watched<S> {
    inner: S,
    in_flight: Arc<InFlight>,
    limits: Limits,
    state: State,
    /// The requests started when the state was last set.
    started: usize,
    timer: Pin<Box<Sleep>>,
}

impl<S> Watched<S> {
    /// `inner`, just accepted: its first request's headers are due.
    pub(crate) fn new(inner: S, in_flight: Arc<InFlight>, limits: Limits) -> Self {
        let now = Instant::now();
        Self {
            inner,
            in_flight,
            limits,
            state: State::Head { since: now },
            started: 0,
            timer: Box::pin(tokio::time::sleep_until(now + limits.header_read_timeout)),
        }
    }

    /// Nothing to read now: `Ready(Err)` when the client has overstayed,
    /// else `Pending` with the timer armed.
    fn overstayed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.in_flight.any() {
            self.state = State::Busy;
            return Poll::Pending;
        }
        let now = Instant::now();
        let started = self.in_flight.started();
        if started != self.started {
            // Requests came and went since: the connection is idle now.
            self.started = started;
            self.state = State::Busy;
        }
        let (deadline, what) = match self.state {
            State::Busy => {
                self.state = State::Idle { since: now };
                (now + self.limits.idle_timeout, IDLE)
            }
            State::Idle { since } => (since + self.limits.idle_timeout, IDLE),
            State::Head { since } => (since + self.limits.header_read_timeout, HEAD),
        };
        loop {
            if Instant::now() >= deadline {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The timer is never armed later than a header timeout from
            // now, so a request that starts meanwhile finds it armed in
            // time without re-arming it.
            let next = deadline.min(Instant::now() + self.limits.header_read_timeout);
            self.timer.as_mut().reset(next);
        }
    }
}

const HEAD: &str = "the request's headers did not arrive in time";
const IDLE: &str = "the keep-alive connection was idle too long";

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let filled = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > filled => {
                let started = self.in_flight.started();
                if self.in_flight.any() {
                    self.state = State::Busy;
                } else if started != self.started || !matches!(self.state, State::Head { .. }) {
                    // The first bytes of the next request.
                    self.started = started;
                    self.state = State::Head {
                        since: Instant::now(),
                    };
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(ended) => Poll::Ready(ended),
            Poll::Pending => self.overstayed(cx),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
