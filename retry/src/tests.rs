//! The policy's rules as tables of cases, and its invariants as
//! properties.

use super::*;

fn answer(status: u16) -> Attempt<'static> {
    Attempt::Answer {
        status,
        problem_type: None,
    }
}

const POLICY: Policy = Policy::DEFAULT;

#[test]
fn no_answer_is_retried() {
    assert!(is_retryable(Attempt::Network));
    assert!(is_retryable(Attempt::Timeout));
}

#[test]
fn a_redirect_is_final() {
    assert!(!is_retryable(Attempt::Redirect));
    assert_eq!(
        POLICY.decide(1, Attempt::Redirect, None, 0.5),
        Decision::Done
    );
}

#[test]
fn exactly_the_contract_statuses_are_retried() {
    let retried = |status: u16| {
        matches!(status, 408 | 425 | 429)
            || (500..600).contains(&status) && ![501, 505].contains(&status)
    };
    for status in [500, 502, 503, 504, 507, 520, 521, 522, 523, 524, 599] {
        assert!(retried(status), "{status}");
    }
    for status in 100..700 {
        assert_eq!(
            is_retryable(answer(status)),
            retried(status),
            "status {status}"
        );
    }
}

#[test]
fn only_a_409_for_a_key_in_use_is_retried() {
    let in_use = Attempt::Answer {
        status: 409,
        problem_type: Some("https://example.com/problems/idempotency-key-in-use"),
    };
    let stock = Attempt::Answer {
        status: 409,
        problem_type: Some("https://example.com/problems/insufficient-inventory"),
    };
    assert!(is_retryable(in_use));
    assert!(!is_retryable(stock));
    assert!(!is_retryable(answer(409)));
    let mismatch = Attempt::Answer {
        status: 422,
        problem_type: Some("idempotency-key-mismatch"),
    };
    assert!(!is_retryable(mismatch));
}

#[test]
fn final_answers_are_done_whatever_the_attempt() {
    for status in [200, 201, 400, 401, 404, 413, 422] {
        assert_eq!(POLICY.decide(5, answer(status), None, 0.5), Decision::Done);
    }
}

/// The default policy with another `max_attempts`.
fn attempts(max_attempts: u32) -> Policy {
    Policy {
        max_attempts,
        ..POLICY
    }
}

#[test]
fn max_attempts_counts_every_attempt() {
    let p = attempts(3);
    let retries = |decision| matches!(decision, Decision::RetryAfter(_));
    assert!(retries(p.decide(1, Attempt::Network, None, 0.5)));
    assert!(retries(p.decide(2, answer(503), None, 0.5)));
    assert_eq!(p.decide(3, answer(503), None, 0.5), Decision::GiveUp);
    let once = attempts(1).decide(1, Attempt::Timeout, None, 0.5);
    assert_eq!(once, Decision::GiveUp);
}

#[test]
fn retry_after_wins_over_backoff() {
    for (attempt, status, header, wait) in [(1, 429, 3000.0, 3000.0), (4, 503, 0.0, 0.0)] {
        let decision = POLICY.decide(attempt, answer(status), Some(header), 0.99);
        assert_eq!(decision, Decision::RetryAfter(wait), "Retry-After {header}");
    }
}

#[test]
fn backoff_stays_within_full_jitter_bounds() {
    for retry in 0..40 {
        let ceiling = (200.0 * 2f64.powi(retry as i32)).min(10_000.0);
        for i in 0..100 {
            let r = f64::from(i) / 100.0;
            let d = POLICY.backoff_ms(retry, r);
            assert!(d >= 0.0 && d <= ceiling, "retry {retry} r {r}: {d}");
        }
        // Near the top of the random range the delay nears the ceiling.
        assert!(POLICY.backoff_ms(retry, 0.999_999) >= ceiling - 1.0);
    }
}

#[test]
fn backoff_grows_exponentially_until_the_cap() {
    let top = |retry| POLICY.backoff_ms(retry, 0.999_999_999);
    assert_eq!(top(0), 199.0);
    assert_eq!(top(1), 399.0);
    assert_eq!(top(2), 799.0);
    assert_eq!(top(5), 6399.0);
    assert_eq!(top(6), 9999.0);
    assert_eq!(top(1000), 9999.0);
}

