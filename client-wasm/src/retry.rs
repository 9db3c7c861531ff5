//! Retry policy: which answers are worth another attempt, how long to wait
//! before it, and what a `Retry-After` header asks for.
//!
//! Plain Rust with no JS types, so `cargo test -p client-wasm` covers it on
//! the host. Randomness and the clock come in as arguments.

/// What one attempt produced, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt<'a> {
    /// `fetch` rejected: connection refused or dropped, DNS, CORS.
    Network,
    /// The attempt was aborted after `timeoutMs`.
    Timeout,
    /// An HTTP answer. `problem_type` is the `type` member of a problem+json
    /// body, when there is one.
    Answer {
        status: u16,
        problem_type: Option<&'a str>,
    },
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    /// The answer is final: hand it to the caller.
    Done,
    /// Send again, with the same key, after this many milliseconds.
    RetryAfter(f64),
    /// Retryable, but `maxAttempts` attempts have been sent: reject.
    GiveUp,
}

/// Backoff settings, already validated by the caller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Policy {
    /// Total attempts per call, at least 1.
    pub(crate) max_attempts: u32,
    /// Backoff ceiling of the first retry, in milliseconds.
    pub(crate) base_ms: f64,
    /// Upper bound of any computed backoff, in milliseconds.
    pub(crate) max_ms: f64,
}

/// The problem type the server uses while the first request with a key is
/// still running.
const IN_USE: &str = "idempotency-key-in-use";

/// True when the attempt should be sent again with the same key: a network
/// error, a timeout, 408, 409 `idempotency-key-in-use`, 425, 429, 500, 502,
/// 503 or 504. Every other answer (a business 409 included) is final.
pub(crate) fn is_retryable(attempt: Attempt<'_>) -> bool {
    match attempt {
        Attempt::Network | Attempt::Timeout => true,
        Attempt::Answer {
            status: 409,
            problem_type,
        } => problem_type.is_some_and(|t| t.ends_with(IN_USE)),
        Attempt::Answer { status, .. } => {
            matches!(status, 408 | 425 | 429 | 500 | 502 | 503 | 504)
        }
    }
}

impl Policy {
    /// Decides what follows attempt number `attempt` (1-based).
    ///
    /// `retry_after_ms` is the parsed `Retry-After` of the answer, which wins
    /// over the computed backoff; `random` is uniform in `[0, 1)`.
    pub(crate) fn decide(
        &self,
        attempt: u32,
        outcome: Attempt<'_>,
        retry_after_ms: Option<f64>,
        random: f64,
    ) -> Decision {
        if !is_retryable(outcome) {
            Decision::Done
        } else if attempt >= self.max_attempts {
            Decision::GiveUp
        } else if let Some(ms) = retry_after_ms {
            Decision::RetryAfter(ms)
        } else {
            Decision::RetryAfter(self.backoff_ms(attempt - 1, random))
        }
    }

    /// Full jitter: `random(0, min(max, base * 2^retry))`, where `retry` is
    /// 0 before the first retry.
    pub(crate) fn backoff_ms(&self, retry: u32, random: f64) -> f64 {
        let exp = self.base_ms * pow2(retry);
        let ceiling = if exp < self.max_ms { exp } else { self.max_ms };
        let r = if random > 0.0 && random < 1.0 {
            random
        } else {
            0.0
        };
        (ceiling * r).floor()
    }
}

/// `2^n` as a float, saturating at 2^64 (more than any ceiling needs).
fn pow2(n: u32) -> f64 {
    let mut v = 1.0;
    let mut i = 0;
    while i < n && i < 64 {
        v *= 2.0;
        i += 1;
    }
    v
}

/// Parses a `Retry-After` value: delay-seconds (`"120"`) or an HTTP-date
/// (IMF-fixdate `"Sun, 06 Nov 1994 08:49:37 GMT"`, or the obsolete RFC 850
/// and asctime forms). Returns the wait in milliseconds from `now_ms`
/// (Unix epoch milliseconds), never negative; `None` when it is neither.
pub(crate) fn parse_retry_after(value: &str, now_ms: f64) -> Option<f64> {
    let value = value.trim_ascii();
    if let Some(secs) = parse_digits(value) {
        return Some(secs as f64 * 1000.0);
    }
    let at = parse_http_date(value)?;
    let wait = at as f64 * 1000.0 - now_ms;
    Some(if wait > 0.0 { wait } else { 0.0 })
}

