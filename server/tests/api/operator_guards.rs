//! The operator's command cannot make things worse (CONTRACT section 7,
//! "Secure by default": `server operations retry`, `settle`, `--token`):
//! a retry that could charge twice, or that cannot reach the provider, is
//! refused with nothing changed; every change is confirmed on a terminal
//! or by `--yes`; `settle --dry-run` changes nothing; a ledger charge of
//! another amount is never recorded; `--unverified` needs more than one
//! word; the audit table names the operating-system user; a caller's
//! token is read from `OPERATIONS_TOKEN`.

use crate::helpers::{assert_refused, new_key, visa, Checkout, Reply, TestApp};
use crate::operators::{listed, operations, operations_with, the_one, Ran};
use serde_json::{json, Value};
use testkit::{Binary, Psp};

/// The name of the real user running the tests: what the audit table
/// must record as the operating-system user.
fn os_user() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("id -un");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Runs `server operations ARGS` on `app`'s database under a terminal
/// (`script` gives it one), typing `answer` at it.
async fn operations_on_a_terminal(app: &TestApp, args: &[&str], answer: &str) -> Ran {
    let binary = Binary::server().path().expect("the server binary");
    let quoted = |word: &str| format!("'{}'", word.replace('\'', r"'\''"));
    let mut line = vec![quoted(&binary.to_string_lossy()), "operations".into()];
    line.extend(args.iter().map(|arg| quoted(arg)));
    line.extend(["--database".into(), quoted(&app.server.database().url())]);
    let mut child = tokio::process::Command::new("script")
        .env_clear()
        .env("USER", "on-call")
        .env("NO_COLOR", "1")
        .env("PATH", "/usr/bin:/bin")
        .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script runs");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answer.as_bytes()).await.unwrap();
    let output = child.wait_with_output().await.expect("script ends");
    drop(stdin);
    // A terminal merges both streams into the one `script` prints.
    let both = String::from_utf8_lossy(&output.stdout).into_owned();
    Ran {
        ok: output.status.success(),
        stdout: both.clone(),
        stderr: both,
    }
}

/// `show OP --json`.
async fn shown(app: &TestApp, op: &str) -> Value {
    operations(app, &["show", op, "--json"])
        .await
        .succeeded()
        .json()
}

/// Asserts that the stalled operation `op` is as `before`, with no audit
/// row and no charge at the provider.
async fn unchanged(shop: &Checkout, op: &str, before: &Value, why: &str) {
    let now = shown(&shop.app, op).await;
    assert_eq!(now["state"], "stalled", "{why}: {now}");
    assert_eq!(now["attempts"], before["attempts"], "{why}: {now}");
    assert_eq!(now["actions"], json!([]), "{why}: {now}");
    assert_eq!(shop.app.count("operator_actions").await, 0, "{why}");
    assert!(
        shop.ledger().await.is_empty(),
        "{why}: the provider was asked"
    );
}

