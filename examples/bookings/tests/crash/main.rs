//! Crashes: the booking service SIGKILLed and restarted under duplicate
//! senders, and killed in the window between the partner's effect and the
//! record of it. On SQLite, or on PostgreSQL with `TEST_POSTGRES_URL` set.
//!
//! The SIGKILL round: lanes of bookings run one after another, each
//! booking (a key of its own, a seat of its own) sent by two senders at
//! once, each retrying with the same key (on no answer, a 409 in-use or a
//! 503 with `Retry-After`) until a final answer, while a killer sends
//! SIGKILL to the service at random moments and restarts it on the same
//! address and database. The partner holds each answer 10 ms after its
//! effect, so kills also land between a step and its record. Afterwards:
//! nothing lost (every booking answered 201 is in the table, confirmed,
//! with the partner's code; every row belongs to a key that was sent),
//! nothing twice (one row per key, one partner effect per booking, both
//! senders of a key got the same bytes, and a replay gives them again).
//!
//! `BOOKINGS_KILLS` (default 5) sets the kills; `BOOKINGS_SOAK=1` makes it
//! 40; `BOOKINGS_SEED` replays a schedule (the seed is printed).

// Each suite uses part of the support module.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{book, listing, send, until_final, Answer, Bookings};
use testkit::new_key;

/// The harnesses load the machine: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CUSTOMERS: usize = 3;
/// Bookings in flight at once, each sent by two senders.
const LANES: usize = 8;
/// Seats 1A to 999K: one per booking.
const SEATS: usize = 999 * 11;
/// How long a kill waits for requests in flight.
const FIND_WORK: Duration = Duration::from_secs(2);
/// How long one booking may take to get a final answer through the kills.
const FINAL_WITHIN: Duration = Duration::from_secs(60);

/// The `n`th seat: 1A, 1B, … 1K, 2A, …
fn seat(n: usize) -> String {
    format!("{}{}", n / 11 + 1, char::from(b'A' + (n % 11) as u8))
}

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One booking and what its two senders got.
struct Sent {
    customer: usize,
    key: String,
    seat: String,
    answers: [Answer; 2],
}

/// What the senders saw along the way, by kind.
#[derive(Default)]
struct Tally(Mutex<BTreeMap<String, usize>>);

impl Tally {
    fn count(&self, kind: impl Into<String>) {
        *self.0.lock().unwrap().entry(kind.into()).or_default() += 1;
    }
}

