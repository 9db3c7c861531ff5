//! A database written by the first schema is upgraded in place when a
//! newer server starts on it, and every record in it still answers.

use crate::helpers::{assert_problem, new_token, TestApp};
use serde_json::json;
use sha2::{Digest, Sha256};
use testkit::{Database, Server};

const V1_SQLITE: &str = include_str!("../../migrations/0001_init.sql");
const V1_POSTGRES: &str = include_str!("../../migrations/postgres/0001_init.sql");

/// A record and its charge as the first schema stored them, for `token`
/// and `key`, answering `body` (a 201 with `answer`).
fn v1_rows(token: &str, key: &str, body: &str, answer: &str, hex: fn(&[u8]) -> String) -> String {
    let caller = hex(&Sha256::digest(token.as_bytes()));
    let fingerprint = hex(&Sha256::digest(format!("POST /charges\n{body}").as_bytes()));
    format!(
        "INSERT INTO charges (id, caller, amount, currency, description, created)
           VALUES ('ch_0190000000007000800000000000abcd', {caller}, 1999, 'usd', NULL, 1764432000);
         INSERT INTO idempotency_keys (caller, key, fingerprint, status, headers, body, created_at, expires_at)
           VALUES ({caller}, '{key}', {fingerprint}, 201, 'content-type: application/json' || {nl},
                   {answer}, 1764432000000, 32503680000000);",
        answer = hex(answer.as_bytes()),
        nl = if hex(b"") == "x''" { "char(10)" } else { "chr(10)" },
    )
}

fn sqlite_blob(bytes: &[u8]) -> String {
    format!("x'{}'", hex_digits(bytes))
}

fn postgres_bytea(bytes: &[u8]) -> String {
    format!("'\\x{}'::bytea", hex_digits(bytes))
}

fn hex_digits(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A first-schema database with one charge and its record is migrated when
/// the server starts: the retry replays the stored bytes, another body is
/// 422, and the charge is listed as succeeded with no provider charge.
#[tokio::test]
async fn a_first_schema_database_is_upgraded_and_its_records_still_replay() {
    let database = Database::fresh().await.unwrap();
    if let Some(path) = database.sqlite_path() {
        // The file an older server made.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        rusqlite::Connection::open(path).unwrap();
    }
    let (token, key) = (new_token(), "upgraded-key");
    let body = r#"{"amount":1999,"currency":"usd"}"#;
    let answer = r#"{"id":"ch_0190000000007000800000000000abcd","amount":1999,"currency":"usd","description":null,"status":"succeeded","created":1764432000}"#;
    let versions =
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL);
                    INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1764432000000);";
    database
        .sql(
            &format!(
                "{versions}{V1_SQLITE}{}",
                v1_rows(&token, key, body, answer, sqlite_blob)
            ),
            &format!(
                "{versions}{V1_POSTGRES}{}",
                v1_rows(&token, key, body, answer, postgres_bytea)
            ),
        )
        .await
        .unwrap();

    let app = TestApp::start(Server::builder().database(database)).await;
    let retry = app
        .post_as(
            &token,
            "/charges",
            key,
            &serde_json::from_str(body).unwrap(),
        )
        .await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["content-type"], "application/json");
    assert_eq!(retry.bytes().await.unwrap(), answer.as_bytes());

    let other = app
        .post_as(
            &token,
            "/charges",
            key,
            &json!({"amount": 2000, "currency": "usd"}),
        )
        .await;
    assert_problem(other, 422, "idempotency-key-mismatch").await;

    let charges = app.charges_of(&token).await;
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0]["status"], "succeeded");
    assert_eq!(charges[0]["provider_charge"], serde_json::Value::Null);
}
