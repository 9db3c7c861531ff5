//! Tokens are never stored or logged: the caller is the SHA-256 of its
//! token, and logs show a prefix of that hash. A password in a URL or an
//! environment variable is never printed: it shows as `***`.

use crate::helpers::{new_key, TestApp};
use std::process::{Command, Output};
use testkit::{Binary, Database, Psp, Server};

/// After charges, reservations, a replay, a 422 and a 401 by bearer token
/// and by session cookie, with debug logs on, neither token appears in the
/// database file, its write-ahead log or the server's log.
#[tokio::test]
async fn tokens_are_never_stored_or_logged() {
    let app = TestApp::start(
        Server::builder()
            .database(Database::sqlite().unwrap())
            .env("RUST_LOG", "debug"),
    )
    .await;
    let bearer = format!("bearer-secret-{}", uuid::Uuid::new_v4().simple());
    let sid = format!("cookie-secret-{}", uuid::Uuid::new_v4().simple());
    let body = serde_json::json!({"amount": 100, "currency": "usd"});
    let key = new_key();
    for _ in 0..2 {
        assert_eq!(
            app.post_as(&bearer, "/charges", &key, &body).await.status(),
            201
        );
    }
    let other = serde_json::json!({"amount": 200, "currency": "usd"});
    assert_eq!(
        app.post_as(&bearer, "/charges", &key, &other)
            .await
            .status(),
        422
    );
    let reserve = serde_json::json!({"item_id": "sku-mug", "quantity": 1});
    let by_cookie = app.server.session(&sid);
    assert_eq!(
        by_cookie
            .post_keyed("/reservations", &new_key(), &reserve)
            .await
            .unwrap()
            .status(),
        201
    );
    assert_eq!(by_cookie.charges().await.unwrap().len(), 0);
    let malformed = app
        .server
        .http()
        .get(app.url("/charges"))
        .header("Authorization", format!("Bearer {bearer} trailing"))
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 401);

    let db = app.server.database().sqlite_path().unwrap().to_owned();
    let mut stored = Vec::new();
    for suffix in ["", "-wal"] {
        let mut path = db.clone().into_os_string();
        path.push(suffix);
        stored.extend(std::fs::read(&path).unwrap_or_default());
    }
    assert!(!stored.is_empty());
    let log = app.server.log_text();
    assert!(log.contains("replayed"), "debug logs were written: {log}");
    for secret in [&bearer, &sid] {
        let needle = secret.as_bytes();
        assert!(
            !stored.windows(needle.len()).any(|w| w == needle),
            "{secret} is in the database"
        );
        assert!(!log.contains(secret.as_str()), "{secret} is in the log");
    }
}