/// One sender: the same request until a final answer (a 201); anything
/// else final is ruled out and fails the run.
async fn sender(
    customer: testkit::Caller,
    key: String,
    seat: String,
    in_flight: Arc<AtomicUsize>,
    tally: Arc<Tally>,
    mut rng: StdRng,
) -> Result<Answer, String> {
    let deadline = Instant::now() + FINAL_WITHIN;
    loop {
        in_flight.fetch_add(1, Ordering::SeqCst);
        let answer = send(book(&customer, &key, &seat)).await;
        in_flight.fetch_sub(1, Ordering::SeqCst);
        match answer {
            Ok(a) if a.status == 201 => {
                tally.count(if a.replayed { "201 replayed" } else { "201" });
                return Ok(a);
            }
            Ok(a) if a.in_use() => tally.count("409 idempotency-key-in-use"),
            Ok(a) if a.status == 503 && a.retry_after.is_some() => {
                tally.count(format!("503 {}", a.problem().unwrap_or_default()))
            }
            Ok(a) => return Err(format!("{key}: an answer the contract rules out: {a:?}")),
            Err(_) => tally.count("no answer (killed)"),
        }
        if Instant::now() > deadline {
            return Err(format!("{key}: no final answer within {FINAL_WITHIN:?}"));
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..120))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_rounds_with_duplicate_senders_lose_nothing_and_run_nothing_twice() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let soak = std::env::var_os("BOOKINGS_SOAK").is_some();
    let kills = knob("BOOKINGS_KILLS", if soak { 40 } else { 5 });
    let seed = std::env::var("BOOKINGS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("SIGKILL round: BOOKINGS_SEED={seed} BOOKINGS_KILLS={kills}");
    let started = Instant::now();

    let (partner, bookings) = Bookings::fresh(
        "10ms",
        &["--operation-lease", "1s", "--complete-interval", "250ms"],
    )
    .await
    .unwrap();
    let customers: Vec<testkit::Caller> = (0..CUSTOMERS)
        .map(|c| bookings.customer(&format!("crash-{c}-{seed:x}")))
        .collect();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let killing = Arc::new(AtomicBool::new(true));
    let seats = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Tally::default());

    // The killer owns the process: SIGKILL at random moments, restart on
    // the same address, until its kills are done (or the seats run out).
    let killer = {
        let (in_flight, killing, seats) = (in_flight.clone(), killing.clone(), seats.clone());
        let mut bookings = bookings;
        tokio::task::spawn_blocking(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut found = Vec::new();
            while found.len() < kills && seats.load(Ordering::SeqCst) < SEATS {
                std::thread::sleep(Duration::from_millis(rng.random_range(300..900)));
                // Right after a kill the senders of the bookings it cut
                // wait for their leases: strike once requests are out.
                let waiting = Instant::now();
                while in_flight.load(Ordering::SeqCst) == 0 && waiting.elapsed() < FIND_WORK {
                    std::thread::sleep(Duration::from_millis(1));
                }
                found.push(in_flight.load(Ordering::SeqCst));
                bookings.process.kill().unwrap();
                bookings.process.restart().unwrap();
            }
            killing.store(false, Ordering::SeqCst);
            (bookings, found)
        })
    };

    // Lanes of bookings, each sent twice at once, until the killer is done.
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            let (customers, in_flight, killing, seats, tally) = (
                customers.clone(),
                in_flight.clone(),
                killing.clone(),
                seats.clone(),
                tally.clone(),
            );
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed ^ (lane as u64 + 1));
                let mut sent = Vec::new();
                while killing.load(Ordering::SeqCst) {
                    let n = seats.fetch_add(1, Ordering::SeqCst);
                    if n >= SEATS {
                        break;
                    }
                    let (customer, key, seat) =
                        (rng.random_range(0..CUSTOMERS), new_key(), seat(n));
                    let copies = [0, 1].map(|_| {
                        tokio::spawn(sender(
                            customers[customer].clone(),
                            key.clone(),
                            seat.clone(),
                            in_flight.clone(),
                            tally.clone(),
                            StdRng::seed_from_u64(rng.random()),
                        ))
                    });
                    let mut answers = Vec::new();
                    for copy in copies {
                        answers.push(copy.await.unwrap()?);
                    }
                    let answers: [Answer; 2] = answers.try_into().unwrap();
                    sent.push(Sent {
                        customer,
                        key,
                        seat,
                        answers,
                    });
                    // A customer's next booking comes a moment later.
                    let pause = rng.random_range(0..30);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Ok::<_, String>(sent)
            })
        })
        .collect();
    let mut sent = Vec::new();
    for lane in lanes {
        sent.extend(
            lane.await
                .unwrap()
                .unwrap_or_else(|e| panic!("{e} (BOOKINGS_SEED={seed})")),
        );
    }
    let (bookings, found) = killer.await.unwrap();
    let sending = started.elapsed();

    // Nothing twice in the answers: both senders of a key got one booking.
    let mut answered: HashMap<(usize, String), (&Sent, serde_json::Value)> = HashMap::new();
    for s in &sent {
        let [a, b] = &s.answers;
        assert_eq!(a.body, b.body, "{}: two answers for one key", s.key);
        let booking = a.json();
        assert_eq!(booking["seat"], s.seat.as_str());
        assert_eq!(booking["status"], "confirmed");
        answered.insert((s.customer, s.key.clone()), (s, booking));
    }

    // Nothing lost, nothing twice in the table: every row is a key's, one
    // per key, confirmed with the code its answer carries.
    let mut rows_seen = 0;
    for (c, customer) in customers.iter().enumerate() {
        let mut keys = HashSet::new();
        for row in listing(customer).await.unwrap() {
            rows_seen += 1;
            let key = row["idempotency_key"].as_str().unwrap().to_owned();
            assert!(
                keys.insert(key.clone()),
                "two rows for the key {key}: {row}"
            );
            let Some((_, booking)) = answered.get(&(c, key.clone())) else {
                panic!("a row whose key was never answered 201: {row}");
            };
            assert_eq!(row["status"], "confirmed", "{row}");
            assert_eq!(row["id"], booking["id"], "{row}");
            assert_eq!(row["confirmation"], booking["confirmation"], "{row}");
        }
    }
    assert_eq!(
        rows_seen,
        sent.len(),
        "every booking answered 201 has its row"
    );
    assert_eq!(
        bookings.rows("").await.unwrap() as usize,
        sent.len(),
        "no row of anyone else"
    );

    // One partner effect per booking, with the code the booking recorded.
    let ledger = partner.ledger().await.unwrap();
    assert_eq!(
        ledger.effects.len(),
        sent.len(),
        "one partner effect per booking"
    );
    let effects: HashMap<&str, &support::Effect> = ledger
        .effects
        .iter()
        .map(|e| (e.booking.as_str(), e))
        .collect();
    assert_eq!(effects.len(), sent.len(), "one effect per booking id");
    for (s, booking) in answered.values() {
        let effect = effects[booking["id"].as_str().unwrap()];
        assert_eq!(effect.seat, s.seat);
        assert_eq!(
            effect.confirmation,
            booking["confirmation"].as_str().unwrap()
        );
    }
    let asked_again = ledger.effects.iter().filter(|e| e.requests > 1).count();

    // And the record answers every key with the same bytes again.
    for s in &sent {
        let replay = send(book(&customers[s.customer], &s.key, &s.seat))
            .await
            .unwrap();
        assert_eq!((replay.status, replay.replayed), (201, true), "{}", s.key);
        assert_eq!(replay.body, s.answers[0].body, "{}", s.key);
    }

    let landed = found.iter().filter(|n| **n > 0).count();
    println!(
        "{} bookings, {} kills ({landed} with requests in flight), {asked_again} partner \
         calls repeated under their key after a kill, in {sending:.1?}; answers seen:",
        sent.len(),
        found.len()
    );
    for (kind, n) in tally.0.lock().unwrap().iter() {
        println!("  {n:6}  {kind}");
    }
    assert!(found.len() >= kills.min(1), "the killer killed");
    assert!(
        landed * 2 >= found.len(),
        "most kills land on requests in flight: {found:?}"
    );
    assert!(
        !bookings.process.log_text().contains("panicked"),
        "the service panicked"
    );
}

