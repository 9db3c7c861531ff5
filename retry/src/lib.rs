//! When to send a request with an idempotency key again, and how long to
//! wait first.
//!
//! One policy for every caller of the project that retries: the browser
//! client (`client-wasm`) for its calls to the server, and the server for
//! its calls to the payment provider. Both send a request whose key makes a
//! repeat harmless, and both must not hammer a peer that is down, so both
//! follow the same rules:
//!
//! - **What is retried** ([`is_retryable`]): no answer at all (a network
//!   error, a timeout), and the statuses that mean "not now" (408, 409
//!   `idempotency-key-in-use`, 425, 429, and every 5xx but 501 and 505: a
//!   proxy's 520-524 can follow work the origin did, and the same key
//!   makes the retry safe). Every other answer is final, a business 409
//!   such as `insufficient-inventory` included, and so is a redirect that
//!   a request with a body must not follow: it will not go away by
//!   itself.
//! - **How long to wait** ([`Policy::decide`]): the answer's `Retry-After`
//!   when it has one ([`parse_retry_after`]), capped at
//!   [`Policy::max_retry_after_ms`]; else exponential backoff with full
//!   jitter ([`Policy::backoff_ms`]).
//! - **How often**: at most [`Policy::max_attempts`] requests per call, the
//!   first included.
//!
//! The crate is plain `no_std` Rust without dependencies: the clock and the
//! randomness come in as arguments, so every rule is tested on the host.
//! It never uses `core::fmt` outside its tests, which keeps the browser's
//! wasm module small.
//!
//! ```
//! use exactly_once_retry::{parse_retry_after, Attempt, Decision, Policy};
//!
//! let policy = Policy::default(); // 5 attempts, 200 ms base, 10 s cap, Retry-After up to 60 s
//! let got_503 = Attempt::Answer { status: 503, problem_type: None };
//! let retry_after = parse_retry_after("2", 0.0); // Some(2000.0)
//! assert_eq!(policy.decide(1, got_503, retry_after, 0.5), Decision::RetryAfter(2000.0));
//! assert_eq!(policy.decide(5, got_503, retry_after, 0.5), Decision::GiveUp);
//! let created = Attempt::Answer { status: 201, problem_type: None };
//! assert_eq!(policy.decide(1, created, None, 0.5), Decision::Done);
//! ```

#![cfg_attr(not(test), no_std)]

/// What one attempt produced, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt<'a> {
    /// No answer: the connection was refused or dropped, DNS failed, or (in
    /// a browser) CORS refused the answer.
    Network,
    /// No answer within the caller's per-attempt timeout.
    Timeout,
    /// A redirect, where a request with a body must not follow one (a
    /// captive portal's `302` to its login page, a proxy that moved): the
    /// server that should have run the request did not answer it, and
    /// sending it again soon gets the same redirect, so it is final.
    Redirect,
    /// An HTTP answer. `problem_type` is the `type` member of an
    /// `application/problem+json` body, when there is one; only a `409`'s
    /// is looked at.
    Answer {
        /// The HTTP status.
        status: u16,
        /// The problem type URI (or its last segment).
        problem_type: Option<&'a str>,
    },
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// The answer is final: hand it to the caller, whatever its status.
    Done,
    /// Send again, with the same key, after this many milliseconds.
    RetryAfter(f64),
    /// Worth retrying, but [`Policy::max_attempts`] requests have been
    /// sent: give up (and keep the key, so the operation can be resumed).
    GiveUp,
}

/// Retry settings. Callers validate them where they read them (options,
/// flags); the policy only assumes `max_attempts >= 1` and non-negative
/// times, and stays sane (never panics, never waits a negative time) when
/// they are not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Requests per call, the first included; at least 1.
    pub max_attempts: u32,
    /// Ceiling of the backoff before the first retry, in milliseconds; it
    /// doubles with every further retry.
    pub base_ms: f64,
    /// Upper bound of any computed backoff, in milliseconds.
    pub max_ms: f64,
    /// Upper bound of a wait that a `Retry-After` asks for, in
    /// milliseconds: a longer one is waited this long (stripe-node caps
    /// it at 60 s too), so a misconfigured peer cannot park a caller for
    /// hours.
    pub max_retry_after_ms: f64,
}

impl Policy {
    /// The project's defaults: 5 attempts, 200 ms base, 10 s backoff cap,
    /// `Retry-After` capped at 60 s.
    pub const DEFAULT: Policy = Policy {
        max_attempts: 5,
        base_ms: 200.0,
        max_ms: 10_000.0,
        max_retry_after_ms: 60_000.0,
    };

