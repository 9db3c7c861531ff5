//! The logical operations and their senders: a retrying client that sends
//! one operation (same key, same body) until it gets a final answer, with
//! an `X-Chaos` value now and then, and judges every answer by the status
//! table of the harness (see the crate's documentation).

use crate::stock::Reserve;
use crate::tally::Tally;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::Caller;

/// Charges recorded locally, or through the payment provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Local,
    Provider,
}

/// The test card that always declines.
pub(crate) const DECLINED: &str = "pm_card_chargeDeclined";

/// One logical operation: a charge, or a reservation of stock.
#[derive(Clone)]
pub(crate) struct Operation {
    pub(crate) id: usize,
    /// Its customer, as seen by each instance.
    pub(crate) callers: Vec<Caller>,
    pub(crate) key: String,
    pub(crate) kind: Kind,
    /// Sent once, with `exit-before-provider` or `exit-after-provider`, by a
    /// client that never comes back: only the completer can finish it.
    pub(crate) abandoned: bool,
}

/// What a harness's load is made of ([`Operation::drawn`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draw {
    /// Charges go to the provider: some cards decline, some receipts.
    pub(crate) provider: bool,
    /// Some operations reserve stock instead.
    pub(crate) reservations: bool,
    /// The odds that an operation is abandoned.
    pub(crate) abandon: f64,
}

/// What an operation asks for.
#[derive(Clone)]
pub(crate) enum Kind {
    /// `POST /charges`.
    Charge {
        amount: i64,
        /// With the provider: declined or charged.
        declined: bool,
        /// With the provider: where its receipt goes.
        receipt_email: Option<String>,
    },
    /// `POST /reservations`.
    Reserve(Reserve),
}

impl Operation {
    /// Operation `id`: one of `customers` (drawn by `rng`), a new key, a
    /// charge of a random amount that the provider accepts, no receipt;
    /// `abandoned` or not.
    pub(crate) fn charge(
        id: usize,
        customers: &[Vec<Caller>],
        rng: &mut StdRng,
        abandoned: bool,
    ) -> Self {
        Self {
            id,
            callers: customers[rng.random_range(0..customers.len())].clone(),
            key: testkit::new_key(),
            kind: Kind::Charge {
                amount: rng.random_range(1..100_000),
                declined: false,
                receipt_email: None,
            },
            abandoned,
        }
    }

    /// Operation `id` as a harness's load draws it (by `rng`): one of
    /// `customers`, a new key, a charge of a random amount; with the
    /// provider (`draw.provider`) some declined cards and receipts by
    /// mail; some reservations of stock among the charges
    /// (`draw.reservations`); and abandoned at `draw.abandon`'s odds.
    pub(crate) fn drawn(
        id: usize,
        customers: &[Vec<Caller>],
        rng: &mut StdRng,
        draw: Draw,
    ) -> Self {
        let callers = customers[rng.random_range(0..customers.len())].clone();
        let kind = if draw.reservations && rng.random_bool(1.0 / 8.0) {
            Kind::Reserve(Reserve::random(rng))
        } else {
            Kind::Charge {
                amount: rng.random_range(1..100_000),
                declined: draw.provider && rng.random_bool(0.15),
                receipt_email: (draw.provider && rng.random_bool(0.4))
                    .then(|| format!("op-{id}@shop.example")),
            }
        };
        Self {
            id,
            callers,
            key: testkit::new_key(),
            kind,
            abandoned: draw.abandon > 0.0 && rng.random_bool(draw.abandon),
        }
    }

    /// The description that finds its charge in `GET /charges`.
    pub(crate) fn description(&self) -> String {
        format!("op-{}", self.id)
    }

    /// Where it is sent.
    pub(crate) fn path(&self) -> &'static str {
        match self.kind {
            Kind::Charge { .. } => "/charges",
            Kind::Reserve(_) => "/reservations",
        }
    }

    pub(crate) fn body(&self, mode: Mode) -> Value {
        let (amount, declined, receipt_email) = match &self.kind {
            Kind::Reserve(reserve) => return reserve.body(),
            Kind::Charge {
                amount,
                declined,
                receipt_email,
            } => (amount, *declined, receipt_email),
        };
        let mut body = json!({
            "amount": amount, "currency": "usd", "description": self.description()
        });
        if mode == Mode::Provider {
            let card = if declined { DECLINED } else { "pm_card_visa" };
            body["payment_method"] = json!(card);
            if let Some(email) = receipt_email {
                body["receipt_email"] = json!(email);
            }
        }
        body
    }

    /// A charge whose card declines.
    pub(crate) fn declined(&self) -> bool {
        matches!(self.kind, Kind::Charge { declined: true, .. })
    }

    /// What it reserves, if it is a reservation.
    pub(crate) fn reservation(&self) -> Option<Reserve> {
        match self.kind {
            Kind::Reserve(reserve) => Some(reserve),
            Kind::Charge { .. } => None,
        }
    }

    /// The final status its answers must have (a reservation's may also
    /// be a recorded 409 `insufficient-inventory`).
    pub(crate) fn final_status(&self) -> u16 {
        if self.declined() {
            402
        } else {
            201
        }
    }

    /// The status its charge ends with.
    pub(crate) fn charge_status(&self) -> &'static str {
        if self.declined() {
            "failed"
        } else {
            "succeeded"
        }
    }
}