/// A non-empty run of ASCII digits, as an integer (up to 10^15).
fn parse_digits(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 15 {
        return None;
    }
    let mut n: u64 = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Parses the three HTTP-date forms of RFC 9110 section 5.6.7 into Unix
/// seconds:
///
/// - `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate)
/// - `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850; two-digit years are 19xx
///   from 70, else 20xx)
/// - `Sun Nov  6 08:49:37 1994` (asctime)
pub(crate) fn parse_http_date(s: &str) -> Option<i64> {
    // Split on the separators all three forms use; keep the words.
    let mut words: [&[u8]; 9] = [&[]; 9];
    let mut count = 0;
    for word in s
        .as_bytes()
        .split(|&b| matches!(b, b' ' | b',' | b'-' | b':'))
        .filter(|w| !w.is_empty())
    {
        if count == words.len() {
            return None;
        }
        words[count] = word;
        count += 1;
    }
    let (day, month, year, hms) = match count {
        // weekday day month year h m s GMT
        8 if words[7] == b"GMT" => (words[1], words[2], words[3], [words[4], words[5], words[6]]),
        // weekday month day h m s year
        7 => (words[2], words[1], words[6], [words[3], words[4], words[5]]),
        _ => return None,
    };
    if !words[0].iter().all(u8::is_ascii_alphabetic) || words[0].len() < 3 {
        return None;
    }
    let day = small_number(day, 1, 2)?;
    let month = MONTHS.iter().position(|m| m.as_slice() == month)? as i64 + 1;
    let year = match year.len() {
        4 => small_number(year, 4, 4)?,
        2 => {
            let y = small_number(year, 2, 2)?;
            if y >= 70 {
                1900 + y
            } else {
                2000 + y
            }
        }
        _ => return None,
    };
    let hour = small_number(hms[0], 2, 2)?;
    let minute = small_number(hms[1], 2, 2)?;
    let second = small_number(hms[2], 2, 2)?;
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// `min..=max` ASCII digits as a number.
fn small_number(w: &[u8], min: usize, max: usize) -> Option<i64> {
    if w.len() < min || w.len() > max || !w.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(w.iter().fold(0, |n, &b| n * 10 + i64::from(b - b'0')))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16) -> Attempt<'static> {
        Attempt::Answer {
            status,
            problem_type: None,
        }
    }

    const POLICY: Policy = Policy {
        max_attempts: 5,
        base_ms: 200.0,
        max_ms: 10_000.0,
    };

    #[test]
    fn network_errors_and_timeouts_are_retried() {
        assert!(is_retryable(Attempt::Network));
        assert!(is_retryable(Attempt::Timeout));
    }

    #[test]
    fn exactly_the_contract_statuses_are_retried() {
        let retried = [408, 425, 429, 500, 502, 503, 504];
        for status in 100..600 {
            assert_eq!(
                is_retryable(answer(status)),
                retried.contains(&status),
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

    #[test]
    fn max_attempts_counts_every_attempt() {
        let p = Policy {
            max_attempts: 3,
            ..POLICY
        };
        assert!(matches!(
            p.decide(1, Attempt::Network, None, 0.5),
            Decision::RetryAfter(_)
        ));
        assert!(matches!(
            p.decide(2, answer(503), None, 0.5),
            Decision::RetryAfter(_)
        ));
        assert_eq!(p.decide(3, answer(503), None, 0.5), Decision::GiveUp);
        let once = Policy {
            max_attempts: 1,
            ..POLICY
        };
        assert_eq!(
            once.decide(1, Attempt::Timeout, None, 0.5),
            Decision::GiveUp
        );
    }

    #[test]
    fn retry_after_wins_over_backoff() {
        assert_eq!(
            POLICY.decide(1, answer(429), Some(3000.0), 0.99),
            Decision::RetryAfter(3000.0)
        );
        assert_eq!(
            POLICY.decide(4, answer(503), Some(0.0), 0.99),
            Decision::RetryAfter(0.0)
        );
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
}
