//! The receipts cases of `docs/BENCHMARKS.md` (driven by `scripts/bench.sh`):
//!
//! - `floor`: MailDev's own intake, a plain SMTP sender (lettre's pooled
//!   transport) handing it receipt-shaped messages over N connections at
//!   once, as fast as it takes them;
//! - `relay`: the server's relay (`--smtp-url` at the same MailDev kind):
//!   M local charges with a `receipt_email`, then how fast their receipts
//!   are accepted, read from the server's `receipts_sent_total`;
//! - `drain`: after a load that wrote receipts (loadgen `--receipts`), how
//!   long until the outbox is empty, and whether the inbox holds them all.
//!
//! `floor` and `relay` time from the first message accepted to the last, so
//! neither counts connecting or the relay's first look at the outbox; each
//! prints one line with `per_s=`.

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use lettre::message::header::ContentType;
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "Bearer bench-receipts-0123456789";
/// The relay's sender, and a recipient.
const FROM: &str = "Once Shop <receipts@exactly-once.invalid>";
const TO: &str = "shopper@shop.example";
/// How often the server's metrics (or MailDev's inbox) are read.
const POLL: Duration = Duration::from_millis(5);

#[derive(Parser)]
#[command(about = "Receipts per second into MailDev: the floor, the relay, the backlog")]
struct Args {
    #[command(subcommand)]
    case: Case,
}

#[derive(Subcommand)]
enum Case {
    /// Sends `--messages` receipt-shaped messages to `--smtp` over
    /// `--connections` pooled connections at once.
    Floor {
        /// MailDev's SMTP address, `host:port`.
        #[arg(long)]
        smtp: String,
        #[arg(long, default_value_t = 4)]
        connections: usize,
        #[arg(long, default_value_t = 2000)]
        messages: usize,
    },
    /// Pays `--messages` local charges with a `receipt_email` at the server
    /// (which has `--smtp-url`), then waits until it counts them all sent.
    Relay {
        /// The server's address, `host:port`.
        #[arg(long)]
        addr: String,
        /// MailDev's web address, `http://host:port`, to count the inbox.
        #[arg(long)]
        maildev: String,
        #[arg(long, default_value_t = 2000)]
        messages: usize,
        /// HTTP connections paying the charges.
        #[arg(long, default_value_t = 8)]
        connections: usize,
    },
    /// Waits until the server's outbox is empty; how long that took, and
    /// how many messages MailDev holds.
    Drain {
        #[arg(long)]
        addr: String,
        #[arg(long)]
        maildev: String,
        /// Give up after this long.
        #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
}

#[tokio::main]
async fn main() {
    match Args::parse().case {
        Case::Floor {
            smtp,
            connections,
            messages,
        } => floor(&smtp, connections, messages).await,
        Case::Relay {
            addr,
            maildev,
            messages,
            connections,
        } => relay(&addr, &maildev, messages, connections).await,
        Case::Drain {
            addr,
            maildev,
            timeout,
        } => drain(&addr, &maildev, timeout).await,
    }
}

/// A message shaped as the relay's receipts are.
fn receipt(i: usize) -> Message {
    let id = format!("ch_{:032x}", i);
    Message::builder()
        .from(FROM.parse().expect("a sender"))
        .to(TO.parse().expect("a recipient"))
        .subject("Your receipt: 19.99 USD")
        .message_id(Some(format!("<receipt.{id}@exactly-once>")))
        .header(ContentType::TEXT_PLAIN)
        .body(format!(
            "Thank you for your order.\n\nAmount: 19.99 USD\nCharge: {id}\nFor: cart 42\n\
             \nThis receipt is sent once per payment.\n"
        ))
        .expect("a message")
}

async fn floor(smtp: &str, connections: usize, messages: usize) {
    let (host, port) = smtp.rsplit_once(':').expect("--smtp host:port");
    let mailer = Arc::new(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(port.parse().expect("a port"))
            .pool_config(PoolConfig::new().max_size(connections as u32))
            .build(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut senders = Vec::new();
    for _ in 0..connections {
        let (mailer, next) = (mailer.clone(), next.clone());
        senders.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= messages {
                    return accepted;
                }
                mailer.send(receipt(i)).await.expect("MailDev accepts");
                accepted.push(started.elapsed());
            }
        }));
    }
    let mut accepted = Vec::new();
    for sender in senders {
        accepted.extend(sender.await.expect("a sender"));
    }
    accepted.sort_unstable();
    let (first, last) = (accepted[0], accepted[accepted.len() - 1]);
    println!(
        "receipts floor connections={connections} messages={messages} seconds={:.2} per_s={:.0}",
        (last - first).as_secs_f64(),
        rate(messages, first, last)
    );
}