/// What a sender needs besides its operation.
pub(crate) struct Context<'a> {
    pub(crate) mode: Mode,
    pub(crate) postgres: bool,
    pub(crate) tally: &'a Tally,
}

/// The `X-Chaos` value of one attempt, if any.
fn chaos(mode: Mode, rng: &mut StdRng) -> Option<&'static str> {
    match (rng.random_range(0..100), mode) {
        (0..=3, _) => Some("drop-after-commit"),
        (4..=6, _) => Some("crash-before-commit"),
        (7..=9, _) => Some("delay-after-commit=30"),
        (10, _) => Some("exit-after-commit"),
        (11, Mode::Provider) => Some("exit-before-provider"),
        (12, Mode::Provider) => Some("exit-after-provider"),
        _ => None,
    }
}

/// How many answers the contract rules out a sender takes for one
/// operation before it gives up (and fails the run).
const GIVE_UP: usize = 20;

/// One attempt's answer: status, whether it had `Retry-After`, its body.
type Attempt = Option<(u16, bool, Vec<u8>)>;

/// A final answer: its status and its body, byte for byte.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// `201 {"id": …}`: readable in a failed assertion.
impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, String::from_utf8_lossy(&self.body))
    }
}

/// Sends `op` once, to a random instance, with `chaos`.
async fn attempt(
    op: &Operation,
    cx: &Context<'_>,
    chaos: Option<&str>,
    rng: &mut StdRng,
) -> Attempt {
    let headers: &[(&str, &str)] = match &chaos {
        Some(chaos) => &[("X-Chaos", chaos)],
        None => &[],
    };
    let instance = rng.random_range(0..op.callers.len());
    cx.tally.sent(instance);
    let answer = match op.callers[instance]
        .post_keyed_with(op.path(), &op.key, &op.body(cx.mode), headers)
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key("retry-after");
            response
                .bytes()
                .await
                .ok()
                .map(|body| (status, retry_after, body.to_vec()))
        }
        // Refused, reset, timed out: the server may be dead.
        Err(_) => None,
    };
    cx.tally.back(instance);
    answer
}

/// The problem type's last segment, or "" when the body is no problem.
fn problem_type(body: &[u8]) -> String {
    let problem: Value = serde_json::from_slice(body).unwrap_or_default();
    let kind = problem["type"].as_str().unwrap_or_default();
    kind.rsplit('/').next().unwrap_or_default().to_owned()
}

/// Sends `op` until a final answer, as a retrying client would; counts
/// and judges every answer. The final answer.
pub(crate) async fn send_until_answered(
    op: &Operation,
    cx: &Context<'_>,
    rng: &mut StdRng,
) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut ruled_out_answers = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "op {} never got an answer",
            op.id
        );
        let chaos = chaos(cx.mode, rng);
        let Some((status, retry_after, body)) = attempt(op, cx, chaos, rng).await else {
            cx.tally.kinds.count("transport error");
            tokio::time::sleep(Duration::from_millis(rng.random_range(2..25))).await;
            continue;
        };
        let kind = problem_type(&body);
        cx.tally
            .kinds
            .count(format!("{status} {kind}").trim_end().to_owned());
        let text = || String::from_utf8_lossy(&body).into_owned();
        let provider = cx.mode == Mode::Provider;
        let last = || Answer {
            status,
            body: body.clone(),
        };
        let ruled_out = match status {
            201 | 402 if status != op.final_status() => {
                cx.tally.forbid(
                    op.id,
                    format!(
                        "{status} for a card that {}: {}",
                        if op.declined() { "declines" } else { "pays" },
                        text()
                    ),
                );
                return last();
            }
            201 => return last(),
            402 if provider && kind == "card-declined" => return last(),
            // Not enough stock: recorded, replayed like any answer.
            409 if op.reservation().is_some() && kind == "insufficient-inventory" => return last(),
            409 if !cx.postgres && !provider => Some(format!("409 on SQLite: {}", text())),
            409 if !(kind == "idempotency-key-in-use" && retry_after) => {
                Some(format!("409 (Retry-After: {retry_after}): {}", text()))
            }
            409 => None,
            503 if !retry_after => Some(format!("503 without Retry-After: {}", text())),
            503 if kind == "unavailable" || (provider && kind == "provider-unavailable") => None,
            500..=599 => Some(format!("{status}: {}", text())),
            other => panic!("op {}: unexpected {other}: {}", op.id, text()),
        };
        if let Some(why) = ruled_out {
            cx.tally.forbid(op.id, why);
            ruled_out_answers += 1;
            // The run fails anyway: fail it now rather than at the deadline.
            assert!(
                ruled_out_answers < GIVE_UP,
                "op {}: {ruled_out_answers} answers the contract rules out, the last {status}: {}",
                op.id,
                text()
            );
        }
        // An operation someone else holds is worth a longer wait.
        let pause = if status == 409 { 50..250 } else { 2..25 };
        tokio::time::sleep(Duration::from_millis(rng.random_range(pause))).await;
    }
}

