//! Load generator for `docs/BENCHMARKS.md` (driven by `scripts/bench.sh`),
//! against the product's server or a floor server (`floor`) alike.
//!
//! Keeps N keep-alive HTTP/1.1 connections busy for a while (or for a fixed
//! number of requests) and prints one line: requests/s, p50, p99.

use bench::{connect, Sender};
use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "Bearer bench-token-0123456789";
const BODY: &str = r#"{"amount":1999,"currency":"usd","description":"cart 42"}"#;
/// The same charge asking for a receipt (`--receipts`).
const BODY_WITH_RECEIPT: &str = r#"{"amount":1999,"currency":"usd","description":"cart 42","receipt_email":"shopper@shop.example"}"#;

#[derive(Parser)]
#[command(about = "Drives the server with keyed requests and prints requests/s, p50 and p99")]
struct Args {
    /// The server's address, `host:port`.
    #[arg(long)]
    addr: String,
    /// What to send.
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// How long to run (ignored by `storm`).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Requests in a `storm`; records for `fill-expired` and `fill-live`.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// For `fill-expired` and `fill-live`: the SQLite file (already
    /// migrated by a server run).
    #[arg(long)]
    database: Option<std::path::PathBuf>,
    /// Every charge asks for a receipt (`receipt_email`): the outbox's
    /// backlog for `receipts drain`.
    #[arg(long)]
    receipts: bool,
    /// New keys from this many callers (bearer tokens), connection `i`
    /// sending as caller `i % callers`: on Citus, where records are
    /// sharded by the caller, one caller is one shard. Replays and storms
    /// stay one caller's.
    #[arg(long, default_value_t = 1)]
    callers: usize,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum Scenario {
    /// `POST /charges`, a new key every request.
    NewKey,
    /// `POST /charges`, one key already recorded: every request a replay.
    Replay,
    /// `POST /bench/charges`: the same insert with no idempotency record.
    Unrecorded,
    /// `--requests` copies of one new request, one key, all at once over
    /// the connections.
    Storm,
    /// `GET /inventory/sku-tee`: one indexed read, the read floor.
    Read,
    /// Not a load: writes `--requests` already-expired records straight
    /// into `--database`, a backlog for the sweeper.
    FillExpired,
    /// Not a load: writes `--requests` live records of loadgen's own caller
    /// under random keys straight into `--database`: the file a day of
    /// traffic leaves, which new keys then land among.
    FillLive,
    /// Not a load: writes `--requests` charges of loadgen's own caller
    /// under random keys straight into the keyed floor's `--database`
    /// (`floor --keyed`, already run once to create it): the same file
    /// for the minimal idempotent floor.
    FillKeyed,
}

struct Sample {
    latencies: Vec<Duration>,
    non_2xx: usize,
    errors: usize,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Some(fill) = match args.scenario {
        Scenario::FillExpired => Some(Fill::Expired),
        Scenario::FillLive => Some(Fill::Live),
        Scenario::FillKeyed => Some(Fill::Keyed),
        _ => None,
    } {
        let path = args
            .database
            .as_deref()
            .expect("fill-expired, fill-live and fill-keyed need --database");
        return fill.write(path, args.requests);
    }
    let run_id = std::process::id();
    let storm_key = format!("storm-{run_id}");
    if args.scenario == Scenario::Replay {
        let mut conn = connect(&args.addr).await;
        let status = send(
            &mut conn,
            &args.addr,
            args.scenario,
            TOKEN,
            "replay-key",
            BODY,
        )
        .await
        .expect("priming request");
        assert!(status < 300, "priming request answered {status}");
    }
    let body = if args.receipts {
        BODY_WITH_RECEIPT
    } else {
        BODY
    };
    let remaining = Arc::new(AtomicUsize::new(args.requests));
    let started = Instant::now();
    let deadline = started + args.duration;
    let mut workers = Vec::new();
    for connection in 0..args.connections {
        let addr = args.addr.clone();
        let token = match args.scenario {
            Scenario::NewKey if args.callers > 1 => {
                format!("{TOKEN}-{}", connection % args.callers)
            }
            _ => TOKEN.to_owned(),
        };
        let storm_key = storm_key.clone();
        let remaining = remaining.clone();
        let scenario = args.scenario;
        workers.push(tokio::spawn(async move {
            let mut conn = connect(&addr).await;
            let mut sample = Sample {
                latencies: Vec::with_capacity(100_000),
                non_2xx: 0,
                errors: 0,
            };
            loop {
                let more = match scenario {
                    Scenario::Storm => remaining
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok(),
                    _ => Instant::now() < deadline,
                };
                if !more {
                    break;
                }
                let key = match scenario {
                    Scenario::Storm => storm_key.clone(),
                    Scenario::Replay => "replay-key".to_owned(),
                    // A UUID v4, as the browser client makes them: each
                    // new key lands at a random place in the record's
                    // B-tree, as in production.
                    _ => uuid::Uuid::new_v4().to_string(),
                };
                let t = Instant::now();
                match send(&mut conn, &addr, scenario, &token, &key, body).await {
                    Ok(status) => {
                        sample.latencies.push(t.elapsed());
                        if !(200..300).contains(&status) {
                            sample.non_2xx += 1;
                        }
                    }
                    Err(_) => {
                        sample.errors += 1;
                        conn = connect(&addr).await;
                    }
                }
            }
            sample
        }));
    }
    let mut latencies = Vec::new();
    let (mut non_2xx, mut errors) = (0, 0);
    for worker in workers {
        let sample = worker.await.expect("worker");
        latencies.extend(sample.latencies);
        non_2xx += sample.non_2xx;
        errors += sample.errors;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "scenario={:?} connections={} requests={} seconds={:.2} rps={:.0} p50_ms={:.2} p99_ms={:.2} max_ms={:.2} non_2xx={} errors={}",
        args.scenario,
        args.connections,
        latencies.len(),
        elapsed,
        latencies.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        pct(1.0),
        non_2xx,
        errors
    );
}

async fn send(
    conn: &mut Sender,
    addr: &str,
    scenario: Scenario,
    token: &str,
    key: &str,
    body: &'static str,
) -> Result<u16, hyper::Error> {
    let request = match scenario {
        Scenario::Read => Request::get("/inventory/sku-tee")
            .header("host", addr)
            .body(Full::new(Bytes::new())),
        _ => Request::post("/charges")
            .header("host", addr)
            .header("authorization", token)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from_static(body.as_bytes()))),
    }
    .expect("a valid request");
    conn.ready().await?;
    let response = conn.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

