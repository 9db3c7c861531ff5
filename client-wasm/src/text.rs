//! Text the client makes: numbers and the messages of its
//! errors. Written by hand, without `core::fmt`, whose machinery would be
//! several kilobytes of the wasm module; plain Rust, tested on the host.

use alloc::string::String;
/// Appends the decimal digits of `n` (without indexing, whose bounds checks
/// format their panics).
pub(crate) fn push_u64(out: &mut String, n: u64) {
    if n >= 10 {
        push_u64(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// Appends `s` between double quotes.
pub(crate) fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// Concatenates `parts`.
pub(crate) fn concat(parts: &[&str]) -> String {
    let mut out = String::new();
    for part in parts {
        out.push_str(part);
    }
    out
}

/// Why the last attempt of a call got no final answer, for its message.
pub(crate) enum LastTry<'a> {
    /// An answer that is retried, with its problem type.
    Status(u16, Option<&'a str>),
    Timeout(u64),
    /// The browser's description of a failed `fetch`.
    Network(&'a str),
    Redirect,
    /// What the page's `headers` function threw, as text.
    Headers(&'a str),
}

/// `POST /charges (operation "checkout:42")`: how messages name a call.
pub(crate) fn call_name(method: &str, path: &str, operation: &str) -> String {
    let mut msg = concat(&[method, " ", path, " (operation "]);
    push_quoted(&mut msg, operation);
    msg.push(')');
    msg
}

/// `…: gave up after 5 attempts; the last one got HTTP 503 (…/unavailable).
/// The key and the request are kept: resume("checkout:42") sends it again.`
pub(crate) fn gave_up(call: &str, operation: &str, attempts: u32, last: LastTry<'_>) -> String {
    let mut msg = concat(&[call, ": gave up after "]);
    push_attempts(&mut msg, attempts);
    msg.push_str("; the last one ");
    match last {
        LastTry::Status(status, problem_type) => {
            msg.push_str("got HTTP ");
            push_u64(&mut msg, u64::from(status));
            if let Some(t) = problem_type {
                msg.push_str(" (");
                msg.push_str(t);
                msg.push(')');
            }
        }
        LastTry::Timeout(ms) => {
            msg.push_str("timed out after ");
            push_u64(&mut msg, ms);
            msg.push_str(" ms");
        }
        LastTry::Network(cause) => {
            msg.push_str("failed: network error (");
            msg.push_str(cause);
            msg.push(')');
        }
        LastTry::Redirect => msg.push_str("was redirected: not retried"),
        LastTry::Headers(cause) => {
            msg.push_str("was not sent: the headers function failed (");
            msg.push_str(cause);
            msg.push(')');
        }
    }
    msg.push('.');
    push_kept(&mut msg, operation);
    msg
}

/// `…: aborted after 1 attempt. The key and the request are kept: …`, or
/// `…: aborted before anything was sent.`
pub(crate) fn aborted(call: &str, operation: &str, attempts: u32) -> String {
    if attempts == 0 {
        return concat(&[call, ": aborted before anything was sent."]);
    }
    let mut msg = concat(&[call, ": aborted after "]);
    push_attempts(&mut msg, attempts);
    msg.push('.');
    push_kept(&mut msg, operation);
    msg
}

fn push_attempts(msg: &mut String, attempts: u32) {
    push_u64(msg, u64::from(attempts));
    msg.push_str(if attempts == 1 {
        " attempt"
    } else {
        " attempts"
    });
}

fn push_kept(msg: &mut String, operation: &str) {
    msg.push_str(" Kept: resume(");
    push_quoted(msg, operation);
    msg.push_str(") sends it again.");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_without_fmt() {
        for n in [0, 7, 10, 1_764_432_000_000, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }

    #[test]
    fn a_give_up_message_names_the_call_and_the_way_back() {
        let call = call_name("POST", "/charges", "checkout:42");
        assert_eq!(call, r#"POST /charges (operation "checkout:42")"#);
        assert_eq!(
            gave_up(
                &call,
                "checkout:42",
                5,
                LastTry::Status(503, Some("x/unavailable"))
            ),
            r#"POST /charges (operation "checkout:42"): gave up after 5 attempts; the last one got HTTP 503 (x/unavailable). Kept: resume("checkout:42") sends it again."#
        );
        assert!(gave_up(&call, "o", 1, LastTry::Timeout(300))
            .contains("gave up after 1 attempt; the last one timed out after 300 ms."));
        assert!(gave_up(
            &call,
            "o",
            2,
            LastTry::Network("TypeError: Failed to fetch")
        )
        .contains("network error (TypeError: Failed to fetch)"));
        assert!(gave_up(&call, "o", 1, LastTry::Redirect)
            .contains("gave up after 1 attempt; the last one was redirected"));
        assert_eq!(
            aborted(&call, "checkout:42", 1),
            r#"POST /charges (operation "checkout:42"): aborted after 1 attempt. Kept: resume("checkout:42") sends it again."#
        );
        assert_eq!(
            aborted(&call, "checkout:42", 0),
            r#"POST /charges (operation "checkout:42"): aborted before anything was sent."#
        );
    }
}