/// A charge whose server was killed before it asked the provider waits
/// stalled at `charge_created`. `retry` without the provider's URL says
/// so, and does not pretend the provider was asked; without a terminal it
/// needs `--yes`; past `--attention-after` it needs `--force`. Each refusal
/// changes nothing: no attempt, no audit row, no charge at the provider.
/// On a terminal it asks, and does nothing unless the answer is yes.
#[tokio::test]
async fn retry_refuses_what_it_cannot_do_or_could_charge_twice_and_asks_first() {
    let mut shop = Checkout::start(&["--operation-lease", "1s", "--complete-interval", "1h"]).await;
    let key = new_key();
    shop.pay_and_exit(&key, &visa(1500), "exit-before-provider")
        .await;
    let stalled = the_one(&shop.app, "stalled").await;
    let op = stalled["op"].as_str().unwrap().to_owned();
    let psp = shop.psp.base_url();
    let before = shown(&shop.app, &op).await;

    let ran = operations(&shop.app, &["retry", &op, "--yes"]).await;
    ran.failed_saying("no --psp-url");
    assert!(
        !ran.stderr.contains("did not answer") && !ran.stdout.contains("did not answer"),
        "the provider was never asked: {}{}",
        ran.stdout,
        ran.stderr
    );
    unchanged(&shop, &op, &before, "without --psp-url").await;

    let ran = operations(&shop.app, &["retry", &op, "--psp-url", &psp]).await;
    ran.failed_saying("add --yes");
    assert_eq!(ran.stderr.trim().lines().count(), 1, "{}", ran.stderr);
    unchanged(&shop, &op, &before, "without a terminal or --yes").await;

    let past = [
        "retry",
        &op,
        "--psp-url",
        &psp,
        "--yes",
        "--attention-after",
        "1s",
    ];
    let ran = operations(&shop.app, &past).await;
    ran.failed_saying("past --attention-after");
    ran.failed_saying("--force");
    unchanged(&shop, &op, &before, "past --attention-after").await;

    let asked = ["retry", &op, "--psp-url", &psp];
    let ran = operations_on_a_terminal(&shop.app, &asked, "n\n").await;
    assert!(ran.stdout.contains("[y/N]"), "asked: {}", ran.stdout);
    ran.failed_saying("not retried: not confirmed");
    unchanged(&shop, &op, &before, "answered no").await;

    let ran = operations_on_a_terminal(&shop.app, &asked, "y\n").await;
    assert!(ran.ok, "{}", ran.stdout);
    assert!(ran.stdout.contains("finished"), "{}", ran.stdout);
    let ledger = shop.ledger().await;
    assert_eq!(ledger.len(), 1, "charged once, now");
    assert_eq!(
        (ledger[0].amount, ledger[0].currency.as_str()),
        (1500, "usd")
    );
    let done = shown(&shop.app, &op).await;
    assert_eq!(done["state"], "finished");
    assert_eq!(done["actions"][0]["action"], "retry");
    assert_eq!(done["actions"][0]["operator"], "on-call");
    assert_eq!(done["actions"][0]["os_user"], os_user().as_str());
}

