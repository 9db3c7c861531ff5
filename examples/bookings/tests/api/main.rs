//! The booking service's keyed API, through the real binaries: replays,
//! a key reused with another body, concurrent duplicates, a seat already
//! booked, a partner that does not answer. On SQLite, or on PostgreSQL
//! with `TEST_POSTGRES_URL` set.

// Each suite uses part of the support module.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

use support::{book, listing, send, until_final, Answer, Bookings};
use testkit::new_key;

#[tokio::test(flavor = "multi_thread")]
async fn a_keyed_post_replays_byte_for_byte_even_after_a_restart() {
    let (partner, mut bookings) = Bookings::fresh("0s", &[]).await.unwrap();
    let ada = bookings.customer("ada");
    let key = new_key();

    let first = send(book(&ada, &key, "12A")).await.unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed);
    assert_eq!(first.content_type.as_deref(), Some("application/json"));
    let booking = first.json();
    assert_eq!(booking["seat"], "12A");
    assert_eq!(booking["status"], "confirmed");
    assert!(booking["id"].as_str().unwrap().starts_with("bk_"));
    let fields: Vec<&str> = booking
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(fields.len(), 4, "{booking}");

    let again = send(book(&ada, &key, "12A")).await.unwrap();
    assert!(again.replayed, "{again:?}");
    assert_eq!(
        (again.status, &again.content_type, &again.body),
        (first.status, &first.content_type, &first.body)
    );

    // From the database, not the replay cache of the process that ran it.
    bookings.kill_and_restart().await.unwrap();
    let after_restart = send(book(&ada, &key, "12A")).await.unwrap();
    assert_eq!(after_restart, again);

    let rows = listing(&ada).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], booking["id"]);
    assert_eq!(rows[0]["status"], "confirmed");
    assert_eq!(rows[0]["confirmation"], booking["confirmation"]);
    assert_eq!(rows[0]["idempotency_key"], key.as_str());
    let ledger = partner.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1);
    assert_eq!(ledger.effects[0].requests, 1);
    assert_eq!(ledger.effects[0].booking, booking["id"].as_str().unwrap());
    assert_eq!(
        ledger.effects[0].confirmation,
        booking["confirmation"].as_str().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn another_body_under_the_same_key_is_a_422_and_books_nothing() {
    let (partner, bookings) = Bookings::fresh("0s", &[]).await.unwrap();
    let ada = bookings.customer("ada");
    let key = new_key();
    assert_eq!(send(book(&ada, &key, "12A")).await.unwrap().status, 201);

    let other_seat = send(book(&ada, &key, "12B")).await.unwrap();
    assert_mismatch(&other_seat);
    // Even a body that would not parse: the key's record decides first.
    let unparseable = send(
        ada.keyed("/bookings", &key)
            .json(&serde_json::json!({"seat": 12})),
    )
    .await
    .unwrap();
    assert_mismatch(&unparseable);

    assert_eq!(bookings.rows("").await.unwrap(), 1);
    assert_eq!(partner.ledger().await.unwrap().effects.len(), 1);
    // 12B is still free: under a key of its own it books.
    let other_key = send(book(&ada, &new_key(), "12B")).await.unwrap();
    assert_eq!(other_key.status, 201, "{other_key:?}");
    // The same key of another caller is another operation.
    let bob = send(book(&bookings.customer("bob"), &key, "12C"))
        .await
        .unwrap();
    assert_eq!(bob.status, 201, "{bob:?}");
}

fn assert_mismatch(answer: &Answer) {
    assert_eq!(answer.status, 422, "{answer:?}");
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        answer.problem().as_deref(),
        Some("/problems/idempotency-key-mismatch")
    );
    assert!(!answer.replayed);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_duplicates_run_once() {
    // The partner takes a while, so copies arrive while the first holds
    // the key's lease.
    let (partner, bookings) = Bookings::fresh("100ms", &[]).await.unwrap();
    let ada = bookings.customer("ada");
    let key = new_key();
    const COPIES: usize = 12;

    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(COPIES));
    let senders: Vec<_> = (0..COPIES)
        .map(|_| {
            let (request, barrier) = (book(&ada, &key, "4D"), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                send(request).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for sender in senders {
        answers.push(sender.await.unwrap().unwrap());
    }
    let ran: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == 201 && !a.replayed)
        .collect();
    assert_eq!(ran.len(), 1, "exactly one copy runs: {answers:#?}");
    let first = ran[0].clone();
    for answer in &answers {
        assert!(
            (answer.status == 201 && answer.body == first.body) || answer.in_use(),
            "every copy is the booking or a 409 in-use with Retry-After: {answer:?}"
        );
    }
    let in_use = answers.iter().filter(|a| a.in_use()).count();
    println!(
        "{COPIES} copies at once: 1 ran, {} replayed, {in_use} in use",
        COPIES - 1 - in_use
    );

    // The ones told to retry get the same booking.
    for answer in answers.iter().filter(|a| a.in_use()) {
        let retried = until_final(|| book(&ada, &key, "4D")).await.unwrap();
        assert_eq!(
            (retried.status, retried.replayed),
            (201, true),
            "{answer:?} then {retried:?}"
        );
        assert_eq!(retried.body, first.body);
    }
    assert_eq!(bookings.rows("").await.unwrap(), 1);
    let ledger = partner.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1, "{ledger:?}");
    assert_eq!(
        ledger.effects[0].requests, 1,
        "the partner was asked once: {ledger:?}"
    );
    assert_eq!(
        ledger.effects[0].booking,
        first.json()["id"].as_str().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seat_already_booked_is_a_recorded_409_replayed_like_a_success() {
    let (partner, bookings) = Bookings::fresh("0s", &[]).await.unwrap();
    let (ada, bob) = (bookings.customer("ada"), bookings.customer("bob"));
    assert_eq!(
        send(book(&ada, &new_key(), "3C")).await.unwrap().status,
        201
    );

    let key = new_key();
    let taken = send(book(&bob, &key, "3C")).await.unwrap();
    assert_eq!(taken.status, 409, "{taken:?}");
    assert_eq!(taken.problem().as_deref(), Some("/problems/seat-taken"));
    assert_eq!(
        taken.content_type.as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(taken.retry_after, None, "a refusal is final");
    let again = send(book(&bob, &key, "3C")).await.unwrap();
    assert!(again.replayed);
    assert_eq!((again.status, &again.body), (taken.status, &taken.body));
    // The refusal is the key's answer: another seat under it is a 422.
    assert_eq!(send(book(&bob, &key, "3D")).await.unwrap().status, 422);

    assert!(listing(&bob).await.unwrap().is_empty());
    assert_eq!(bookings.rows("").await.unwrap(), 1);
    assert_eq!(partner.ledger().await.unwrap().effects.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partner_that_does_not_answer_leaves_the_seat_held_and_a_retry_confirms_it() {
    let (mut partner, bookings) = Bookings::fresh("0s", &["--partner-timeout", "1s"])
        .await
        .unwrap();
    let ada = bookings.customer("ada");
    let key = new_key();
    partner.stop().unwrap();

    let down = send(book(&ada, &key, "9F")).await.unwrap();
    assert_eq!(down.status, 503, "{down:?}");
    assert_eq!(
        down.problem().as_deref(),
        Some("/problems/partner-unavailable")
    );
    assert!(down.retry_after.is_some());
    assert_eq!(bookings.rows("WHERE status = 'held'").await.unwrap(), 1);
    // Held, the seat is nobody else's.
    let bob = send(book(&bookings.customer("bob"), &new_key(), "9F"))
        .await
        .unwrap();
    assert_eq!(
        bob.problem().as_deref(),
        Some("/problems/seat-taken"),
        "{bob:?}"
    );

    partner.restart().unwrap();
    let booked = until_final(|| book(&ada, &key, "9F")).await.unwrap();
    assert_eq!((booked.status, booked.replayed), (201, false), "{booked:?}");
    let ledger = partner.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1);
    assert_eq!(
        ledger.effects[0].confirmation,
        booked.json()["confirmation"].as_str().unwrap()
    );
    assert_eq!(
        bookings.rows("WHERE status = 'confirmed'").await.unwrap(),
        1
    );
}

/// `bookings operations` (the engine's operator calls, as any application
/// exposes them): a booking whose partner did not answer is listed stalled
/// at `seat_held`; once the partner is back, `retry` confirms it at once
/// (no completer ran), and the customer's retry replays that answer.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_lists_a_stalled_booking_and_retry_confirms_it() {
    let (mut partner, bookings) = Bookings::fresh(
        "0s",
        &["--partner-timeout", "1s", "--complete-interval", "1h"],
    )
    .await
    .unwrap();
    let ada = bookings.customer("ada");
    let key = new_key();
    partner.stop().unwrap();
    let down = send(book(&ada, &key, "3C")).await.unwrap();
    assert_eq!(down.status, 503, "{down:?}");

    let partner_url = partner.process.base_url();
    let operations = |args: &[&str]| {
        let output = std::process::Command::new(support::BOOKINGS.path().unwrap())
            .env_clear()
            .arg("operations")
            .args(args)
            .args(["--database", &bookings.database.url()])
            .args(["--partner-url", &partner_url])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.success(), stdout)
    };
    let (ok, listed) = operations(&["list"]);
    assert!(ok);
    let line = listed.lines().next().unwrap_or_default().to_owned();
    assert!(line.contains("stalled seat_held"), "{listed}");
    let op = line.split(' ').next().unwrap().to_owned();

    partner.restart().unwrap();
    let (ok, retried) = operations(&["retry", &op]);
    assert!(ok && retried.starts_with("finished: 201"), "{retried}");
    let (_, listed) = operations(&["list"]);
    assert_eq!(listed, "", "nothing unfinished");
    let booked = send(book(&ada, &key, "3C")).await.unwrap();
    assert_eq!((booked.status, booked.replayed), (201, true), "{booked:?}");
    assert_eq!(partner.ledger().await.unwrap().effects.len(), 1);
}

/// A password in the service's URLs never shows: `--help` names the
/// variables without their values, and a refused database URL's line
/// shows it as `***`.
#[test]
fn no_password_from_a_url_shows_in_help_or_a_refusal() {
    let secret = format!("planted-{}", new_key());
    let database = format!("postgres://shop:{secret}@127.0.0.1:1/shop");
    let partner = format!("http://shop:{secret}@127.0.0.1:1");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(support::BOOKINGS.path().unwrap())
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status, text)
    };
    let (_, help) = run(
        &["--help"],
        &[
            ("BOOKINGS_DATABASE", &database),
            ("BOOKINGS_PARTNER_URL", &partner),
        ],
    );
    assert!(help.contains("BOOKINGS_DATABASE"), "{help}");
    assert!(!help.contains(&secret), "{help}");
    let refused = database.replace("postgres://", "mysql://");
    let (status, text) = run(&["--database", &refused], &[]);
    assert!(!status.success(), "{text}");
    assert!(text.contains("shop:***@"), "{text}");
    assert!(!text.contains(&secret), "{text}");
}
