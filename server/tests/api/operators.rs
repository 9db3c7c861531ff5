//! Operators see and settle every operation (CONTRACT section 7
//! `server operations`): after real faults (a server killed mid-charge, a
//! provider that refuses for good, a provider and a mail server that stay
//! down), the `server operations` subcommands, run against the database
//! as an operator would (the server stopped or running), list what is
//! unfinished, show one, retry one and settle one; the shopper's retry then
//! gets what was recorded, the provider's ledger holds one charge per
//! operation at most, and `/metrics` counts what is unfinished.

use crate::helpers::{assert_charged, assert_refused, new_key, visa, Checkout, Reply, TestApp};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::{Binary, Fault, Psp};

/// What one `server operations …` run printed, and how it ended.
pub(crate) struct Ran {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    /// Stdout as JSON; panics (with both streams) when it is not.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", self.stdout, self.stderr))
    }

    /// Asserts the run succeeded; itself.
    #[track_caller]
    pub(crate) fn succeeded(self) -> Self {
        assert!(self.ok, "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }

    /// Asserts the run failed, saying `why` on stderr.
    #[track_caller]
    pub(crate) fn failed_saying(&self, why: &str) {
        assert!(!self.ok, "it should have failed: {}", self.stdout);
        assert!(
            self.stderr.contains(why),
            "stderr should say {why:?}: {}",
            self.stderr
        );
    }
}

/// Runs `server operations ARGS` on `app`'s database, with nothing of the
/// test's environment but `USER` (the operator's name in the audit table),
/// and no terminal.
pub(crate) async fn operations(app: &TestApp, args: &[&str]) -> Ran {
    operations_with(app, &[], args).await
}

/// The same with `env` as well.
pub(crate) async fn operations_with(app: &TestApp, env: &[(&str, &str)], args: &[&str]) -> Ran {
    let binary = Binary::server().path().expect("the server binary");
    let output = tokio::process::Command::new(binary)
        .env_clear()
        .env("USER", "on-call")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .arg("operations")
        .args(args)
        .arg("--database")
        .arg(app.server.database().url())
        .output()
        .await
        .expect("server operations runs");
    Ran {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `list --json` with `args`, as an array.
pub(crate) async fn listed(app: &TestApp, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["list", "--json"];
    all.extend_from_slice(args);
    let list = operations(app, &all).await.succeeded().json();
    list.as_array().expect("list --json is an array").clone()
}

/// The one operation `list` shows in `state`, waiting up to 10 s for it.
pub(crate) async fn the_one(app: &TestApp, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = listed(app, &["--state", state]).await;
        if list.len() == 1 {
            return list[0].clone();
        }
        assert!(Instant::now() < deadline, "not one {state}: {list:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET /metrics` until the series `name{state=STATE}` satisfies `done`,
/// for at most 15 s; its value.
async fn gauge_until(
    app: &TestApp,
    name: &str,
    labels: &[(&str, &str)],
    done: impl Fn(f64) -> bool,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let value = app.counter(name, labels).await;
        if done(value) {
            return value;
        }
        assert!(Instant::now() < deadline, "{name}{labels:?} stayed {value}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server killed mid-charge (`exit-after-provider`: the card charged,
/// the process gone before recording it; `exit-before-provider`: gone
/// before asking) leaves its operation at its recovery point. With no
/// server running, `list` shows it stalled once its lease ran out, `show`
/// finds it by its `op` and by its caller's token and key, with the
/// downstream key the provider's ledger holds its charge under; `retry`
/// runs it to its end at once (the provider's charge adopted, not made
/// twice) and records the action. The shopper's retry, once a server runs
/// again, replays the answer `retry` recorded.
#[tokio::test]
async fn a_charge_killed_mid_way_is_listed_shown_and_finished_by_retry_with_no_server_running() {
    let mut shop = Checkout::start(&["--operation-lease", "1s", "--complete-interval", "1h"]).await;
    let (charged, asked) = (new_key(), new_key());
    shop.pay_and_exit(&charged, &visa(1500), "exit-after-provider")
        .await;
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "the provider charged before the kill");

    let stalled = the_one(&shop.app, "stalled").await;
    assert_eq!(stalled["key"], charged.as_str());
    assert_eq!(stalled["recovery_point"], "charge_created");
    assert_eq!(stalled["resume_state"]["amount"], 1500);
    assert_eq!(
        stalled["downstream_key"],
        ledger[0].idempotency_key.as_str()
    );
    assert!(
        stalled["lease"]["left_seconds"].as_f64().unwrap() <= 0.0,
        "{stalled}"
    );
    assert_eq!(stalled["answer"], Value::Null);
    assert!(listed(&shop.app, &["--state", "needs-attention"])
        .await
        .is_empty());
    assert!(listed(&shop.app, &["--older-than", "1h"]).await.is_empty());
    let table = operations(&shop.app, &["list"]).await.succeeded().stdout;
    let op = stalled["op"].as_str().unwrap();
    assert!(table.contains(op) && table.contains("stalled"), "{table}");

    let shown = operations(&shop.app, &["show", op, "--json"])
        .await
        .succeeded()
        .json();
    assert_eq!(shown["operation"], stalled["operation"]);
    assert_eq!(shown["state"], "stalled");
    assert_eq!(shown["generation"], 0);
    assert_eq!(shown["actions"], json!([]));
    let by_key = operations(
        &shop.app,
        &[
            "show",
            "--token",
            &shop.app.token,
            "--key",
            &charged,
            "--json",
        ],
    )
    .await
    .succeeded()
    .json();
    assert_eq!(by_key["operation"], shown["operation"]);
    let whole = shown["operation"].as_str().unwrap();
    operations(&shop.app, &["show", &whole[..13]])
        .await
        .failed_saying("is not an operation");
    operations(&shop.app, &["show", "000000000000"])
        .await
        .failed_saying("no operation");

    let retried = retry_confirmed(&shop, op, &["--reason", "killed mid-charge"]).await;
    assert_eq!(retried["finished"], true, "{retried}");
    assert_eq!(retried["outcome"]["status"], 201);
    assert_eq!(
        retried["outcome"]["body"]["provider_charge"],
        ledger[0].id.as_str()
    );
    assert_eq!(
        shop.ledger().await.len(),
        1,
        "the provider's charge adopted, not made again"
    );
    assert!(
        listed(&shop.app, &[]).await.is_empty(),
        "nothing unfinished"
    );
    operations(&shop.app, &["retry", op, "--yes"])
        .await
        .failed_saying("is finished");
    let audited = operations(&shop.app, &["show", op, "--json"])
        .await
        .succeeded()
        .json();
    assert_eq!(audited["state"], "finished");
    assert_eq!(audited["actions"][0]["action"], "retry");
    assert_eq!(audited["actions"][0]["operator"], "on-call");
    assert_eq!(audited["actions"][0]["reason"], "killed mid-charge");

    // The server again: killed before it asked the provider, this time.
    shop.app.server.restart().unwrap();
    shop.pay_and_exit(&asked, &visa(2500), "exit-before-provider")
        .await;
    assert_eq!(shop.ledger().await.len(), 1, "not asked yet");
    let stalled = the_one(&shop.app, "stalled").await;
    assert_eq!(stalled["key"], asked.as_str());
    let op = stalled["op"].as_str().unwrap();
    let retried = retry_confirmed(&shop, op, &[]).await;
    assert_eq!(retried["outcome"]["status"], 201);
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 2, "charged now, once");

    shop.app.server.restart().unwrap();
    let mut adopted = Vec::new();
    for (key, amount) in [(&charged, 1500), (&asked, 2500)] {
        let reply = shop.pay(key, &visa(amount)).await;
        assert!(reply.replayed, "the answer retry recorded");
        let charge = reply.json();
        assert_eq!(charge["status"], "succeeded");
        assert_eq!(charge["amount"], amount);
        let row = ledger
            .iter()
            .find(|row| charge["provider_charge"] == row.id.as_str())
            .unwrap_or_else(|| panic!("{charge} not in the ledger {ledger:?}"));
        assert_eq!((row.amount, row.currency.as_str()), (amount, "usd"));
        adopted.push(row.id.clone());
    }
    assert_ne!(adopted[0], adopted[1], "one provider charge each");
    assert_eq!(shop.app.count("operator_actions").await, 2);
}

/// A provider that refuses every charge for good (`--psp-url` at a wrong
/// path: 404) sets each operation aside (424). The gauges count them;
/// `list --state needs-attention` shows why. `settle` reads the provider's
/// ledger under each operation's downstream key first and refuses an
/// outcome it contradicts; settled, the shopper's retry gets the recorded
/// answer: `not-charged` a final 402 and the charge failed, `charged` the
/// provider's charge (one, found in its ledger). `retry` with the right
/// provider URL finishes one set aside. Every action is in the audit table.
#[tokio::test]
async fn operations_the_provider_refuses_for_good_are_settled_or_retried_and_the_shopper_gets_that_answer(
) {
    let psp = Psp::start().unwrap();
    let app = TestApp::with_wrong_provider_path(&psp).await;
    let right = ["--psp-url", &psp.base_url()];
    let (cancelled, found, fixed) = (new_key(), new_key(), new_key());
    for (key, amount) in [(&cancelled, 700), (&found, 800), (&fixed, 900)] {
        let reply = Reply::read(app.post("/charges", key, &visa(amount)).await).await;
        assert_refused(&reply, 424, "operation-needs-attention");
    }
    let labels = [("state", "needs-attention")];
    gauge_until(&app, "operations_unfinished", &labels, |n| n == 3.0).await;
    gauge_until(&app, "operations_oldest_unfinished_seconds", &labels, |s| {
        s > 0.0
    })
    .await;
    assert_eq!(app.counter("operations_needing_attention", &[]).await, 3.0);
    let aside = listed(&app, &["--state", "needs-attention"]).await;
    assert_eq!(aside.len(), 3);
    let op = |key: &str| -> (String, String) {
        let row = aside.iter().find(|row| row["key"] == key).expect("listed");
        assert!(row["attention"].as_str().unwrap().contains("404"), "{row}");
        (
            row["op"].as_str().unwrap().to_owned(),
            row["downstream_key"].as_str().unwrap().to_owned(),
        )
    };

    // Nothing was charged: "charged" is refused, "not-charged" recorded.
    let (cancelled_op, _) = op(&cancelled);
    let mut settle = settle_args(&cancelled_op, "the provider URL was wrong", &right);
    let mut refused = settle.clone();
    refused.extend_from_slice(&["--outcome", "charged"]);
    let ran = operations(&app, &refused).await;
    ran.failed_saying("holds no charge");
    assert!(
        ran.stdout.contains("holds no charge under its key"),
        "shown first: {}",
        ran.stdout
    );
    let without_ledger = [
        "settle",
        &cancelled_op,
        "--outcome",
        "not-charged",
        "--reason",
        "x",
    ];
    operations(&app, &without_ledger)
        .await
        .failed_saying("no --psp-url");
    let still = Reply::read(app.post("/charges", &cancelled, &visa(700)).await).await;
    assert_refused(&still, 424, "operation-needs-attention");
    settle.extend_from_slice(&["--outcome", "not-charged", "--json"]);
    let settled = operations(&app, &settle).await.succeeded().json();
    assert_eq!(settled["ledger"]["charges"], json!([]));
    assert_eq!(settled["answer"]["status"], 402);
    let after = Reply::read(app.post("/charges", &cancelled, &visa(700)).await).await;
    assert_refused(&after, 402, "card-declined");
    assert!(after.replayed, "the recorded answer");
    assert_eq!(after.json(), settled["answer"]["body"]);

    // The provider did charge one (its answer lost on the way): its ledger
    // holds the charge under the operation's key, so "not-charged" is
    // refused and "charged" records that charge.
    let (found_op, found_key) = op(&found);
    let made = reqwest::Client::new()
        .post(psp.url("/v1/charges"))
        .header("Idempotency-Key", &found_key)
        .json(&json!({"amount": 800, "currency": "usd", "payment_method": "pm_card_visa"}))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let mut settle = settle_args(&found_op, "charged, answer lost", &right);
    let mut refused = settle.clone();
    refused.extend_from_slice(&["--outcome", "not-charged"]);
    operations(&app, &refused)
        .await
        .failed_saying("the provider charged pch_");
    settle.extend_from_slice(&["--outcome", "charged"]);
    let ran = operations(&app, &settle).await.succeeded();
    assert!(ran.stdout.contains("settled operation"), "{}", ran.stdout);
    let ledger = psp.ledger().await.unwrap();
    assert_eq!(ledger.len(), 1);
    let paid = Reply::read(app.post("/charges", &found, &visa(800)).await).await;
    assert!(paid.replayed);
    let charge = assert_charged(&paid, &ledger[0].id);
    assert_eq!(
        (charge["amount"].as_i64(), ledger[0].amount),
        (Some(800), 800)
    );

    // Retried with the provider's right URL, the third is charged now.
    let (fixed_op, _) = op(&fixed);
    let mut retry = vec![
        "retry",
        fixed_op.as_str(),
        "--reason",
        "URL fixed",
        "--force",
        "--yes",
        "--json",
    ];
    retry.extend_from_slice(&right);
    let retried = operations(&app, &retry).await.succeeded().json();
    assert_eq!(retried["outcome"]["status"], 201, "{retried}");
    let ledger = psp.ledger().await.unwrap();
    assert_eq!(ledger.len(), 2);
    let paid = Reply::read(app.post("/charges", &fixed, &visa(900)).await).await;
    let made = retried["outcome"]["body"]["provider_charge"]
        .as_str()
        .unwrap();
    let charge = assert_charged(&paid, made);
    let row = ledger
        .iter()
        .find(|row| row.id == made)
        .expect("in the ledger");
    assert_eq!((charge["amount"].as_i64(), row.amount), (Some(900), 900));

    assert!(
        listed(&app, &[]).await.is_empty(),
        "nothing left unfinished"
    );
    gauge_until(&app, "operations_unfinished", &labels, |n| n == 0.0).await;
    let charges = app.charges().await;
    let count = |status: &str| charges.iter().filter(|c| c["status"] == status).count();
    assert_eq!(
        (count("succeeded"), count("failed")),
        (2, 1),
        "{charges:#?}"
    );
    let shown = operations(&app, &["show", &cancelled_op, "--json"])
        .await
        .succeeded()
        .json();
    assert_eq!(
        (
            &shown["actions"][0]["action"],
            &shown["actions"][0]["outcome"],
            &shown["actions"][0]["status"]
        ),
        (&json!("settle"), &json!("not-charged"), &json!(402))
    );
    assert_eq!(
        app.count("operator_actions").await,
        3,
        "two settlements, one retry"
    );
}

/// While the provider is down an operation waits at its recovery point
/// (stalled, or running while the completer tries): the gauges count it
/// and age it; once it finishes they fall to zero. A receipt the mail
/// server never accepts waits in the outbox, and its age grows.
#[tokio::test]
async fn the_gauges_count_unfinished_operations_and_age_the_oldest_and_the_outbox() {
    let shop = Checkout::start(&[
        "--complete-interval",
        "1s",
        "--smtp-url",
        "smtp://127.0.0.1:9",
    ])
    .await;
    shop.fault(Fault::Down, 1_000).await;
    let key = new_key();
    let body = json!({"amount": 1200, "currency": "usd", "receipt_email": "ada@example.com"});
    assert_refused(&shop.pay(&key, &body).await, 503, "provider-unavailable");
    let unfinished = |state: &'static str| [("state", state)];
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (stalled, running) = (
            shop.app
                .counter("operations_unfinished", &unfinished("stalled"))
                .await,
            shop.app
                .counter("operations_unfinished", &unfinished("running"))
                .await,
        );
        let oldest = shop
            .app
            .counter(
                "operations_oldest_unfinished_seconds",
                &unfinished("stalled"),
            )
            .await
            .max(
                shop.app
                    .counter(
                        "operations_oldest_unfinished_seconds",
                        &unfinished("running"),
                    )
                    .await,
            );
        if stalled + running == 1.0 && oldest >= 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stalled {stalled}, running {running}, oldest {oldest}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        shop.app
            .counter("operations_unfinished", &unfinished("needs-attention"))
            .await,
        0.0
    );
    shop.psp.clear_faults().await.unwrap();
    for state in ["stalled", "running"] {
        gauge_until(
            &shop.app,
            "operations_unfinished",
            &unfinished(state),
            |n| n == 0.0,
        )
        .await;
    }
    assert_eq!(shop.ledger().await.len(), 1);
    gauge_until(&shop.app, "outbox_waiting", &[], |n| n == 1.0).await;
    gauge_until(&shop.app, "outbox_oldest_waiting_seconds", &[], |s| {
        s >= 1.0
    })
    .await;
}

/// `settle OP --reason REASON` and the provider's flags `right`, to which
/// a test adds an outcome.
fn settle_args<'a>(op: &'a str, reason: &'a str, right: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["settle", op, "--reason", reason];
    args.extend_from_slice(right);
    args
}

/// `retry OP --yes --json` with the shop's provider and `more`: its
/// report, once it succeeded.
async fn retry_confirmed(shop: &Checkout, op: &str, more: &[&str]) -> Value {
    let psp = shop.psp.base_url();
    let mut args = vec!["retry", op, "--psp-url", &psp, "--yes", "--json"];
    args.extend_from_slice(more);
    operations(&shop.app, &args).await.succeeded().json()
}