/// Three charges set aside by a provider that refuses for good (a wrong
/// `--psp-url`). `retry` of one set aside needs `--force`. A charge at the
/// provider under an operation's key for another amount is never settled
/// as the operation's, dry run or not. `--dry-run` shows the ledger and
/// what would be recorded, and changes nothing. `--unverified` needs
/// `--provider-charge` for `charged` and confirmation, and a ledger that
/// can be read still refuses what it contradicts. Every settlement's
/// audit row names the operating-system user beside `--operator`; the
/// operation is found by `OPERATIONS_TOKEN` and `--key`.
#[tokio::test]
async fn settle_checks_the_amount_previews_with_dry_run_and_asks_more_of_an_unverified_word() {
    let psp = Psp::start().unwrap();
    let app = TestApp::with_wrong_provider_path(&psp).await;
    let right = psp.base_url();
    let (wrong_amount, agreed, unknown) = (new_key(), new_key(), new_key());
    for (key, amount) in [(&wrong_amount, 800), (&agreed, 900), (&unknown, 700)] {
        let reply = Reply::read(app.post("/charges", key, &visa(amount)).await).await;
        assert_refused(&reply, 424, "operation-needs-attention");
    }
    let aside = listed(&app, &["--state", "needs-attention"]).await;
    assert_eq!(aside.len(), 3);
    let op = |key: &str| -> (String, String) {
        let row = aside.iter().find(|row| row["key"] == key).expect("listed");
        (
            row["op"].as_str().unwrap().to_owned(),
            row["downstream_key"].as_str().unwrap().to_owned(),
        )
    };
    let charge_at_provider = |key: String, amount: i64| {
        let url = psp.url("/v1/charges");
        async move {
            let made = reqwest::Client::new()
                .post(url)
                .header("Idempotency-Key", key)
                .json(
                    &json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa"}),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(made.status(), 201);
        }
    };
    let still_aside = |key: &str, amount: i64| {
        let (app, key) = (&app, key.to_owned());
        async move {
            let reply = Reply::read(app.post("/charges", &key, &visa(amount)).await).await;
            assert_refused(&reply, 424, "operation-needs-attention");
        }
    };

    // Set aside: retried only with --force.
    let (wrong_op, wrong_key) = op(&wrong_amount);
    let ran = operations(&app, &["retry", &wrong_op, "--psp-url", &right, "--yes"]).await;
    ran.failed_saying("set aside");
    ran.failed_saying("--force");
    assert!(psp.ledger().await.unwrap().is_empty());

    // The provider holds a charge of 801 under the key of an 800 charge.
    charge_at_provider(wrong_key, 801).await;
    for dry in [&["--dry-run"][..], &[]] {
        let mut settle = vec![
            "settle",
            &wrong_op,
            "--outcome",
            "charged",
            "--reason",
            "found",
            "--psp-url",
            &right,
        ];
        settle.extend_from_slice(dry);
        let ran = operations(&app, &settle).await;
        ran.failed_saying("for 801 usd");
        ran.failed_saying("is for 800 usd");
    }
    // Unverified, a ledger that can be read still counts.
    let unverified_no = [
        "settle",
        &wrong_op,
        "--outcome",
        "not-charged",
        "--reason",
        "x",
        "--unverified",
        "--yes",
        "--psp-url",
        &right,
    ];
    operations(&app, &unverified_no)
        .await
        .failed_saying("the provider charged pch_");
    still_aside(&wrong_amount, 800).await;
    assert_eq!(app.count("operator_actions").await, 0);

    // A dry run shows what settling would record, and changes nothing.
    let (agreed_op, agreed_key) = op(&agreed);
    charge_at_provider(agreed_key, 900).await;
    let ledger = psp.ledger().await.unwrap();
    let made = ledger.iter().find(|row| row.amount == 900).unwrap();
    let settle = [
        "settle",
        &agreed_op,
        "--outcome",
        "charged",
        "--reason",
        "answer lost",
        "--psp-url",
        &right,
    ];
    let mut dry = settle.to_vec();
    dry.extend_from_slice(&["--dry-run", "--json"]);
    let preview = operations(&app, &dry).await.succeeded().json();
    assert_eq!(preview["dry_run"], true);
    assert_eq!(preview["ledger"]["charges"][0]["id"], made.id.as_str());
    let would = &preview["would_record"];
    assert_eq!(would["provider_charge"], made.id.as_str(), "{preview}");
    assert_eq!(would["answer_status"], 201);
    assert_eq!(would["charge_status"], "succeeded");
    assert_eq!(would["os_user"], os_user().as_str());
    let text = operations(&app, &dry[..dry.len() - 1]).await.succeeded();
    assert!(
        text.stdout.contains("nothing was changed"),
        "{}",
        text.stdout
    );
    assert_eq!(shown(&app, &agreed_op).await["state"], "needs-attention");
    still_aside(&agreed, 900).await;
    assert_eq!(app.count("operator_actions").await, 0);

    // Settled for real, found by the caller's token from the environment.
    operations(&app, &settle).await.succeeded();
    let token = [("OPERATIONS_TOKEN", app.token.as_str())];
    let by_key = ["show", "--key", &agreed, "--json"];
    let audited = operations_with(&app, &token, &by_key)
        .await
        .succeeded()
        .json();
    assert_eq!(audited["op"], agreed_op.as_str());
    assert_eq!(audited["state"], "finished");
    let action = &audited["actions"][0];
    assert_eq!(
        (&action["action"], &action["operator"], &action["os_user"]),
        (&json!("settle"), &json!("on-call"), &json!(os_user()))
    );
    // The token in the environment does not stand in the way of an `op`.
    operations_with(&app, &token, &["show", &agreed_op])
        .await
        .succeeded();
    let paid = Reply::read(app.post("/charges", &agreed, &visa(900)).await).await;
    assert_eq!(paid.status, 201);
    assert_eq!(paid.json()["provider_charge"], made.id.as_str());
    assert_eq!(paid.json()["amount"], 900);

    // On one word: `charged` needs the provider's charge id, and
    // confirmation (here no terminal: --yes).
    let (unknown_op, _) = op(&unknown);
    let word = [
        "settle",
        &unknown_op,
        "--outcome",
        "charged",
        "--reason",
        "seen at the provider",
        "--unverified",
    ];
    let mut with_yes = word.to_vec();
    with_yes.push("--yes");
    operations(&app, &with_yes)
        .await
        .failed_saying("--provider-charge");
    let mut with_id = word.to_vec();
    with_id.extend_from_slice(&["--provider-charge", "pch_seen_elsewhere"]);
    operations(&app, &with_id).await.failed_saying("add --yes");
    still_aside(&unknown, 700).await;
    assert_eq!(app.count("operator_actions").await, 1, "the one settlement");
    with_id.push("--yes");
    operations(&app, &with_id).await.succeeded();
    let paid = Reply::read(app.post("/charges", &unknown, &visa(700)).await).await;
    assert_eq!(paid.json()["provider_charge"], "pch_seen_elsewhere");
    assert_eq!(app.count("operator_actions").await, 2);
}