/// `binary` run with `args` and `env` (and none of the variables `clear`),
/// to its exit: what it printed, stdout then stderr.
fn printed(
    binary: Binary,
    args: &[&str],
    env: &[(&str, &str)],
    clear: &[&str],
) -> (Output, String) {
    let mut command = Command::new(binary.path().unwrap());
    command.args(args).env("NO_COLOR", "1");
    for name in clear {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let out = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// A binary, its arguments and its environment.
type Run = (Binary, Vec<String>, Vec<(&'static str, String)>);

/// The variables the server reads a URL from.
const SERVER_URLS: &[&str] = &["DATABASE_URL", "PSP_URL", "SMTP_URL"];

/// A password planted in every URL and environment variable the server
/// and the provider simulator read never shows: not in `--help` (the
/// variables named, their values hidden), not in the line of a refused
/// URL or of a failed start (the URL shown with `***`), whether it came by
/// flag or by variable. (A run's log: the next test; `Debug`: the unit
/// tests of the flags and of the store's options.)
#[test]
fn no_password_from_a_url_or_a_variable_shows_in_help_or_a_refusal() {
    let secret = format!("planted-{}", uuid::Uuid::new_v4().simple());
    let database = format!("postgres://shop:{secret}@127.0.0.1:1/shop?connect_timeout=2");
    let psp_url = format!("http://shop:{secret}@127.0.0.1:1");
    let smtp_url = format!("smtps://shop:{secret}@127.0.0.1:1");
    let every = [
        ("DATABASE_URL", database.as_str()),
        ("PSP_URL", psp_url.as_str()),
        ("SMTP_URL", smtp_url.as_str()),
    ];
    let (_, help) = printed(Binary::server(), &["--help"], &every, &[]);
    assert!(help.contains("DATABASE_URL"), "{help}");
    assert!(
        !help.contains(&secret),
        "--help shows the password:\n{help}"
    );
    let psp_database = format!("sqlite://shop:{secret}@data/psp.db");
    let (_, help) = printed(
        Psp::BINARY,
        &["--help"],
        &[("PSP_DATABASE_URL", &psp_database)],
        &[],
    );
    assert!(help.contains("PSP_DATABASE_URL"), "{help}");
    assert!(
        !help.contains(&secret),
        "psp --help shows the password:\n{help}"
    );

    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("shop.db").display());
    let www = dir.path().display().to_string();
    let serving = ["--listen", "127.0.0.1:0", "--www", &www];
    let bad = |url: &str| url.replace("postgres://", "mysql://");
    let refused: Vec<Run> = vec![
        // Refused flags, by flag and by variable.
        (
            Binary::server(),
            vec!["--database".into(), bad(&database)],
            vec![],
        ),
        (
            Binary::server(),
            vec![],
            vec![("DATABASE_URL", bad(&database))],
        ),
        (
            Binary::server(),
            vec!["--database".into(), format!("{database}&sslmode=sometimes")],
            vec![],
        ),
        (
            Binary::server(),
            vec!["--psp-url".into(), psp_url.replace("http", "ftp")],
            vec![],
        ),
        (
            Binary::server(),
            vec![],
            vec![("PSP_URL", psp_url.replace("http", "ftp"))],
        ),
        (
            Binary::server(),
            vec!["--smtp-url".into(), smtp_url.replace("smtps://", "smtp://")],
            vec![],
        ),
        (
            Binary::server(),
            vec![],
            vec![("SMTP_URL", format!("{smtp_url}?tls=maybe"))],
        ),
        (
            Psp::BINARY,
            vec!["--database".into(), database.clone()],
            vec![],
        ),
        // Failed starts: PostgreSQL unreachable, by flag, by variable, and
        // `server migrate`.
        (
            Binary::server(),
            vec!["--database".into(), database.clone()],
            vec![],
        ),
        (
            Binary::server(),
            vec![],
            vec![("DATABASE_URL", database.clone())],
        ),
        (
            Binary::server(),
            vec!["migrate".into(), "--database".into(), database.clone()],
            vec![],
        ),
    ];
    for (binary, args, env) in refused {
        let mut all: Vec<&str> = if binary.name() == "server" {
            serving.to_vec()
        } else {
            vec!["--listen", "127.0.0.1:0"]
        };
        let database_given = env.iter().any(|(name, _)| *name == "DATABASE_URL")
            || args.iter().any(|a| a == "--database");
        if binary.name() == "server" && !database_given {
            all.extend(["--database", &sqlite]);
        }
        all.extend(args.iter().map(String::as_str));
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (out, text) = printed(binary, &all, &env, SERVER_URLS);
        assert!(!out.status.success(), "{all:?} {env:?}: started:\n{text}");
        assert!(
            !text.contains(&secret),
            "{all:?} {env:?}: the password shows:\n{text}"
        );
        assert!(text.contains("error"), "{all:?} {env:?}: {text}");
        println!("{}", text.trim());
    }
}

/// With debug logs on, a server whose provider URL and mail server URL
/// carry a password charges through the provider, then fails to reach a
/// provider and a mail server that do not answer: neither its log nor an
/// answer shows the password.
#[tokio::test]
async fn no_password_from_a_url_shows_in_the_log_of_a_run() {
    let secret = format!("planted-{}", uuid::Uuid::new_v4().simple());
    let psp = Psp::start().unwrap();
    let with_password = |base: &str| base.replacen("http://", &format!("http://shop:{secret}@"), 1);
    let smtp_url = format!("smtps://shop:{secret}@127.0.0.1:1");
    let mut logs = String::new();
    for (psp_url, expected) in [
        (with_password(&psp.base_url()), 201),
        (with_password("http://127.0.0.1:1"), 503),
    ] {
        let server = Server::builder()
            .database(Database::sqlite().unwrap())
            .env("RUST_LOG", "debug")
            .env("PSP_URL", &psp_url)
            .env("SMTP_URL", &smtp_url)
            .start()
            .await
            .unwrap();
        let answer = server
            .caller()
            .post_keyed(
                "/charges",
                &new_key(),
                &serde_json::json!({
                    "amount": 100,
                    "currency": "usd",
                    "payment_method": "pm_card_visa",
                    "receipt_email": "buyer@example.com",
                }),
            )
            .await
            .unwrap();
        assert_eq!(answer.status(), expected, "{psp_url}");
        let body = answer.text().await.unwrap();
        assert!(
            !body.contains(&secret),
            "the answer shows the password: {body}"
        );
        // The relay's attempt at the mail server that does not answer
        // (a receipt is sent for a succeeded charge only).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while expected == 201 && !server.log_text().contains("message not sent") {
            assert!(
                std::time::Instant::now() < deadline,
                "{}",
                server.log_text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        logs.push_str(&server.log_text());
    }
    assert!(
        logs.contains("http://127.0.0.1:1/v1/charges"),
        "the provider's URL was logged: {logs}"
    );
    assert!(
        !logs.contains(&secret),
        "the log shows the password:\n{logs}"
    );
}
