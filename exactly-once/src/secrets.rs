//! Secrets kept out of everything printed: a URL's password
//! (`scheme://USER:PASSWORD@HOST`) and a `password=` parameter's value
//! show as [`MASK`] in an error, a log line or a `Debug`. Every binary of
//! the workspace redacts through [`redact`], and `--help` hides the
//! values of the environment variables that may hold one.

use std::borrow::Cow;
use std::fmt;
use std::io::Write;

/// What a secret shows as.
pub const MASK: &str = "***";

/// Query parameters whose value is a secret (libpq's `password` and
/// `sslpassword`, and a `token`).
const SECRET_PARAMETERS: &[&str] = &["password", "sslpassword", "token"];

/// `text` with the password of every URL in it, and the value of every
/// `password=`, `sslpassword=` or `token=` parameter of those URLs, shown
/// as `***`. A URL runs from its `scheme://` to the next white space; its
/// user part ends at the last `@` before its query, so that a password
/// with an unencoded `/`, `#` or `@` is masked whole. User names stay.
pub fn redact(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = at + 3;
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find(char::is_whitespace)
            .map_or(rest.len(), |i| start + i);
        redact_url_body(&rest[start..end], &mut out);
        rest = &rest[end..];
    }
    out.push_str(rest);
    if out == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(out)
    }
}

/// What follows a URL's `scheme://`, redacted into `out`.
fn redact_url_body(body: &str, out: &mut String) {
    // The user part ends at the last `@` before the query; with none
    // there, at the last `@` at all (a password with an unencoded `?`).
    let at = match body.find('?') {
        Some(query) => body[..query].rfind('@').or_else(|| body.rfind('@')),
        None => body.rfind('@'),
    };
    let rest = match at {
        Some(at) => {
            let user_info = &body[..at];
            match user_info.find(':') {
                Some(colon) => {
                    out.push_str(&user_info[..=colon]);
                    out.push_str(MASK);
                }
                None => out.push_str(user_info),
            }
            &body[at..]
        }
        None => body,
    };
    let (before_query, query) = rest.split_at(rest.find('?').unwrap_or(rest.len()));
    out.push_str(before_query);
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let key = pair.split_once('=').map(|(key, _)| key);
        match key {
            Some(key)
                if SECRET_PARAMETERS
                    .contains(&key.trim_start_matches('?').to_ascii_lowercase().as_str()) =>
            {
                out.push_str(key);
                out.push('=');
                out.push_str(MASK);
            }
            _ => out.push_str(pair),
        }
    }
}

/// A string shown redacted by `Display` and `Debug` (`Debug` quotes it):
/// for a URL in an error message or a `Debug` field.
#[derive(Clone, Copy)]
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(self.0))
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*redact(self.0), f)
    }
}

/// A URL that may carry a password: it reads as the URL (`Deref` to
/// `str`), and shows redacted (`Display`, `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// `url`, as given.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }
}

impl std::str::FromStr for SecretUrl {
    type Err = std::convert::Infallible;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(url))
    }
}

impl std::ops::Deref for SecretUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Redacted(&self.0), f)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&Redacted(&self.0), f)
    }
}

/// Stderr, each write with its URLs' passwords masked: a log
/// subscriber's writer (`tracing_subscriber::fmt().with_writer(|| RedactedStderr)`),
/// whose formatter writes a whole event at once, so that no URL is split
/// between two writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactedStderr;

impl Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => std::io::stderr().write_all(redact(text).as_bytes())?,
            Err(_) => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_s_password_and_secret_parameters_are_masked_and_the_rest_stays() {
        for (text, shown) in [
            (
                "postgres://shop:hunter2@db.example:5432/shop?sslmode=verify-full",
                "postgres://shop:***@db.example:5432/shop?sslmode=verify-full",
            ),
            (
                "error: \"smtps://u:p%40ss@mail:465\" is not understood",
                "error: \"smtps://u:***@mail:465\" is not understood",
            ),
            (
                "postgres://u:pa/ss#w@rd@h/db and https://psp:1/x",
                "postgres://u:***@h/db and https://psp:1/x",
            ),
            (
                "postgres://u@h/db?application_name=a&password=hunter2&PASSWORD=x",
                "postgres://u@h/db?application_name=a&password=***&PASSWORD=***",
            ),
            ("postgres://u:pa?ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h:5432/db", "postgres://u@h:5432/db"),
            ("no url here: a:b@c", "no url here: a:b@c"),
            (
                "http://127.0.0.1:3000/charges",
                "http://127.0.0.1:3000/charges",
            ),
        ] {
            assert_eq!(redact(text), shown, "{text}");
        }
        assert!(matches!(redact("postgres://u@h/db"), Cow::Borrowed(_)));
        assert_eq!(
            format!("{:?}", Redacted("postgres://u:pw@h/db")),
            "\"postgres://u:***@h/db\""
        );
        let url = SecretUrl::new("https://u:pw@psp:1");
        assert_eq!(
            (&*url, url.to_string()),
            ("https://u:pw@psp:1", "https://u:***@psp:1".into())
        );
        assert_eq!(format!("{url:?}"), "\"https://u:***@psp:1\"");
    }
}
