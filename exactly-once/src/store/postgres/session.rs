//! The settings every transaction of the engine runs under
//! (`synchronous_commit` by `--durability`, and `lock_timeout`), and where
//! they are set: in a connection's startup options, once per connection,
//! or, behind a pooler in transaction mode, in each transaction
//! (`SET LOCAL`).
//!
//! PgBouncer in transaction mode hands each transaction whichever server
//! connection is free: a setting made on one (a session `SET`, or startup
//! `options`, which PgBouncer 1.18 refuses outright: "unsupported startup
//! parameter: options") is missing on the next, or sticks to a connection
//! another client then uses. So with `pgbouncer=true` in the URL the
//! engine sends no startup options and sets what it needs in every
//! transaction it opens; its statements are unnamed ([`super::Sql`]) for
//! the same reason. Without a pooler the settings are the connection's,
//! from its start, and its statements named and cached: each parsed once
//! per connection rather than once per use.

use crate::store::Durability;

/// How long a request waits for another transaction holding its key (or
/// a stock row) before answering 409 / 503.
pub(crate) const LOCK_TIMEOUT: &str = "5s";

/// Where a connection's settings come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Session {
    /// Behind a pooler in transaction mode (`pgbouncer=true`).
    pooled: bool,
    /// `on` or `off`.
    synchronous_commit: &'static str,
}

impl Session {
    /// The session of a store with `durability`, behind a pooler or not.
    pub(crate) fn new(pooled: bool, durability: Durability) -> Self {
        let synchronous_commit = match durability {
            Durability::Full => "on",
            Durability::Relaxed => "off",
        };
        Self {
            pooled,
            synchronous_commit,
        }
    }

    /// Whether the store runs behind a pooler in transaction mode.
    #[cfg(feature = "postgres")]
    pub(crate) fn pooled(&self) -> bool {
        self.pooled
    }

    #[cfg(feature = "postgres")]
    /// Whether its connections keep named statements, each prepared once
    /// per connection and cached: on a direct connection, whose server
    /// connection is its own for life; never behind a pooler, where the
    /// next transaction runs on another server connection.
    pub(super) fn named_statements(&self) -> bool {
        !self.pooled
    }

    #[cfg(feature = "postgres")]
    /// The startup `options` of a direct connection; none behind a pooler.
    pub(super) fn startup_options(&self) -> Option<String> {
        (!self.pooled).then(|| {
            format!(
                "-c synchronous_commit={} -c lock_timeout={}",
                self.synchronous_commit, LOCK_TIMEOUT
            )
        })
    }

    /// What a transaction must set first, waiting at most `lock_timeout`
    /// for a row another holds: nothing on a direct connection (its
    /// session has the settings), `SET LOCAL`s behind a pooler.
    pub(super) fn per_transaction(&self, lock_timeout: &str) -> Option<String> {
        self.pooled.then(|| {
            format!(
                "SET LOCAL synchronous_commit = {}; SET LOCAL lock_timeout = '{lock_timeout}'",
                self.synchronous_commit
            )
        })
    }
}

#[cfg(feature = "postgres")]
/// `url` without its `pgbouncer` parameter (which tokio-postgres does not
/// know), and whether it was `true`. Accepted, and harmless, without a
/// pooler.
pub(super) fn pooler_in(url: &str) -> crate::store::Result<(String, bool)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), false));
    };
    let mut pooled = false;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("pgbouncer", value)) => {
                pooled = match value {
                    "true" | "1" | "yes" | "on" => true,
                    "false" | "0" | "no" | "off" => false,
                    other => {
                        return Err(crate::store::StoreError::internal(format!(
                            "pgbouncer={other} in the PostgreSQL URL: it takes true or false"
                        )))
                    }
                }
            }
            _ => kept.push(pair),
        }
    }
    Ok(match kept.is_empty() {
        true => (base.to_owned(), pooled),
        false => (format!("{base}?{}", kept.join("&")), pooled),
    })
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    #[test]
    fn pgbouncer_is_taken_out_of_the_url_and_read() {
        let cases = [
            ("postgres://u@h/db", "postgres://u@h/db", false),
            (
                "postgres://u@h/db?pgbouncer=true",
                "postgres://u@h/db",
                true,
            ),
            (
                "postgres://u@h1,h2/db?target_session_attrs=read-write&pgbouncer=true",
                "postgres://u@h1,h2/db?target_session_attrs=read-write",
                true,
            ),
            (
                "postgres://u@h/db?pgbouncer=false&sslmode=require",
                "postgres://u@h/db?sslmode=require",
                false,
            ),
        ];
        for (url, kept, pooled) in cases {
            assert_eq!(pooler_in(url).unwrap(), (kept.to_owned(), pooled), "{url}");
        }
        assert!(pooler_in("postgres://u@h/db?pgbouncer=maybe").is_err());
    }

    #[test]
    fn behind_a_pooler_every_transaction_sets_what_a_session_would() {
        let direct = Session::new(false, Durability::Full);
        assert!(direct
            .startup_options()
            .unwrap()
            .contains("lock_timeout=5s"));
        assert_eq!(direct.per_transaction("5s"), None);
        let pooled = Session::new(true, Durability::Relaxed);
        assert_eq!(pooled.startup_options(), None);
        assert_eq!(
            pooled.per_transaction("100ms").unwrap(),
            "SET LOCAL synchronous_commit = off; SET LOCAL lock_timeout = '100ms'"
        );
    }
}