/// Operations resumed since the service's last start: by the completer,
/// by a retry (no series yet: none).
async fn resumed(bookings: &Bookings) -> (f64, f64) {
    let metrics = bookings.metrics().await.unwrap();
    let by = |who| {
        metrics
            .counter("operations_resumed_total", &[("by", who)])
            .unwrap_or(0.0)
    };
    (by("completer"), by("retry"))
}

/// The partner's one effect of the crashed booking: it happened once,
/// and was asked for twice under the same key (the dead request, then the
/// one that finished it).
async fn the_one_effect_asked_twice(partner: &support::Partner) -> support::Effect {
    let ledger = partner.ledger().await.unwrap();
    assert_eq!(
        ledger.effects.len(),
        1,
        "the partner's effect happened once: {ledger:?}"
    );
    let effect = ledger.effects[0].clone();
    assert_eq!(
        effect.requests, 2,
        "asked again, under the same key: {ledger:?}"
    );
    effect
}

/// Kills the service while the partner holds its answer to a booking's
/// step (the effect recorded there, not here), releases the partner,
/// restarts the service: the booking's row is still `held` at
/// `seat_held`. What the partner's ledger and the booking then show.
async fn crash_between_step_and_record(
    flags: &[&str],
) -> (support::Partner, Bookings, testkit::Caller, String) {
    let (partner, mut bookings) = Bookings::fresh("0s", flags).await.unwrap();
    let ada = bookings.customer("ada");
    let key = new_key();
    partner.hold().await.unwrap();
    let request = tokio::spawn(send(book(&ada, &key, "7C")));
    partner
        .wait_for(|l| l.effects.len() == 1 && l.held == 1)
        .await
        .unwrap();
    assert_eq!(bookings.rows("WHERE status = 'held'").await.unwrap(), 1);

    bookings.process.kill().unwrap();
    let cut = request.await.unwrap();
    assert!(cut.is_err(), "the killed request got an answer: {cut:?}");
    partner.release().await.unwrap();
    // The step's effect is at the partner; its record is not here.
    assert_eq!(bookings.rows("WHERE status = 'held'").await.unwrap(), 1);
    tokio::task::block_in_place(|| bookings.process.restart()).unwrap();
    (partner, bookings, ada, key)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_step_and_its_record_is_finished_by_the_completer_without_a_second_effect(
) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (partner, bookings, ada, key) =
        crash_between_step_and_record(&["--operation-lease", "1s", "--complete-interval", "200ms"])
            .await;

    // Nobody retries: the completer takes the abandoned booking over.
    let deadline = Instant::now() + Duration::from_secs(15);
    let row = loop {
        let rows = listing(&ada).await.unwrap();
        if rows[0]["status"] == "confirmed" {
            break rows[0].clone();
        }
        assert!(Instant::now() < deadline, "never confirmed: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(resumed(&bookings).await, (1.0, 0.0), "(completer, retry)");

    let effect = &the_one_effect_asked_twice(&partner).await;
    assert_eq!(
        (effect.booking.as_str(), effect.seat.as_str()),
        (row["id"].as_str().unwrap(), "7C")
    );
    assert_eq!(row["confirmation"], effect.confirmation.as_str());

    let retry = send(book(&ada, &key, "7C")).await.unwrap();
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    let body = serde_json::json!({
        "id": row["id"], "seat": "7C", "status": "confirmed", "confirmation": effect.confirmation,
    });
    assert_eq!(retry.json(), body);
    assert_eq!(bookings.rows("").await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_step_and_its_record_is_finished_by_a_retry_without_a_second_effect() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // No completer to speak of: the retry resumes it once the dead
    // request's lease runs out.
    let (partner, bookings, ada, key) =
        crash_between_step_and_record(&["--operation-lease", "3s", "--complete-interval", "1h"])
            .await;

    let finished = until_final(|| book(&ada, &key, "7C")).await.unwrap();
    assert_eq!(
        (finished.status, finished.replayed),
        (201, false),
        "{finished:?}"
    );
    assert_eq!(resumed(&bookings).await, (0.0, 1.0), "(completer, retry)");
    let replay = send(book(&ada, &key, "7C")).await.unwrap();
    assert!(replay.replayed);
    assert_eq!((replay.status, &replay.body), (201, &finished.body));

    let effect = &the_one_effect_asked_twice(&partner).await;
    let booking = finished.json();
    assert_eq!(booking["id"], effect.booking.as_str());
    assert_eq!(booking["confirmation"], effect.confirmation.as_str());
    assert_eq!(
        bookings.rows("WHERE status = 'confirmed'").await.unwrap(),
        1
    );
    assert_eq!(bookings.rows("").await.unwrap(), 1);
}
