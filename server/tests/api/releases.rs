//! A recovery point this release does not know (rolling
//! releases): during a rolling deploy the next release may stop a charge
//! at a point of its own; this release leaves it to a release that knows
//! it. The two-binary deploy itself is `server/tests/rolling.rs`.

use crate::helpers::{assert_refused, visa, Checkout, Reply};
use std::time::Duration;
use testkit::new_key;

/// The point a later release stops charges at, which this one never
/// heard of.
const LATER_POINT: &str = "charge_authorized";

/// A charge that a later release stopped at a point of its own, whose
/// lease ran out: this release's completer leaves it alone (no provider
/// call, no failure counted, no dead letter, its lease untouched), and
/// the shopper's retry is told 503 "not known yet" with `Retry-After`,
/// runs nothing and gives the lease straight back, so a second retry is
/// told the same, not 409. An earlier release's completer ran the step,
/// counted a failure every round and set it aside after
/// `--attention-after`.
#[tokio::test]
async fn a_charge_at_a_recovery_point_this_release_does_not_know_is_left_alone() {
    let mut shop = Checkout::start(&["--complete-interval", "200ms"]).await;
    let key = new_key();
    // A charge stopped at its recovery point (the process died before the
    // provider was called) ...
    shop.pay_and_exit(&key, &visa(4200), "exit-before-provider")
        .await;
    // ... then moved on by a later release to a point of its own, whose
    // holder died in turn: its lease ran out.
    shop.app
        .sql(
            &format!(
                "UPDATE idempotency_keys SET recovery_point = '{LATER_POINT}', leased_until = 0"
            ),
            &format!(
                "UPDATE idempotency_keys SET recovery_point = '{LATER_POINT}',
                   leased_until = now() - interval '1 hour'"
            ),
        )
        .await;
    shop.app.server.restart().unwrap();
    let untouched = format!(
        "recovery_point = '{LATER_POINT}' AND attempts = 0 AND last_error IS NULL
         AND attention IS NULL"
    );
    let database = shop.app.server.database().clone();
    let count = |condition: String| {
        let database = database.clone();
        async move {
            database
                .count_where("idempotency_keys", &condition)
                .await
                .unwrap()
        }
    };
    // Several rounds of the completer.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        count(untouched.clone()).await,
        1,
        "the completer touched it:\n{}",
        shop.app.server.log_text()
    );
    let lease_kept = if database.is_postgres() {
        "leased_until < now() - interval '30 minutes'"
    } else {
        "leased_until = 0"
    };
    assert_eq!(count(lease_kept.to_owned()).await, 1, "never taken over");
    assert!(shop.ledger().await.is_empty(), "no provider call");
    assert!(
        shop.app.server.log_text().contains("does not know"),
        "the completer says why it leaves it"
    );

    for _ in 0..2 {
        let retry = shop.pay(&key, &visa(4200)).await;
        assert_refused(&retry, 503, "unavailable");
        assert!(retry.retry_after, "503 with Retry-After");
        let detail = retry.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(detail.contains("not known yet"), "{detail}");
        assert!(!detail.contains("nothing was done"), "{detail}");
    }
    assert_eq!(count(untouched).await, 1, "the retries counted nothing");
    assert!(shop.ledger().await.is_empty(), "no provider call");
    let other = Reply::read(shop.app.post("/charges", &key, &visa(1)).await).await;
    assert_refused(&other, 422, "idempotency-key-mismatch");
}
