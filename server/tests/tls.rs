//! TLS everywhere, certificates checked (docs/CONTRACT.md section 7):
//! PostgreSQL with `ssl = on` and `hostssl` rules only, the payment
//! provider simulator over TLS (`psp --tls-cert --tls-key`), MailDev over
//! implicit TLS with a login (`--incoming-secure`, `smtps://USER:PASS@…`),
//! all with certificates of a CA the test makes (rcgen). The server
//! trusts that CA through `sslrootcert` or `SSL_CERT_FILE`, and refuses
//! another CA's certificates with a line that names them.
//!
//! Needs PostgreSQL installed (and MailDev, `scripts/maildev.sh`):
//! `scripts/test.sh` runs it with `--include-ignored`.

use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use testkit::{Binary, Database, MailDev, Postgres, Psp, Server, TestCa};

/// A database made over the cluster's Unix socket, reached over TCP with
/// the URL parameters `params`.
async fn database(cluster: &Postgres, params: &str) -> Database {
    let made = Database::postgres_on(&cluster.socket_url()).await.unwrap();
    Database::postgres_url(format!(
        "postgres://postgres@{}/{}?{params}",
        cluster.addr(),
        made.postgres_name().unwrap()
    ))
}

/// `sslmode=verify-full` against `ca`'s own CA file.
fn verify_full(ca: &TestCa) -> String {
    format!("sslmode=verify-full&sslrootcert={}", ca.ca_pem().display())
}

/// Charges with a receipt go through the provider and the mail server, all
/// three over TLS with the test's CA: each is answered 201, its retry
/// replays it, the provider charged once per key and every receipt is
/// delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and MailDev installed (scripts/test.sh runs it with --include-ignored)"]
async fn charges_replay_and_receipts_arrive_with_the_database_provider_and_mail_server_over_tls() {
    let ca = TestCa::new("exactly-once").unwrap();
    let cluster = Postgres::start_tls(&ca, &[]).unwrap();
    let psp = Psp::start_tls(&ca).unwrap();
    let maildev = MailDev::start_tls(&ca).await.unwrap();
    assert!(psp.base_url().starts_with("https://"), "{}", psp.base_url());
    assert!(maildev.smtp_url().starts_with("smtps://shop:"));
    let server = Server::builder()
        .database(database(&cluster, &verify_full(&ca)).await)
        .psp(&psp)
        .smtp(&maildev)
        // The provider's and the mail server's roots.
        .env("SSL_CERT_FILE", ca.ca_pem())
        .start()
        .await
        .unwrap();
    let alice = server.caller();
    let mut keys = Vec::new();
    for i in 0..5 {
        let key = testkit::new_key();
        let body = json!({
            "amount": 1000 + i,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "receipt_email": format!("buyer-{i}@example.com"),
        });
        let first = alice.post_keyed("/charges", &key, &body).await.unwrap();
        assert_eq!(first.status(), 201);
        let first: Value = first.json().await.unwrap();
        assert_eq!(first["status"], "succeeded", "{first}");
        let again = alice.post_keyed("/charges", &key, &body).await.unwrap();
        assert_eq!(again.status(), 201);
        assert_eq!(
            again.headers()["idempotent-replayed"],
            "true",
            "the retry is a replay"
        );
        assert_eq!(again.json::<Value>().await.unwrap(), first);
        keys.push(key);
    }
    let ledger = psp.ledger().await.unwrap();
    assert_eq!(ledger.len(), 5, "one provider charge per key: {ledger:?}");
    let emails = maildev
        .wait_for(Duration::from_secs(30), "5 receipts", |m| m.len() >= 5)
        .await
        .unwrap();
    assert_eq!(emails.len(), 5, "{emails:#?}");
    // The connection to PostgreSQL is TLS (the cluster refuses any other).
    let stats = server.metrics().await.unwrap();
    assert_eq!(
        stats
            .counter("idempotency_requests_total", &[("outcome", "executed")])
            .unwrap(),
        5.0
    );
}