#[test]
fn backoff_ignores_random_values_out_of_range() {
    assert_eq!(POLICY.backoff_ms(3, -1.0), 0.0);
    assert_eq!(POLICY.backoff_ms(3, 1.0), 0.0);
    assert_eq!(POLICY.backoff_ms(3, f64::NAN), 0.0);
    assert_eq!(POLICY.backoff_ms(3, 0.0), 0.0);
}

#[test]
fn retry_after_in_seconds() {
    for (value, ms) in [
        ("0", 0.0),
        ("1", 1000.0),
        (" 120 ", 120_000.0),
        ("86400", 86_400_000.0),
    ] {
        assert_eq!(parse_retry_after(value, 0.0), Some(ms), "{value:?}");
    }
    for value in ["", "-1", "1.5", "1e3", "abc", "12 s", "9999999999999999"] {
        assert_eq!(parse_retry_after(value, 0.0), None, "{value:?}");
    }
}

#[test]
fn http_dates_in_all_three_forms() {
    // 1994-11-06T08:49:37Z
    let expected = 784_111_777;
    for value in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(parse_http_date(value), Some(expected), "{value:?}");
    }
    assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
    assert_eq!(
        parse_http_date("Sat, 29 Feb 2020 23:59:59 GMT"),
        Some(1_583_020_799)
    );
    assert_eq!(
        parse_http_date("Wed, 01 Jan 2031 00:00:00 GMT"),
        Some(1_924_992_000)
    );
}

#[test]
fn malformed_http_dates_are_rejected() {
    for value in [
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 194 08:49:37 GMT",
        "06 Nov 1994 08:49:37 GMT",
        "tomorrow",
        "Sun, 06 Nov 1994 08:49:37 GMT extra words",
    ] {
        assert_eq!(parse_http_date(value), None, "{value:?}");
    }
}

#[test]
fn retry_after_dates_count_from_now() {
    let now = 784_111_777_000.0;
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
        Some(10_000.0)
    );
    // A date in the past means "now".
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
        Some(0.0)
    );
}

/// The browser client reads dates with `Date.parse`: the crate still reads
/// the seconds itself, and asks the reader only about what could be a date.
#[test]
fn another_date_reader_gets_only_what_could_be_a_date() {
    let now = 784_111_777_000.0;
    let asked = std::cell::RefCell::new(Vec::new());
    let reader = |date: &str| {
        asked.borrow_mut().push(date.to_owned());
        Some(now + 5_000.0)
    };
    assert_eq!(parse_retry_after_with(" 3 ", now, reader), Some(3_000.0));
    assert_eq!(
        parse_retry_after_with(" Sun, 06 Nov 1994 08:49:42 GMT ", now, reader),
        Some(5_000.0)
    );
    for value in ["1.5", "-1", "", "soon", "12:30"] {
        assert_eq!(
            parse_retry_after_with(value, now, reader),
            None,
            "{value:?}"
        );
    }
    assert_eq!(*asked.borrow(), ["Sun, 06 Nov 1994 08:49:42 GMT"]);
    // A date in the past means "now"; one the reader cannot read, no wait.
    assert_eq!(
        parse_retry_after_with("Sun, 06 Nov 1994 08:49:00 GMT", now, |_| Some(0.0)),
        Some(0.0)
    );
    assert_eq!(
        parse_retry_after_with("Sun, 06 Nov 1994 08:49:00 GMT", now, |_| None),
        None
    );
}

#[test]
fn a_long_retry_after_is_waited_max_retry_after_ms() {
    let short = Policy {
        max_retry_after_ms: 250.0,
        ..POLICY
    };
    for (policy, header, wait) in [
        (POLICY, 3_600_000.0, 60_000.0),
        (short, 1000.0, 250.0),
        (short, 100.0, 100.0),
    ] {
        let decision = policy.decide(1, answer(503), Some(header), 0.5);
        assert_eq!(decision, Decision::RetryAfter(wait), "Retry-After {header}");
    }
    for odd in [-5.0, f64::NAN] {
        assert_eq!(short.cap_retry_after(odd), 0.0);
    }
    assert_eq!(POLICY.cap_retry_after(f64::INFINITY), 60_000.0);
}

