//! Chaos mode (`--chaos`): the `X-Chaos` header makes a request fail at a
//! chosen point, so the demo and the tests can show what the client and
//! the server do about it.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The longest `delay-after-commit` accepted.
const MAX_DELAY: Duration = Duration::from_secs(600);

/// Where a request should fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chaos {
    /// Run, roll back, drop the connection: nothing is stored.
    CrashBeforeCommit,
    /// Commit, then drop the connection without an answer.
    DropAfterCommit,
    /// Commit, then wait this long before answering.
    DelayAfterCommit(Duration),
    /// Commit, then exit the process with code 137 (as if OOM-killed).
    ExitAfterCommit,
}

impl Chaos {
    /// The request header that carries it.
    pub const HEADER: &'static str = "x-chaos";

    /// Parses an `X-Chaos` value.
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim() {
            "crash-before-commit" => Ok(Self::CrashBeforeCommit),
            "drop-after-commit" => Ok(Self::DropAfterCommit),
            "exit-after-commit" => Ok(Self::ExitAfterCommit),
            other => {
                let ms = other
                    .strip_prefix("delay-after-commit=")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .map(Duration::from_millis)
                    .filter(|d| *d <= MAX_DELAY)
                    .ok_or_else(|| {
                        format!(
                            "X-Chaos must be crash-before-commit, drop-after-commit, \
                             delay-after-commit=MS (MS up to {}) or exit-after-commit",
                            MAX_DELAY.as_millis()
                        )
                    })?;
                Ok(Self::DelayAfterCommit(ms))
            }
        }
    }
}

/// A handle on the connection a request came in on, so chaos can cut it.
/// The server's accept loop puts one in every request's extensions.
#[derive(Debug, Clone, Default)]
pub struct ConnectionControl(Arc<Notify>);

impl ConnectionControl {
    /// Asks the connection's task to drop the connection now, without an answer.
    pub fn drop_connection(&self) {
        self.0.notify_one();
    }

    /// Resolves when [`ConnectionControl::drop_connection`] was called.
    pub async fn dropped(&self) {
        self.0.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaos_values_parse_as_the_contract_names_them() {
        assert_eq!(
            Chaos::parse("crash-before-commit"),
            Ok(Chaos::CrashBeforeCommit)
        );
        assert_eq!(
            Chaos::parse("drop-after-commit"),
            Ok(Chaos::DropAfterCommit)
        );
        assert_eq!(
            Chaos::parse("exit-after-commit"),
            Ok(Chaos::ExitAfterCommit)
        );
        assert_eq!(
            Chaos::parse("delay-after-commit=1500"),
            Ok(Chaos::DelayAfterCommit(Duration::from_millis(1500)))
        );
        for bad in [
            "",
            "explode",
            "delay-after-commit",
            "delay-after-commit=x",
            "delay-after-commit=9999999",
        ] {
            assert!(Chaos::parse(bad).is_err(), "{bad}");
        }
    }
}