    /// Decides what follows attempt number `attempt` (1-based).
    ///
    /// `retry_after_ms` is the answer's parsed `Retry-After`
    /// ([`parse_retry_after`]); when present it wins over the computed
    /// backoff, up to [`Policy::max_retry_after_ms`]. `random` is uniform in
    /// `[0, 1)` (`Math.random()`, or any RNG on the server).
    pub fn decide(
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
            Decision::RetryAfter(self.cap_retry_after(ms))
        } else {
            Decision::RetryAfter(self.backoff_ms(attempt.saturating_sub(1), random))
        }
    }

    /// Full jitter: a whole number of milliseconds, uniform in
    /// `[0, min(max_ms, base_ms · 2^retry))`, where `retry` is 0 before the
    /// first retry. A `random` outside `[0, 1)` (or NaN) counts as 0.
    pub fn backoff_ms(&self, retry: u32, random: f64) -> f64 {
        let exp = self.base_ms * pow2(retry);
        let ceiling = if exp < self.max_ms { exp } else { self.max_ms };
        let r = if random > 0.0 && random < 1.0 {
            random
        } else {
            0.0
        };
        floor_non_negative(ceiling * r)
    }

    /// A `Retry-After` wait, capped at [`Policy::max_retry_after_ms`] and
    /// never negative.
    pub fn cap_retry_after(&self, ms: f64) -> f64 {
        let ms = if ms > 0.0 { ms } else { 0.0 };
        if ms > self.max_retry_after_ms {
            self.max_retry_after_ms
        } else {
            ms
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::DEFAULT
    }
}

/// The problem type the server answers (with `409`) while the first request
/// with a key is still running.
pub const KEY_IN_USE: &str = "idempotency-key-in-use";

/// True when the attempt should be sent again with the same key: a network
/// error, a timeout, 408, 409 whose problem type ends in [`KEY_IN_USE`],
/// 425, 429, and every 5xx except 501 (Not Implemented) and 505 (HTTP
/// Version Not Supported), which no retry changes. Every other answer (a
/// business 409 included) is final, and so is a redirect.
pub fn is_retryable(attempt: Attempt<'_>) -> bool {
    match attempt {
        Attempt::Network | Attempt::Timeout => true,
        Attempt::Redirect => false,
        Attempt::Answer {
            status: 409,
            problem_type,
        } => problem_type.is_some_and(|t| t.ends_with(KEY_IN_USE)),
        Attempt::Answer { status, .. } => {
            matches!(status, 408 | 425 | 429)
                || (500..600).contains(&status) && !matches!(status, 501 | 505)
        }
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

/// `x.floor()` for `x >= 0` without std (whose `floor` is not in `core`);
/// NaN and negatives give 0, values beyond 2^53 (already whole) are kept.
fn floor_non_negative(x: f64) -> f64 {
    if x >= 9_007_199_254_740_992.0 {
        x
    } else if x > 0.0 {
        x as u64 as f64
    } else {
        0.0
    }
}

/// Parses a `Retry-After` value: delay-seconds (`"120"`) or an HTTP-date
/// (IMF-fixdate `"Sun, 06 Nov 1994 08:49:37 GMT"`, or the obsolete RFC 850
/// and asctime forms, see [`parse_http_date`]). Returns the wait in
/// milliseconds from `now_ms` (Unix epoch milliseconds), never negative: a
/// date in the past means "now". `None` when the value is neither form.
/// Apply [`Policy::cap_retry_after`] (which [`Policy::decide`] does).
pub fn parse_retry_after(value: &str, now_ms: f64) -> Option<f64> {
    parse_retry_after_with(value, now_ms, |date| {
        parse_http_date(date).map(|secs| secs as f64 * 1000.0)
    })
}

/// [`parse_retry_after`] with another reader of the HTTP-date form:
/// `http_date_ms` turns the (trimmed) value into Unix epoch milliseconds.
/// It is only asked about values that could be a date (with a letter and a
/// `:`, as all three forms have), so a lenient reader cannot take `"1.5"`
/// or `"-1"` for one. The browser client passes the browser's `Date.parse`,
/// which keeps [`parse_http_date`] out of its wasm module.
pub fn parse_retry_after_with(
    value: &str,
    now_ms: f64,
    http_date_ms: impl FnOnce(&str) -> Option<f64>,
) -> Option<f64> {
    let value = value.trim_ascii();
    if let Some(secs) = parse_digits(value) {
        return Some(secs as f64 * 1000.0);
    }
    let could_be_date =
        value.bytes().any(|b| b.is_ascii_alphabetic()) && value.bytes().any(|b| b == b':');
    if !could_be_date {
        return None;
    }
    let wait = http_date_ms(value)? - now_ms;
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
pub fn parse_http_date(s: &str) -> Option<i64> {
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
mod tests;
