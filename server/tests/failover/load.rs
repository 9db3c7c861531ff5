//! The load of the hung-primary and Patroni runs: charges through the
//! provider, [`IN_FLIGHT`] at a time, each sent until a 201 as a client
//! would, every fifth sent once and never retried (for the completer, and
//! to catch a "nothing was done" said of a charge); every attempt timed.
//! Then the judgement: nothing answered lost, one charge and one provider
//! charge per operation, no lie.

use crate::observe::{settle, Ledger};
use crate::sender::{Answer, Mode, Operation};
use crate::{verdict, Standby};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{Caller, Psp};

use crate::IN_FLIGHT;
const ONE_SHOT_EVERY: usize = 5;
/// A sender gives its operation up after this (the run then fails: a
/// retried operation must end with a 201).
const GIVE_UP: Duration = Duration::from_secs(90);

/// One attempt as the client saw it.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) op: usize,
    /// When it was sent, from the start of the load.
    pub(crate) sent: Duration,
    pub(crate) waited: Duration,
    /// The status, `None` for no answer (the kit's client gives up at 30 s).
    pub(crate) status: Option<u16>,
    /// A 201's body; else the problem's type and detail, or the error.
    pub(crate) detail: String,
}

impl Attempt {
    /// When its answer came, from the start of the load.
    pub(crate) fn answered(&self) -> Duration {
        self.sent + self.waited
    }
}

/// What the load did.
pub(crate) struct Load {
    pub(crate) operations: Vec<Operation>,
    pub(crate) attempts: Vec<Attempt>,
    answers: HashMap<usize, Vec<Answer>>,
    told_nothing: Vec<usize>,
}

/// Sends until `sending` turns false; `callers` are one customer as each
/// instance sees it.
pub(crate) async fn run(
    callers: &[Caller],
    seed: u64,
    sending: &AtomicBool,
    began: Instant,
) -> Load {
    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let answers: Arc<Mutex<HashMap<usize, Vec<Answer>>>> = Arc::default();
    let told_nothing: Arc<Mutex<Vec<usize>>> = Arc::default();
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut operations = Vec::new();
    let mut tasks = Vec::new();
    while sending.load(Ordering::Acquire) {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let id = operations.len();
        let op = Operation::charge(id, &[callers.to_vec()], &mut rng, id % ONE_SHOT_EVERY == 0);
        operations.push(op.clone());
        let (attempts, answers, told_nothing) =
            (attempts.clone(), answers.clone(), told_nothing.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ (id as u64) << 8);
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + GIVE_UP;
            while Instant::now() < deadline {
                let attempt = send(&op, began, &mut rng).await;
                attempts.lock().unwrap().push(attempt.clone());
                if op.abandoned {
                    if attempt.detail.contains("nothing was done") {
                        told_nothing.lock().unwrap().push(op.id);
                    }
                    break;
                }
                if attempt.status == Some(201) {
                    let body = attempt.detail.into_bytes();
                    let answer = Answer { status: 201, body };
                    crate::sender::record(&answers, op.id, answer);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..120))).await;
            }
            drop(slot);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let attempts = attempts.lock().unwrap().clone();
    let answers = answers.lock().unwrap().clone();
    let told_nothing = told_nothing.lock().unwrap().clone();
    Load {
        operations,
        attempts,
        answers,
        told_nothing,
    }
}

impl Load {
    /// The attempt that waited longest.
    pub(crate) fn longest(&self) -> Attempt {
        self.attempts
            .iter()
            .max_by_key(|a| a.waited)
            .cloned()
            .expect("at least one attempt")
    }

    /// Attempts by kind of answer.
    pub(crate) fn kinds(&self) -> std::collections::BTreeMap<String, usize> {
        let mut kinds = std::collections::BTreeMap::new();
        for a in &self.attempts {
            let kind = match a.status {
                None => "no answer".to_owned(),
                Some(s)
                    if a.detail.contains("may or may not") || a.detail.contains("not known") =>
                {
                    format!("{s} outcome unknown")
                }
                Some(s) if a.detail.contains("nothing was done") => {
                    format!("{s} nothing was done")
                }
                Some(s) => s.to_string(),
            };
            *kinds.entry(kind).or_default() += 1;
        }
        kinds
    }

    /// Once the completer has finished what nobody retries: every
    /// operation's charges against its answers, and the provider's ledger.
    pub(crate) async fn judge(&self, observer: &Caller, psp: &Psp) -> Verdict {
        let observer = vec![observer];
        settle(&observer, Duration::from_secs(60), Standby::Synchronous).await;
        let settled = verdict::charges(&observer).await;
        let lies = (self.told_nothing.iter().copied())
            .filter(|id| settled.contains_key(&self.operations[*id].description()))
            .collect();
        let report =
            verdict::judge(&self.operations, &self.answers, &observer, Mode::Provider).await;
        let ledger = Ledger::read(psp, &verdict::charges(&observer).await).await;
        let ruled_out = (self.attempts.iter())
            .filter(|a| matches!(a.status, Some(s) if s >= 500 && s != 503))
            .cloned()
            .collect();
        Verdict {
            report,
            ledger,
            lies,
            ruled_out,
        }
    }
}

/// The judgement of a load.
pub(crate) struct Verdict {
    pub(crate) report: verdict::Report,
    pub(crate) ledger: Ledger,
    /// One-shot operations told "nothing was done" that were charged.
    pub(crate) lies: Vec<usize>,
    /// Answers the contract rules out (a 5xx other than 503).
    pub(crate) ruled_out: Vec<Attempt>,
}

impl Verdict {
    /// Nothing answered lost, one charge and one provider charge for each
    /// of `operations`, no lie, no answer the contract rules out.
    pub(crate) fn assert_exactly_once(&self, operations: usize) {
        assert!(
            self.ruled_out.is_empty(),
            "answers the contract rules out: {:?}",
            self.ruled_out
        );
        assert!(
            self.lies.is_empty(),
            "told \"nothing was done\", yet charged: {:?}",
            self.lies
        );
        self.report.assert_nothing_answered_was_lost();
        assert_eq!(self.ledger.charged_twice, 0, "cards charged twice");
        assert_eq!(
            self.ledger.rows, operations,
            "one provider charge per operation"
        );
    }
}

/// One attempt of `op` to a random instance, timed.
async fn send(op: &Operation, began: Instant, rng: &mut StdRng) -> Attempt {
    let sent = began.elapsed();
    let clock = Instant::now();
    let instance = rng.random_range(0..op.callers.len());
    let answer = op.callers[instance]
        .post_keyed(op.path(), &op.key, &op.body(Mode::Provider))
        .await;
    let (status, detail) = match answer {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            let detail = if status == 201 {
                body
            } else {
                let problem: Value = serde_json::from_str(&body).unwrap_or_default();
                format!(
                    "{} {}",
                    problem["type"].as_str().unwrap_or_default(),
                    problem["detail"].as_str().unwrap_or(&body)
                )
            };
            (Some(status), detail)
        }
        Err(e) => (None, e.to_string()),
    };
    Attempt {
        op: op.id,
        sent,
        waited: clock.elapsed(),
        status,
        detail,
    }
}