/// `sslmode=require` encrypts without checking; with no `sslmode` libpq's
/// `prefer` takes the TLS the cluster offers; `disable` is refused by the
/// cluster's `hostnossl … reject`, in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL installed (scripts/test.sh runs it with --include-ignored)"]
async fn sslmode_require_and_prefer_connect_and_disable_is_refused_by_a_tls_only_cluster() {
    let ca = TestCa::new("exactly-once").unwrap();
    let cluster = Postgres::start_tls(&ca, &[]).unwrap();
    for params in ["sslmode=require", "application_name=shop"] {
        let server = Server::builder()
            .database(database(&cluster, params).await)
            .start()
            .await
            .unwrap_or_else(|e| panic!("{params}: {e:#}"));
        let answer = server
            .caller()
            .charge(&json!({"amount": 1, "currency": "usd"}))
            .await
            .unwrap();
        assert_eq!(answer.status(), 201, "{params}");
    }
    let url = database(&cluster, "sslmode=disable").await.url();
    let line = start_error(&url, None);
    assert!(
        line.contains("no encryption") || line.contains("pg_hba.conf"),
        "{line}"
    );
}

/// A server certificate from another CA ends the start with one line that
/// names the certificate and where its roots came from, whether the CA
/// comes from `sslrootcert` or from `SSL_CERT_FILE`; and a CA file that
/// does not exist is named too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL installed (scripts/test.sh runs it with --include-ignored)"]
async fn a_database_certificate_from_another_ca_ends_the_start_with_one_line_naming_it() {
    let ca = TestCa::new("exactly-once").unwrap();
    let wrong = TestCa::new("someone else").unwrap();
    let cluster = Postgres::start_tls(&ca, &[]).unwrap();

    let url = database(&cluster, &verify_full(&wrong)).await.url();
    let line = start_error(&url, None);
    for named in [
        "certificate",
        &format!("sslrootcert {}", wrong.ca_pem().display()),
        &cluster.addr().to_string(),
        "UnknownIssuer",
    ] {
        assert!(line.contains(named), "{named:?} is missing from: {line}");
    }

    let url = database(&cluster, "sslmode=verify-ca").await.url();
    let line = start_error(&url, Some(&wrong.ca_pem()));
    assert!(line.contains("SSL_CERT_FILE"), "{line}");
    assert!(line.contains("certificate"), "{line}");

    let missing = wrong.dir().join("missing.pem");
    let url = database(
        &cluster,
        &format!("sslmode=verify-full&sslrootcert={}", missing.display()),
    )
    .await
    .url();
    let line = start_error(&url, None);
    assert!(
        line.contains(&format!("sslrootcert {}", missing.display())),
        "{line}"
    );
    // With the right CA in SSL_CERT_FILE, verify-full starts.
    Server::builder()
        .database(database(&cluster, "sslmode=verify-full").await)
        .env("SSL_CERT_FILE", ca.ca_pem())
        .start()
        .await
        .unwrap();
}

