//! `POST /reservations` and the inventory guard.

use crate::helpers::{assert_recorded_problem, new_key, TestApp};
use serde_json::{json, Value};
use testkit::Server;

/// Ten buyers with different keys race for three posters: three win, stock
/// ends at zero and never below.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_buyers_for_three_posters_get_three_reservations_and_stock_ends_at_zero() {
    let app = TestApp::spawn().await;
    let poster = json!({"item_id": "sku-poster", "quantity": 1});
    let buyers = (0..10).map(|_| {
        app.server
            .caller()
            .keyed("/reservations", &new_key())
            .json(&poster)
    });
    let mut won = 0;
    for answer in testkit::at_once(buyers).await.unwrap() {
        let body = answer.json();
        match answer.status {
            201 => {
                won += 1;
                assert_eq!(body["status"], "reserved");
                assert!(body["id"].as_str().unwrap().starts_with("res_"));
            }
            409 => assert!(
                body["type"]
                    .as_str()
                    .unwrap()
                    .ends_with("/insufficient-inventory"),
                "{body}"
            ),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(won, 3);
    assert_eq!(app.available("sku-poster").await, 0);
}

/// "Not enough stock" is an outcome: recorded with the key and replayed,
/// even after stock comes back. The retry after the restock goes to a
/// second server on the same database, which has no copy of the answer in
/// memory, so what it replays is the stored record.
#[tokio::test]
async fn insufficient_inventory_is_recorded_and_replayed() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let too_many = json!({"item_id": "sku-poster", "quantity": 4});
    let refused = assert_recorded_problem(
        &app,
        "/reservations",
        &key,
        &too_many,
        409,
        "insufficient-inventory",
    )
    .await;
    assert_eq!(app.available("sku-poster").await, 3);
    assert_eq!(
        app.count("idempotency_keys").await,
        1,
        "the 409 is recorded"
    );

    let restock = "UPDATE inventory SET available = 10 WHERE item_id = 'sku-poster'";
    app.sql(restock, restock).await;
    let other = TestApp {
        server: Server::builder()
            .database(app.server.database().clone())
            .start()
            .await
            .expect("a second server starts"),
        token: app.token.clone(),
    };
    let retry = other.post("/reservations", &key, &too_many).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(
        retry.json::<Value>().await.unwrap(),
        refused,
        "the stored 409"
    );
    assert_eq!(app.available("sku-poster").await, 10, "nothing reserved");
    assert_eq!(app.count("reservations").await, 0);
}

/// A reservation of an unknown item is a recorded 404: the retry replays
/// it, byte for byte.
#[tokio::test]
async fn reserving_an_unknown_item_is_a_recorded_404() {
    let app = TestApp::spawn().await;
    let ghost = json!({"item_id": "sku-ghost", "quantity": 1});
    assert_recorded_problem(&app, "/reservations", &new_key(), &ghost, 404, "not-found").await;
    assert_eq!(
        app.count("idempotency_keys").await,
        1,
        "the 404 is recorded"
    );
    assert_eq!(app.count("reservations").await, 0);
}

/// A reservation answers with the contract's fields and takes the stock once.
#[tokio::test]
async fn a_reservation_takes_stock_once_however_often_it_is_retried() {
    let app = TestApp::spawn().await;
    let key = new_key();
    let body = json!({"item_id": "sku-mug", "quantity": 2});
    let reserve = || async {
        let answer = app.post("/reservations", &key, &body).await;
        answer.json::<Value>().await.unwrap()
    };
    let first = reserve().await;
    assert_eq!(first["item_id"], "sku-mug");
    assert_eq!(first["quantity"], 2);
    assert_eq!(first["status"], "reserved");
    for _ in 0..3 {
        assert_eq!(reserve().await, first);
    }
    assert_eq!(app.available("sku-mug").await, 18);
}
