//! Bad input gets a clear problem+json answer and stores nothing.

use crate::helpers::{assert_problem, new_key, TestApp};

/// Keys outside the contract's grammar are 400 `invalid-idempotency-key`;
/// an absent key is 400 `missing-idempotency-key`.
#[tokio::test]
async fn bad_keys_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = r#"{"amount": 100, "currency": "usd"}"#;
    let long = "k".repeat(256);
    for bad in ["\"\"", &long, "a b", "\"a b\"", "\"a b", "a\tb"] {
        let r = app.charge_raw(bad, body).await;
        assert_problem(r, 400, "invalid-idempotency-key").await;
    }
    // Non-ASCII bytes: reqwest refuses to send them as &str; send raw bytes.
    let value = reqwest::header::HeaderValue::from_bytes("clé".as_bytes()).unwrap();
    let keyed = app.charge_request(body).header("Idempotency-Key", value);
    let r = keyed.send().await.unwrap();
    assert_problem(r, 400, "invalid-idempotency-key").await;

    let r = app.charge_request(body).send().await.unwrap();
    assert_problem(r, 400, "missing-idempotency-key").await;
    app.assert_nothing_stored().await;
}

/// Malformed bodies are 400 with a useful detail, never axum's plain text.
#[tokio::test]
async fn malformed_bodies_are_problem_json() {
    let app = TestApp::spawn().await;
    let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for body in [
        "",
        "{",
        "null",
        "[]",
        r#"{"amount": 1e400, "currency": "usd"}"#,
        r#"{"amount": 99999999999999999999999, "currency": "usd"}"#,
        r#"{"amount": 100, "currency": "usd", "surprise": true}"#,
        r#"{"amount": 100.5, "currency": "usd"}"#,
        &nested,
    ] {
        let r = app.charge_raw(&new_key(), body.to_owned()).await;
        let problem = assert_problem(r, 400, "invalid-request").await;
        assert!(!problem["detail"].as_str().unwrap().is_empty());
    }
    app.assert_nothing_stored().await;
}

/// Unknown paths and methods answer problem+json too.
#[tokio::test]
async fn unknown_paths_and_methods_are_problem_json() {
    let app = TestApp::spawn().await;
    assert_problem(app.get("/no/such/thing").await, 404, "not-found").await;
    let r = app
        .server
        .http()
        .delete(app.url("/charges"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_eq!(status, 405);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}

/// Bad bearer tokens and cookies are 401.
#[tokio::test]
async fn malformed_credentials_are_401() {
    let app = TestApp::spawn().await;
    for auth in [
        "Bearer short",
        "Basic dXNlcjpwYXNz",
        "Bearer has space in it!!",
        "Bearer",
    ] {
        let r = app
            .server
            .http()
            .post(app.url("/charges"))
            .header("authorization", auth)
            .header("Idempotency-Key", new_key())
            .header("content-type", "application/json")
            .body(r#"{"amount": 100, "currency": "usd"}"#)
            .send()
            .await
            .unwrap();
        assert_problem(r, 401, "unauthorized").await;
    }
}

/// A body that trickles in slower than --body-timeout is refused with 408,
/// and nothing is stored.
#[tokio::test]
async fn a_slow_body_is_refused_with_408_and_stores_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_with(&["--body-timeout", "300ms"]).await;
    let key = new_key();
    let mut stream = tokio::net::TcpStream::connect(app.server.addr())
        .await
        .unwrap();
    let head = format!(
        "POST /charges HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nidempotency-key: {key}\r\n\
         content-type: application/json\r\ncontent-length: 40\r\n\r\n{{\"amount\": 1",
        app.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the server gave up on the slow body");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    app.assert_nothing_stored().await;
    // The key was never used: the complete request runs.
    assert_eq!(app.charge(&key, 1).await.status(), 201);
}

/// A 10 MB body is refused with 413 after 64 KiB, and nothing is stored.
///
/// Over a raw connection that keeps reading while it writes: the server
/// answers and closes before the body is all sent, and an HTTP client that
/// stops at the failed write (as reqwest does) reports a reset instead of
/// the 413 that did arrive.
#[tokio::test]
async fn a_ten_megabyte_body_is_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn().await;
    let huge = format!(
        r#"{{"amount": 1, "currency": "usd", "description": "{}"}}"#,
        "x".repeat(10 << 20)
    );
    let head = format!(
        "POST /charges HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nidempotency-key: {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        app.token,
        new_key(),
        huge.len()
    );
    let stream = tokio::net::TcpStream::connect(app.server.addr())
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let sender = tokio::spawn(async move {
        // The server may stop reading and close: the rest is not sent.
        let _ = writer.write_all(head.as_bytes()).await;
        let _ = writer.write_all(huge.as_bytes()).await;
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        reader.read_to_end(&mut answer),
    )
    .await
    .expect("the server answers within 10 s");
    sender.await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{read:?}: {answer}");
    let (headers, body) = answer.split_once("\r\n\r\n").expect("a complete answer");
    assert!(
        headers.contains("content-type: application/problem+json"),
        "{headers}"
    );
    let body: serde_json::Value = serde_json::from_str(body).expect("a JSON problem");
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .ends_with("/payload-too-large"),
        "{body}"
    );
    app.assert_nothing_stored().await;
}

/// Found by the fuzzer: paths that do not decode, and methods the static
/// files do not take, answer problem+json too.
#[tokio::test]
async fn undecodable_paths_and_posts_to_static_files_are_problem_json() {
    let app = TestApp::spawn().await;
    assert_problem(app.get("/inventory/%FF").await, 404, "not-found").await;
    for path in ["/", "/index.html", "/inventory/"] {
        let r = app
            .server
            .http()
            .post(app.url(path))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{path}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
    }
}

/// Found by the fuzzer: a static path the OS cannot even look up (a name
/// over 255 bytes, a NUL byte) is a 404 problem, not an empty 500.
#[tokio::test]
async fn unopenable_static_paths_are_404_problems() {
    let app = TestApp::spawn().await;
    for path in [
        format!("/{}", "a".repeat(300)),
        format!("/{}", "d/".repeat(2100)),
        "/%00".to_owned(),
    ] {
        assert_problem(app.get(&path).await, 404, "not-found").await;
    }
}

/// A description holding a control character (U+0000, a newline, a C1
/// control) is refused at the edge with 400 on both backends, stores
/// nothing, and the key then works with a corrected body. (PostgreSQL
/// cannot store U+0000: before, it answered 500 on every retry while
/// SQLite stored it.)
#[tokio::test]
async fn a_description_with_a_control_character_is_400_on_every_backend() {
    let app = TestApp::spawn().await;
    let key = new_key();
    for description in ["nul \u{0} inside", "two\nlines", "bell \u{7}", "c1 \u{85}"] {
        let body =
            serde_json::json!({"amount": 100, "currency": "usd", "description": description});
        let r = app.post("/charges", &key, &body).await;
        let problem = assert_problem(r, 400, "invalid-request").await;
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("control character"),
            "{problem}"
        );
    }
    app.assert_nothing_stored().await;
    let body = serde_json::json!({"amount": 100, "currency": "usd", "description": "one line"});
    assert_eq!(app.post("/charges", &key, &body).await.status(), 201);
}
