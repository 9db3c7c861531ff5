//! Tokens are never stored or logged: the caller is the SHA-256 of its
//! token, and logs show a prefix of that hash.

use crate::helpers::{new_key, TestApp};
use testkit::{Database, Server};

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