/// A database reached by a host name that is not loopback, without
/// `sslmode`, is verified in full against `SSL_CERT_FILE`: a certificate
/// for that name connects, one for another name is refused, and a cluster
/// without TLS is refused rather than reached in clear. An explicit
/// `sslmode=disable` connects and the start logs one warning saying so.
/// (`hostaddr=127.0.0.1` reaches the local clusters under the name.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL installed (scripts/test.sh runs it with --include-ignored)"]
async fn off_loopback_a_database_without_sslmode_is_verified_in_full_and_a_downgrade_warns() {
    let ca = TestCa::for_names("exactly-once", &["db.example.test"]).unwrap();
    let tls = Postgres::start_tls(&ca, &[]).unwrap();
    let plain = Postgres::start().unwrap();
    let url = |host: &str, cluster: &Postgres, database: &Database, params: &str| {
        format!(
            "postgres://postgres@{host}:{}/{}?hostaddr=127.0.0.1{params}",
            cluster.addr().port(),
            database.postgres_name().unwrap()
        )
    };
    let on_tls = Database::postgres_on(&tls.socket_url()).await.unwrap();
    let on_plain = Database::postgres_on(&plain.socket_url()).await.unwrap();

    let named = Database::postgres_url(url("db.example.test", &tls, &on_tls, ""));
    let server = Server::builder()
        .database(named)
        .env("SSL_CERT_FILE", ca.ca_pem())
        .start()
        .await
        .unwrap();
    let answer = server
        .caller()
        .charge(&json!({"amount": 1, "currency": "usd"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    assert!(
        !server.log_text().contains("sslmode"),
        "no downgrade to warn of:\n{}",
        server.log_text()
    );

    let other_name = url("other.example.test", &tls, &on_tls, "");
    let line = start_error(&other_name, Some(&ca.ca_pem()));
    assert!(line.contains("not valid for name"), "{line}");

    let in_clear = url("db.example.test", &plain, &on_plain, "");
    let line = start_error(&in_clear, Some(&ca.ca_pem()));
    assert!(line.contains("does not accept TLS"), "{line}");

    let disabled = url("db.example.test", &plain, &on_plain, "&sslmode=disable");
    let server = Server::builder()
        .database(Database::postgres_url(disabled))
        .start()
        .await
        .unwrap();
    let log = server.log_text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sslmode=disable"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("in clear"),
        "{}",
        warnings[0]
    );
}

/// A provider whose certificate another CA signed is never charged: the
/// charge is answered 503 `provider-unavailable` and the log says why,
/// naming the certificate; a mail server's likewise gets no receipt
/// while the log names its certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MailDev installed (scripts/test.sh runs it with --include-ignored)"]
async fn a_provider_or_mail_server_certificate_from_another_ca_is_refused_with_a_clear_line() {
    let ca = TestCa::new("exactly-once").unwrap();
    let wrong = TestCa::new("someone else").unwrap();
    let psp = Psp::start_tls(&ca).unwrap();
    let maildev = MailDev::start_tls(&ca).await.unwrap();
    let server = Server::builder()
        .psp(&psp)
        .smtp(&maildev)
        .env("SSL_CERT_FILE", wrong.ca_pem())
        .start()
        .await
        .unwrap();
    let answer = server
        .caller()
        .charge(&json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_visa"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 503);
    let problem: Value = answer.json().await.unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("provider-unavailable"),
        "{problem}"
    );
    assert!(
        psp.ledger().await.unwrap().is_empty(),
        "nothing was charged"
    );
    let log = server.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("provider") && l.contains("UnknownIssuer")),
        "no log line names the provider's certificate:\n{log}"
    );

    // A receipt: a charge without a provider in another server, same CA.
    let mailing = Server::builder()
        .smtp(&maildev)
        .env("SSL_CERT_FILE", wrong.ca_pem())
        .start()
        .await
        .unwrap();
    let answer = mailing
        .caller()
        .charge(&json!({"amount": 100, "currency": "usd", "receipt_email": "a@example.com"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !mailing.log_text().contains("UnknownIssuer") {
        assert!(
            std::time::Instant::now() < deadline,
            "no log line names the mail server's certificate:\n{}",
            mailing.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(maildev.emails().await.unwrap().is_empty());
}

/// Runs the server on `url` to its exit (it must fail to start): its one
/// `error:` line.
fn start_error(url: &str, ssl_cert_file: Option<&Path>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(Binary::server().path().unwrap());
    command
        .args(["--listen", "127.0.0.1:0", "--database", url])
        .arg("--www")
        .arg(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("SSL_CERT_FILE");
    if let Some(file) = ssl_cert_file {
        command.env("SSL_CERT_FILE", file);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{url}: started:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{url}: {stderr}");
    serve::assert_each_cause_once(lines[0]);
    println!("{url}: {}", lines[0]);
    lines[0].to_owned()
}
