//! A TCP proxy between a server and its database, to break the network
//! between them on purpose: [`Proxy::cut`] resets every open connection
//! (both ends see a reset, as when a firewall or a NAT drops its state),
//! [`Proxy::refuse`] resets new connections as soon as they arrive, and
//! [`Proxy::blackhole`] accepts them and never answers (a connection
//! attempt that only a timeout ends). A connection whose upstream cannot
//! be reached (the database is down) is reset too. [`Proxy::delay_replies`]
//! makes the upstream slow instead: what it sends is passed on late (an
//! SMTP server that takes its time over every reply).
//!
//! It runs on a runtime of its own, so it keeps relaying whatever the
//! test's runtime is doing, and it stops (closing everything) on drop.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long the proxy tries to reach the upstream for a new connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const FORWARD: u8 = 0;
const REFUSE: u8 = 1;
const BLACKHOLE: u8 = 2;

/// A running proxy to one upstream address.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    mode: AtomicU8,
    /// Bumped by every cut; each connection watches it.
    cuts: watch::Sender<u64>,
    /// Connections relaying right now.
    open: AtomicUsize,
    /// How long each read from the upstream is held before it is passed
    /// on, in microseconds (0: not at all).
    reply_delay_us: AtomicU64,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testkit-proxy")
            .enable_all()
            .build()
            .context("starting the proxy's runtime")?;
        let shared = Arc::new(Shared {
            upstream,
            mode: AtomicU8::new(FORWARD),
            cuts: watch::channel(0).0,
            open: AtomicUsize::new(0),
            reply_delay_us: AtomicU64::new(0),
        });
        let accepting = shared.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("a non-blocking listener");
            loop {
                if let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(relay(client, accepting.clone()));
                }
            }
        });
        Ok(Self {
            addr,
            shared,
            runtime: Some(runtime),
        })
    }

    /// The address to connect to instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Resets every open connection (blackholed ones included); how many
    /// were relaying.
    pub fn cut(&self) -> usize {
        let open = self.open();
        self.shared.cuts.send_modify(|n| *n += 1);
        open
    }

    /// While `true`, new connections are reset as soon as they arrive;
    /// open ones are left alone (cut them too for a full outage).
    pub fn refuse(&self, refuse: bool) {
        self.set_mode(if refuse { REFUSE } else { FORWARD });
    }

    /// While `true`, new connections are accepted and never answered (nor
    /// forwarded) until the next [`Proxy::cut`].
    pub fn blackhole(&self, blackhole: bool) {
        self.set_mode(if blackhole { BLACKHOLE } else { FORWARD });
    }

    /// From now on, whatever the upstream sends waits `delay` before it is
    /// passed on, read by read (zero: not at all). A server that answers in
    /// turns, as SMTP does, then takes `delay` longer over every reply; what
    /// the client sends goes through at once. Applies to the connections
    /// opened after the call.
    pub fn delay_replies(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.reply_delay_us.store(us, Ordering::SeqCst);
    }

    /// Connections relaying right now.
    pub fn open(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    fn set_mode(&self, mode: u8) {
        self.shared.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Allowed in async code, unlike dropping a runtime.
            runtime.shutdown_background();
        }
    }
}

/// One client connection: refused, held, or relayed until either end
/// closes or a cut resets both.
async fn relay(mut client: TcpStream, shared: Arc<Shared>) {
    let mut cuts = shared.cuts.subscribe();
    match shared.mode.load(Ordering::SeqCst) {
        REFUSE => return reset(&client),
        BLACKHOLE => {
            let _ = cuts.changed().await;
            return reset(&client);
        }
        _ => {}
    }
    let mut upstream =
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(shared.upstream)).await {
            Ok(Ok(upstream)) => upstream,
            _ => return reset(&client),
        };
    shared.open.fetch_add(1, Ordering::SeqCst);
    let delay = Duration::from_micros(shared.reply_delay_us.load(Ordering::SeqCst));
    tokio::select! {
        _ = forward(&mut client, &mut upstream, delay) => {}
        _ = cuts.changed() => {
            reset(&client);
            reset(&upstream);
        }
    }
    shared.open.fetch_sub(1, Ordering::SeqCst);
}

/// Relays both ways until both ends have closed; the upstream's bytes
/// `delay` late.
async fn forward(client: &mut TcpStream, upstream: &mut TcpStream, delay: Duration) {
    if delay.is_zero() {
        let _ = tokio::io::copy_bidirectional(client, upstream).await;
        return;
    }
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    let requests = async {
        let _ = tokio::io::copy(&mut client_read, &mut upstream_write).await;
        let _ = upstream_write.shutdown().await;
    };
    let replies = async {
        let _ = delayed_copy(&mut upstream_read, &mut client_write, delay).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(requests, replies);
}

/// Copies `from` to `to` until the end, holding each read for `delay`.
async fn delayed_copy(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    delay: Duration,
) -> std::io::Result<()> {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        tokio::time::sleep(delay).await;
        to.write_all(&buf[..n]).await?;
    }
}

/// Makes closing the socket send a reset instead of a graceful end.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server; its address.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    /// Sends a line and reads what comes back (empty at a clean end, an
    /// error at a reset, `None` when nothing comes within 300 ms).
    async fn round_trip(stream: &mut TcpStream) -> Option<std::io::Result<Vec<u8>>> {
        let _ = stream.write_all(b"ping").await;
        let mut buf = [0; 4];
        let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf));
        Some(read.await.ok()?.map(|n| buf[..n].to_vec()))
    }

    /// The connection was reset or ended, at once.
    fn closed(trip: Option<std::io::Result<Vec<u8>>>) -> bool {
        match trip {
            Some(Ok(bytes)) => bytes.is_empty(),
            Some(Err(_)) => true,
            None => false,
        }
    }

    #[tokio::test]
    async fn a_cut_resets_open_connections_and_later_ones_are_relayed() {
        let proxy = Proxy::start(echo().await).unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut open).await.unwrap().unwrap(), b"ping");
        assert_eq!(proxy.cut(), 1);
        let mut buf = [0; 4];
        let read = tokio::time::timeout(Duration::from_secs(5), open.read(&mut buf)).await;
        assert!(read.expect("still open").is_err(), "not reset");
        let mut next = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut next).await.unwrap().unwrap(), b"ping");
    }

    #[tokio::test]
    async fn refused_connections_are_reset_and_blackholed_ones_get_nothing() {
        let proxy = Proxy::start(echo().await).unwrap();
        proxy.refuse(true);
        let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(closed(round_trip(&mut refused).await), "not refused");
        proxy.blackhole(true);
        let mut held = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(
            round_trip(&mut held).await.is_none(),
            "a blackhole answered"
        );
        proxy.blackhole(false);
        let mut relayed = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut relayed).await.unwrap().unwrap(), b"ping");
    }

    #[tokio::test]
    async fn delayed_replies_come_late_and_whole() {
        let proxy = Proxy::start(echo().await).unwrap();
        proxy.delay_replies(Duration::from_millis(400));
        let mut slow = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut slow).await.is_none(), "not delayed");
        let mut buf = [0; 4];
        let read = tokio::time::timeout(Duration::from_secs(5), slow.read_exact(&mut buf)).await;
        read.expect("never came").unwrap();
        assert_eq!(&buf, b"ping");
        proxy.delay_replies(Duration::ZERO);
        let mut fast = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut fast).await.unwrap().unwrap(), b"ping");
    }

    #[tokio::test]
    async fn a_connection_to_an_upstream_that_is_down_is_reset() {
        let down = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let proxy = Proxy::start(down).unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(closed(round_trip(&mut stream).await), "not closed");
    }
}