/// Messages a second between the first acceptance and the last.
fn rate(messages: usize, first: Duration, last: Duration) -> f64 {
    let span = (last - first).as_secs_f64();
    if span > 0.0 {
        (messages - 1) as f64 / span
    } else {
        0.0
    }
}

async fn relay(addr: &str, maildev: &str, messages: usize, connections: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let run = std::process::id();
    let mut payers = Vec::new();
    for _ in 0..connections {
        let (addr, next) = (addr.to_owned(), next.clone());
        payers.push(tokio::spawn(async move {
            let mut conn = Http::connect(&addr).await;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= messages {
                    return;
                }
                let body = format!(
                    r#"{{"amount":1999,"currency":"usd","description":"cart 42","receipt_email":"{TO}"}}"#
                );
                let key = format!("receipt-{run}-{i}");
                let (status, _) = conn.post_charge(&key, body).await;
                assert_eq!(status, 201, "a charge answered {status}");
            }
        }));
    }
    let started = Instant::now();
    let mut first = None;
    let mut metrics = Http::connect(addr).await;
    let last = loop {
        let sent = metrics.gauge("receipts_sent_total").await as usize;
        let now = started.elapsed();
        if sent >= 1 && first.is_none() {
            first = Some(now);
        }
        if sent >= messages {
            break now;
        }
        assert!(
            now < Duration::from_secs(600),
            "only {sent} of {messages} sent in 600 s"
        );
        tokio::time::sleep(POLL).await;
    };
    for payer in payers {
        payer.await.expect("a payer");
    }
    let first = first.expect("a first receipt");
    println!(
        "receipts relay messages={messages} seconds={:.2} per_s={:.0} inbox={}",
        (last - first).as_secs_f64(),
        rate(messages, first, last),
        inbox(maildev).await
    );
}

async fn drain(addr: &str, maildev: &str, timeout: Duration) {
    let started = Instant::now();
    let mut metrics = Http::connect(addr).await;
    loop {
        if metrics.gauge("outbox_waiting").await == 0.0 {
            break;
        }
        assert!(started.elapsed() < timeout, "the outbox did not drain");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drained = started.elapsed();
    let sent = metrics.gauge("receipts_sent_total").await;
    println!(
        "receipts backlog drained_after_s={:.2} sent={sent:.0} inbox={}",
        drained.as_secs_f64(),
        inbox(maildev).await
    );
}

/// How many messages MailDev holds (`GET /api/email`, read once: a big answer).
async fn inbox(maildev: &str) -> usize {
    let url = maildev.trim_end_matches('/');
    let addr = url
        .strip_prefix("http://")
        .expect("--maildev http://host:port");
    let mut conn = Http::connect(addr).await;
    let (status, body) = conn.get("/api/email").await;
    assert_eq!(status, 200, "MailDev answered {status}");
    let all: serde_json::Value = serde_json::from_slice(&body).expect("MailDev's JSON");
    all.as_array().map_or(0, Vec::len)
}

/// A keep-alive HTTP/1.1 connection.
struct Http {
    addr: String,
    sender: SendRequest<Full<Bytes>>,
}

impl Http {
    async fn connect(addr: &str) -> Self {
        let sender = bench::connect(addr).await;
        Self {
            addr: addr.to_owned(),
            sender,
        }
    }

    async fn post_charge(&mut self, key: &str, body: String) -> (u16, Bytes) {
        let request = Request::post("/charges")
            .header("host", &self.addr)
            .header("authorization", TOKEN)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from(body)));
        self.call(request.expect("a valid request")).await
    }

    async fn get(&mut self, path: &str) -> (u16, Bytes) {
        let request = Request::get(path)
            .header("host", &self.addr)
            .body(Full::new(Bytes::new()));
        self.call(request.expect("a valid request")).await
    }

    /// The value of the unlabelled series `name` in `GET /metrics`.
    async fn gauge(&mut self, name: &str) -> f64 {
        let (status, body) = self.get("/metrics").await;
        assert_eq!(status, 200, "GET /metrics answered {status}");
        let text = String::from_utf8_lossy(&body);
        text.lines()
            .find_map(|line| {
                let (series, value) = line.split_once(' ')?;
                (series == name).then(|| value.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no {name} in GET /metrics"))
    }

    async fn call(&mut self, request: Request<Full<Bytes>>) -> (u16, Bytes) {
        self.sender.ready().await.expect("the connection");
        let response = self.sender.send_request(request).await.expect("an answer");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.expect("a body");
        (status, body.to_bytes())
    }
}