#[test]
fn the_defaults_are_the_contract_defaults() {
    assert_eq!(
        Policy::default(),
        Policy {
            max_attempts: 5,
            base_ms: 200.0,
            max_ms: 10_000.0,
            max_retry_after_ms: 60_000.0,
        }
    );
}

#[test]
fn a_zero_max_attempts_gives_up_instead_of_looping() {
    for attempt in [0, 1] {
        let decision = attempts(0).decide(attempt, Attempt::Network, None, 0.5);
        assert_eq!(decision, Decision::GiveUp, "attempt {attempt}");
    }
}

mod properties {
    use super::super::*;
    use proptest::prelude::*;

    fn arb_attempt() -> impl Strategy<Value = Attempt<'static>> {
        prop_oneof![
            Just(Attempt::Network),
            Just(Attempt::Timeout),
            Just(Attempt::Redirect),
            (0u16..1000).prop_map(|status| Attempt::Answer {
                status,
                problem_type: None
            }),
            Just(Attempt::Answer {
                status: 409,
                problem_type: Some("https://x/problems/idempotency-key-in-use")
            }),
        ]
    }

    fn arb_policy() -> impl Strategy<Value = Policy> {
        (1u32..20, 0.0f64..1e6, 0.0f64..1e7, 0.0f64..1e8).prop_map(
            |(max_attempts, base_ms, max_ms, max_retry_after_ms)| Policy {
                max_attempts,
                base_ms,
                max_ms,
                max_retry_after_ms,
            },
        )
    }

    proptest! {
        /// Whatever happens, a wait is whole, never negative and never
        /// longer than the policy allows; the last attempt never retries.
        #[test]
        fn every_wait_is_within_the_policy(
            policy in arb_policy(),
            attempt in 1u32..40,
            outcome in arb_attempt(),
            retry_after in proptest::option::of(-1e9f64..1e12),
            random in -1.0f64..2.0,
        ) {
            match policy.decide(attempt, outcome, retry_after, random) {
                Decision::RetryAfter(ms) => {
                    prop_assert!(is_retryable(outcome));
                    prop_assert!(attempt < policy.max_attempts);
                    prop_assert!(ms >= 0.0);
                    let bound = if retry_after.is_some() {
                        policy.max_retry_after_ms
                    } else {
                        prop_assert_eq!(ms, ms.floor());
                        policy.max_ms
                    };
                    prop_assert!(ms <= bound, "{} > {}", ms, bound);
                }
                Decision::GiveUp => {
                    prop_assert!(is_retryable(outcome));
                    prop_assert!(attempt >= policy.max_attempts);
                }
                Decision::Done => prop_assert!(!is_retryable(outcome)),
            }
        }

        /// `Retry-After` text of any shape never panics, and a wait is
        /// never negative.
        #[test]
        fn any_retry_after_text_is_safe(value in ".{0,60}", now in 0.0f64..4e12) {
            if let Some(ms) = parse_retry_after(&value, now) {
                prop_assert!(ms >= 0.0);
            }
        }

        /// Every IMF-fixdate the server could send reads back as its time.
        #[test]
        fn imf_fixdates_round_trip(secs in 0i64..4_102_444_800) {
            let days = secs.div_euclid(86_400);
            let rem = secs.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(days);
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            let text = format!(
                "Mon, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
                d, MONTHS[(m - 1) as usize], y, rem / 3600, rem / 60 % 60, rem % 60
            );
            prop_assert_eq!(parse_http_date(&text), Some(secs), "{}", text);
        }
    }

    /// The inverse of `days_from_civil` (Howard Hinnant's `civil_from_days`).
    fn civil_from_days(z: i64) -> (i64, i64, i64) {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (if m <= 2 { y + 1 } else { y }, m, d)
    }
}