/// The one attempt of an abandoned operation: a process exit at one side
/// of the provider call, and no retry, whatever the answer.
pub(crate) async fn send_and_walk_away(op: &Operation, cx: &Context<'_>, rng: &mut StdRng) {
    let chaos = if rng.random_bool(0.5) {
        "exit-before-provider"
    } else {
        "exit-after-provider"
    };
    let answer = attempt(op, cx, Some(chaos), rng).await;
    cx.tally.kinds.count(match answer {
        Some((status, _, _)) => format!("{status} (walked away)"),
        None => "walked away".to_owned(),
    });
}

/// Every final answer of each operation's senders, by operation id.
pub(crate) type Answers =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<usize, Vec<Answer>>>>;

/// Adds `answer` to operation `id`'s.
pub(crate) fn record(answers: &Answers, id: usize, answer: Answer) {
    answers.lock().unwrap().entry(id).or_default().push(answer);
}

/// Starts `senders` senders of `op` at once, each with its own random
/// schedule from `seed` (each sends until answered; an abandoned
/// operation's sender sends once and walks away), their answers into
/// `answers`; the task returned waits for them all, then releases `slot`.
pub(crate) fn spawn_senders(
    op: &Operation,
    senders: usize,
    seed: u64,
    (mode, postgres): (Mode, bool),
    tally: &std::sync::Arc<Tally>,
    answers: &Answers,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> tokio::task::JoinHandle<()> {
    use rand::SeedableRng;
    let senders: Vec<_> = (0..senders)
        .map(|n| {
            let (op, answers, tally) = (op.clone(), answers.clone(), tally.clone());
            let mut rng = StdRng::seed_from_u64(seed ^ (op.id as u64) << 8 ^ n as u64);
            tokio::spawn(async move {
                let cx = Context {
                    mode,
                    postgres,
                    tally: &tally,
                };
                if op.abandoned {
                    send_and_walk_away(&op, &cx, &mut rng).await;
                    return;
                }
                let answer = send_until_answered(&op, &cx, &mut rng).await;
                record(&answers, op.id, answer);
            })
        })
        .collect();
    tokio::spawn(async move {
        for sender in senders {
            sender.await.unwrap();
        }
        drop(slot);
    })
}

/// The callers of a harness: `count` bearer tokens from `prefix` and
/// `seed`, each made a caller on every instance by `on(token, http)` (one
/// token on all of them: a retry may reach any instance), all sharing one
/// HTTP client whose requests give up after `timeout`.
pub(crate) fn callers(
    prefix: &str,
    seed: u64,
    count: usize,
    timeout: Duration,
    on: impl Fn(&str, &reqwest::Client) -> Vec<Caller>,
) -> Vec<Vec<Caller>> {
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("an HTTP client");
    (0..count)
        .map(|c| on(&format!("{prefix}-caller-{c}-{seed:016x}"), &http))
        .collect()
}

/// The load of every fault harness: while `running` holds, operation
/// after operation, at most `in_flight` of them at once (each waits for a
/// slot): `make(id, rng)` gives the next one (`rng` from `seed`), and
/// `send(op, slot)` starts its senders, whose task frees the slot when
/// they are done. Returns every operation made, once all their senders
/// are done.
pub(crate) async fn while_running(
    running: &std::sync::atomic::AtomicBool,
    in_flight: usize,
    seed: u64,
    mut make: impl FnMut(usize, &mut StdRng) -> Operation,
    mut send: impl FnMut(&Operation, tokio::sync::OwnedSemaphorePermit) -> tokio::task::JoinHandle<()>,
) -> Vec<Operation> {
    use rand::SeedableRng;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut operations = Vec::new();
    let mut tasks = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    while running.load(std::sync::atomic::Ordering::Acquire) {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let op = make(operations.len(), &mut rng);
        tasks.push(send(&op, slot));
        operations.push(op);
    }
    for task in tasks {
        task.await.expect("a sender failed");
    }
    operations
}
