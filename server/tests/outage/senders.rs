//! The load: operations that keep coming, most sent by two senders at
//! once (same key and body, one to each instance, retrying after network
//! errors, 409 and 503 as a client would), every fourth sent once only,
//! as by a client that gave up. Every answer is classified and counted in
//! the [`Tally`], and the ones the contract rules out are kept.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{AnswerKinds, Caller};

/// Operations under way at once.
const IN_FLIGHT: usize = 24;
const ONE_SHOT_EVERY: usize = 4;

/// How one attempt was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 201, first run.
    Ran,
    /// 201 with `Idempotent-Replayed: true`.
    Replayed,
    /// 503 whose detail says nothing was done.
    NothingDone,
    /// 503 whose detail says the commit's outcome is unknown.
    OutcomeUnknown,
    /// 409 `idempotency-key-in-use`.
    InUse,
    /// No answer (reset, timeout).
    Lost,
    /// Anything else (kept as forbidden).
    Other,
}

impl Answer {
    /// The attempt may be the one that created the operation's charge.
    pub(crate) fn could_have_run(self) -> bool {
        matches!(self, Self::Ran | Self::OutcomeUnknown | Self::Lost)
    }

    fn is_201(self) -> bool {
        matches!(self, Self::Ran | Self::Replayed)
    }

    /// Its row in the table of answers.
    fn label(self, status: u16) -> String {
        match self {
            Self::Ran => "201".into(),
            Self::Replayed => "201 replayed".into(),
            Self::NothingDone => "503 nothing was done".into(),
            Self::OutcomeUnknown => OUTCOME_UNKNOWN.into(),
            Self::InUse => "409 in use".into(),
            Self::Lost => "no answer".into(),
            Self::Other => status.to_string(),
        }
    }
}

/// The row of the answers that say the outcome is unknown.
pub(crate) const OUTCOME_UNKNOWN: &str = "503 outcome unknown";

/// What the senders and the chaos driver saw.
#[derive(Default)]
pub(crate) struct Tally {
    /// Every answer by its row in the table, and the answers (and health
    /// checks) the contract rules out.
    pub(crate) kinds: AnswerKinds,
    /// Every answer of each operation, in order.
    pub(crate) answers: Mutex<HashMap<usize, Vec<Answer>>>,
    /// The first 201 body of each operation.
    pub(crate) bodies: Mutex<HashMap<usize, Vec<u8>>>,
    /// Requests out right now.
    pub(crate) in_flight: AtomicUsize,
    /// The database is unreachable right now (set by the driver).
    pub(crate) outage: AtomicBool,
    /// Answers sent and received during an outage.
    pub(crate) outage_answers: AtomicUsize,
    /// The first 201 of each instance since [`Tally::arm`].
    first_201: [Mutex<Option<Instant>>; 2],
}

impl Tally {
    /// Forgets the first 201s seen, to time the next ones.
    pub(crate) fn arm(&self) {
        for first in &self.first_201 {
            *first.lock().unwrap() = None;
        }
    }

    /// When each instance answered its first 201 since [`Tally::arm`].
    pub(crate) fn first_201s(&self) -> [Option<Instant>; 2] {
        self.first_201.each_ref().map(|f| *f.lock().unwrap())
    }
}

/// One logical operation: a key, a body, and its caller at each instance.
#[derive(Clone)]
pub(crate) struct Operation {
    pub(crate) id: usize,
    pub(crate) callers: [Caller; 2],
    pub(crate) key: String,
    amount: i64,
    pub(crate) one_shot: bool,
}

impl Operation {
    /// Its own description: its charges carry it.
    pub(crate) fn description(&self) -> String {
        format!("outage-op-{}", self.id)
    }

    pub(crate) fn body(&self) -> Value {
        json!({"amount": self.amount, "currency": "usd", "description": self.description()})
    }
}

