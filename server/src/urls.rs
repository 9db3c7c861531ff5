//! The URLs of the flags (`--database`, `--smtp-url`, `--psp-url`), parsed;
//! an error or a `Debug` shows a password as `***`.

use exactly_once::secrets::{Redacted, SecretUrl};

/// Which database to use (the engine's: `sqlite://PATH` or
/// `postgres://…`).
pub use exactly_once::DatabaseUrl;

/// An SMTP server to hand receipts to, as lettre's URLs name it.
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpUrl {
    /// Host name or address (also the name its certificate must carry).
    pub host: String,
    /// Port (25 for `smtp://`, 465 for `smtps://` when not given).
    pub port: u16,
    /// How the connection is secured.
    pub tls: SmtpTls,
    /// `USER:PASS@`: SMTP AUTH, only over TLS (`smtps://` or
    /// `tls=required`).
    pub credentials: Option<(String, String)>,
}

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain SMTP (`smtp://`).
    None,
    /// STARTTLS, required (`smtp://…?tls=required`).
    Required,
    /// STARTTLS when the server offers it (`smtp://…?tls=opportunistic`).
    Opportunistic,
    /// TLS from the first byte (`smtps://`).
    Implicit,
}

/// The password stays out of logs and `--help` output.
impl std::fmt::Debug for SmtpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .finish()
    }
}

impl SmtpUrl {
    /// Parses `smtp://[USER:PASS@]HOST[:PORT][?tls=required|opportunistic]`
    /// or `smtps://[USER:PASS@]HOST[:PORT]`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let shown = Redacted(raw);
        let usage = "smtp://HOST:PORT, smtps://USER:PASS@HOST:PORT or \
                     smtp://USER:PASS@HOST:PORT?tls=required";
        let url = url::Url::parse(raw).map_err(|e| format!("{shown:?} is not {usage} ({e})"))?;
        let (mut tls, default_port) = match url.scheme() {
            "smtp" => (SmtpTls::None, 25),
            "smtps" => (SmtpTls::Implicit, 465),
            _ => return Err(format!("{shown:?} is not {usage}")),
        };
        for (name, value) in url.query_pairs() {
            match (name.as_ref(), value.as_ref(), tls) {
                ("tls", "required", SmtpTls::None) => tls = SmtpTls::Required,
                ("tls", "opportunistic", SmtpTls::None) => tls = SmtpTls::Opportunistic,
                _ => {
                    let value = if name == "tls" { &*value } else { "***" };
                    return Err(format!(
                        "{shown:?}: {name}={value} is not understood (smtp:// takes \
                         tls=required or tls=opportunistic)"
                    ));
                }
            }
        }
        let host = match url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(host) => host.to_string(),
            None => return Err(format!("{shown:?} has no host")),
        };
        if !matches!(url.path(), "" | "/") {
            return Err(format!("{shown:?}: an SMTP URL has no path"));
        }
        let port = url.port().unwrap_or(default_port);
        if port == 0 {
            return Err(format!("{shown:?}: port 0"));
        }
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| format!("{shown:?}: the user or password is not UTF-8"))
        };
        let credentials = match (url.username(), url.password()) {
            ("", None) => None,
            (user, Some(pass)) => Some((decode(user)?, decode(pass)?)),
            (_, None) => return Err(format!("{shown:?}: a user needs a password (USER:PASS@)")),
        };
        if credentials.is_some() && matches!(tls, SmtpTls::None | SmtpTls::Opportunistic) {
            return Err(format!(
                "{shown:?}: a password is sent only over TLS: use smtps:// or ?tls=required \
                 (with tls=opportunistic, whoever strips STARTTLS reads it)"
            ));
        }
        Ok(Self {
            host,
            port,
            tls,
            credentials,
        })
    }
}

/// Percent-decoding of a URL's user or password; `None` when the bytes
/// are not UTF-8.
fn percent_decode(raw: &str) -> Option<String> {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

/// `http://HOST:PORT` or `https://HOST:PORT` (with an optional path
/// prefix), without a trailing slash.
pub(crate) fn parse_psp_url(raw: &str) -> Result<SecretUrl, String> {
    let shown = Redacted(raw);
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
        .ok_or_else(|| format!("{shown:?} is not http://HOST:PORT or https://HOST:PORT"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{shown:?} has no host"));
    }
    Ok(SecretUrl::new(raw.trim_end_matches('/')))
}