/// Records written straight into a SQLite file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Expired an hour ago, one caller per 100 records.
    Expired,
    /// Live for another day, all loadgen's own caller.
    Live,
    /// The keyed floor's charges, all loadgen's own caller.
    Keyed,
}

impl Fill {
    /// The name printed, and the records' creation and expiry (Unix ms)
    /// for a fill at `now_ms`.
    fn shape(self, now_ms: i64) -> (&'static str, i64, i64) {
        let day = 86_400_000;
        match self {
            Fill::Expired => ("expired", now_ms - 3_600_000 - day, now_ms - 3_600_000),
            Fill::Live => ("live", now_ms, now_ms + day),
            Fill::Keyed => ("keyed floor", now_ms, now_ms + day),
        }
    }

    /// The caller of record `i`; `own` is loadgen's.
    fn caller(self, i: usize, own: [u8; 32]) -> [u8; 32] {
        match self {
            Fill::Expired => [(i / 100) as u8; 32],
            Fill::Live | Fill::Keyed => own,
        }
    }

    /// Writes `count` records under random keys, as a day of traffic
    /// would leave them.
    fn write(self, path: &std::path::Path, count: usize) {
        let started = Instant::now();
        let mut conn = rusqlite::Connection::open(path).expect("open the database");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("WAL");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let (kind, created, expires) = self.shape(now_ms);
        // The server's caller is the SHA-256 of the bearer token.
        let own: [u8; 32] = Sha256::digest(TOKEN.trim_start_matches("Bearer ")).into();
        let tx = conn.transaction().expect("begin");
        if self == Fill::Keyed {
            let mut insert = tx
                .prepare(
                    "INSERT INTO keyed_charges (id, caller, key, amount, currency, description, created)
                     VALUES (?1, ?2, ?3, 1999, 'usd', 'cart 42', ?4)",
                )
                .expect("prepare");
            for _ in 0..count {
                let id = format!("ch_{}", uuid::Uuid::now_v7().simple());
                let key = uuid::Uuid::new_v4().to_string();
                insert
                    .execute(rusqlite::params![id, &own[..], key, created / 1000])
                    .expect("insert");
            }
        } else {
            let mut insert = tx
                .prepare(
                    "INSERT INTO idempotency_keys
                       (caller, key, fingerprint, recovery_point, status, body, created_at, expires_at)
                     VALUES (?1, ?2, ?3, 'finished', 201, ?4, ?5, ?6)",
                )
                .expect("prepare");
            let body = br#"{"id":"ch_0","amount":1999,"currency":"usd","description":"cart 42","status":"succeeded","created":0}"#;
            for i in 0..count {
                let caller = self.caller(i, own);
                let key = uuid::Uuid::new_v4().to_string();
                insert
                    .execute(rusqlite::params![
                        &caller[..],
                        key,
                        &[0u8; 32][..],
                        &body[..],
                        created,
                        expires
                    ])
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
        println!(
            "filled {count} {kind} records in {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
}