/// Starts operations, [`IN_FLIGHT`] at a time, for the callers
/// `callers(token)` (one per instance) of random `tokens`, until `done()`;
/// returns them once every sender has finished.
pub(crate) async fn keep_coming(
    tokens: &[String],
    callers: impl Fn(&str) -> [Caller; 2],
    tally: &Arc<Tally>,
    seed: u64,
    done: impl Fn() -> bool,
) -> Vec<Operation> {
    let mut rng = StdRng::seed_from_u64(seed);
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut operations = Vec::new();
    let mut tasks = Vec::new();
    while !done() {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let id = operations.len();
        let op = Operation {
            id,
            callers: callers(&tokens[rng.random_range(0..tokens.len())]),
            key: testkit::new_key(),
            amount: rng.random_range(1..100_000),
            one_shot: id % ONE_SHOT_EVERY == 0,
        };
        operations.push(op.clone());
        let (op, tally) = (op.clone(), tally.clone());
        let rngs = [0, 1].map(|n| StdRng::seed_from_u64(seed ^ (id as u64) << 8 ^ n));
        tasks.push(tokio::spawn(async move {
            let _slot = slot;
            let [first, second] = [0, 1].map(|n| (op.id + n) % 2);
            if op.one_shot {
                attempt(&op, second, &tally).await;
            } else {
                let [mut a, mut b] = rngs;
                tokio::join!(
                    send_until_created(&op, first, &tally, &mut a),
                    send_until_created(&op, second, &tally, &mut b),
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("a sender failed");
    }
    operations
}

/// Sends `op` to `instance` until a 201, waiting `Retry-After` and a
/// little more between attempts.
async fn send_until_created(op: &Operation, instance: usize, tally: &Tally, rng: &mut StdRng) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "op {} never got a 201", op.id);
        let (answer, retry_after) = attempt(op, instance, tally).await;
        if answer.is_201() {
            return;
        }
        let jitter = Duration::from_millis(rng.random_range(5..300));
        tokio::time::sleep(retry_after + jitter).await;
    }
}

/// Sends `op` once to `instance`; classifies, counts and checks the
/// answer; returns it with the `Retry-After` it asked for.
async fn attempt(op: &Operation, instance: usize, tally: &Tally) -> (Answer, Duration) {
    let outage_at_start = tally.outage.load(Ordering::SeqCst);
    tally.in_flight.fetch_add(1, Ordering::SeqCst);
    let sent = op.callers[instance]
        .post_keyed("/charges", &op.key, &op.body())
        .await;
    let read = match sent {
        Ok(response) => {
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            response.bytes().await.ok().map(|b| (status, headers, b))
        }
        Err(_) => None,
    };
    tally.in_flight.fetch_sub(1, Ordering::SeqCst);
    let (answer, retry_after) = match &read {
        None => (Answer::Lost, None),
        Some((status, headers, body)) => classify(*status, headers, body),
    };
    let status = read.as_ref().map_or(0, |(status, _, _)| *status);
    let body = read
        .as_ref()
        .map(|(_, _, body)| &body[..])
        .unwrap_or_default();
    let needs_retry_after = matches!(answer, Answer::InUse) || status == 503;
    if answer == Answer::Other || (needs_retry_after && retry_after.is_none()) {
        tally.kinds.forbid(format!(
            "op {}: {status} (Retry-After: {retry_after:?}): {}",
            op.id,
            String::from_utf8_lossy(body)
        ));
    }
    if answer.is_201() {
        tally.first_201[instance]
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
        let mut bodies = tally.bodies.lock().unwrap();
        if bodies.entry(op.id).or_insert_with(|| body.to_vec()) != body {
            tally
                .kinds
                .forbid(format!("op {}: two different 201 bodies", op.id));
        }
    }
    if outage_at_start && tally.outage.load(Ordering::SeqCst) {
        tally.outage_answers.fetch_add(1, Ordering::SeqCst);
        if !matches!(answer, Answer::NothingDone | Answer::OutcomeUnknown) {
            tally.kinds.forbid(format!(
                "op {}: {answer:?} while the database was gone",
                op.id
            ));
        }
    }
    tally.kinds.count(answer.label(status));
    let mut answers = tally.answers.lock().unwrap();
    answers.entry(op.id).or_default().push(answer);
    (answer, retry_after.unwrap_or_default())
}

/// What an answer says, and the `Retry-After` it carries.
fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> (Answer, Option<Duration>) {
    let problem: Value = serde_json::from_slice(body).unwrap_or_default();
    let kind = problem["type"].as_str().unwrap_or_default();
    let detail = problem["detail"].as_str().unwrap_or_default();
    let retry_after = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .map(Duration::from_secs);
    let replayed = (headers.get("idempotent-replayed")).is_some_and(|v| v == "true");
    let unavailable = status == 503 && kind.ends_with("/unavailable");
    let answer = match status {
        201 if replayed => Answer::Replayed,
        201 => Answer::Ran,
        409 if kind.ends_with("/idempotency-key-in-use") => Answer::InUse,
        _ if unavailable && detail.contains("nothing was done") => Answer::NothingDone,
        _ if unavailable => Answer::OutcomeUnknown,
        _ => Answer::Other,
    };
    (answer, retry_after)
}
