//! Chaos mode (`--chaos`): the `X-Chaos` header makes a request fail at a
//! chosen point, so the demo and the tests can show what the client and
//! the server do about it. The engine sees one value, [`Chaos`], as the
//! request's [`Faults`], and calls it at the points where a fault can
//! strike; without `--chaos` (or without the header) every call is a no-op.

use crate::error::ApiError;
use async_trait::async_trait;
use exactly_once::faults::TransactionEnd;
use exactly_once::{Error, Faults};
use serve::ConnectionControl;
use std::time::Duration;

/// The longest `delay-after-commit` accepted.
const MAX_DELAY: Duration = Duration::from_secs(600);

/// Where a request should fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Run, roll back, drop the connection: nothing is stored.
    CrashBeforeCommit,
    /// Commit, then drop the connection without an answer.
    DropAfterCommit,
    /// Commit, then wait this long before answering.
    DelayAfterCommit(Duration),
    /// Commit, then exit the process with code 137 (as if OOM-killed).
    ExitAfterCommit,
    /// With `--psp-url`: exit (137) once the operation's start is
    /// committed, before the provider is called. Without a provider no
    /// provider is called, so it does nothing.
    ExitBeforeProvider,
    /// With `--psp-url`: exit (137) once the provider has answered, before
    /// its answer is committed. Without a provider it does nothing.
    ExitAfterProvider,
}

impl Fault {
    /// The request header that carries it.
    pub const HEADER: &'static str = "x-chaos";

    /// Every value [`Fault::parse`] takes, as docs/CONTRACT.md section 5
    /// spells them (`MS` stands for a number of milliseconds); the OpenAPI
    /// document lists these.
    pub const NAMES: [&'static str; 6] = [
        "crash-before-commit",
        "drop-after-commit",
        "delay-after-commit=MS",
        "exit-after-commit",
        "exit-before-provider",
        "exit-after-provider",
    ];

    /// Parses an `X-Chaos` value.
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim() {
            "crash-before-commit" => Ok(Self::CrashBeforeCommit),
            "drop-after-commit" => Ok(Self::DropAfterCommit),
            "exit-after-commit" => Ok(Self::ExitAfterCommit),
            "exit-before-provider" => Ok(Self::ExitBeforeProvider),
            "exit-after-provider" => Ok(Self::ExitAfterProvider),
            other => {
                let ms = other
                    .strip_prefix("delay-after-commit=")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .map(Duration::from_millis)
                    .filter(|d| *d <= MAX_DELAY)
                    .ok_or_else(|| {
                        format!(
                            "X-Chaos must be one of {} (MS up to {})",
                            Self::NAMES.join(", "),
                            MAX_DELAY.as_millis()
                        )
                    })?;
                Ok(Self::DelayAfterCommit(ms))
            }
        }
    }
}

/// What chaos mode will do to one request: nothing, or one fault.
#[derive(Debug, Clone, Default)]
pub struct Chaos {
    fault: Option<Fault>,
    connection: Option<ConnectionControl>,
}

impl Chaos {
    /// Reads `X-Chaos` when chaos mode is `enabled` (else ignores it).
    /// `connection` is the request's, for faults that cut it.
    pub fn from_request(
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        enabled: bool,
    ) -> Result<Self, ApiError> {
        let Some(value) = headers.get(Fault::HEADER).filter(|_| enabled) else {
            return Ok(Self::default());
        };
        let fault = value
            .to_str()
            .map_err(|_| ApiError::InvalidRequest("X-Chaos is not ASCII".into()))
            .and_then(|v| Fault::parse(v).map_err(ApiError::InvalidRequest))?;
        Ok(Self {
            fault: Some(fault),
            connection: extensions.get::<ConnectionControl>().cloned(),
        })
    }

    /// Cuts the request's connection; the handler never finishes.
    pub async fn drop_connection<T>(&self) -> Result<T, Error> {
        match &self.connection {
            Some(connection) => {
                connection.drop_connection();
                std::future::pending().await
            }
            None => Err(Error::internal(
                "chaos asked to drop a connection the server does not manage",
            )),
        }
    }
}

#[async_trait]
impl Faults for Chaos {
    /// How the run's transaction ends: rolled back for `crash-before-commit`.
    fn first_phase_end(&self) -> TransactionEnd {
        match self.fault {
            Some(Fault::CrashBeforeCommit) => TransactionEnd::RollBack,
            _ => TransactionEnd::Commit,
        }
    }

    /// Rolled back on purpose: the connection is dropped, no answer.
    async fn rolled_back(&self) -> Result<(), Error> {
        tracing::warn!("chaos: rolled back before commit, dropping the connection");
        self.drop_connection().await
    }

    /// The run committed: the work is durable, now the answer misbehaves.
    async fn after_commit(&self) -> Result<(), Error> {
        match self.fault {
            Some(Fault::DropAfterCommit) => {
                tracing::warn!("chaos: committed, dropping the connection");
                self.drop_connection().await
            }
            Some(Fault::DelayAfterCommit(delay)) => {
                tracing::warn!(?delay, "chaos: committed, delaying the answer");
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Some(Fault::ExitAfterCommit) => {
                tracing::warn!("chaos: committed, exiting with 137");
                std::process::exit(137);
            }
            _ => Ok(()),
        }
    }

    /// The start is committed; the provider is about to be called.
    fn before_step(&self) {
        if self.fault == Some(Fault::ExitBeforeProvider) {
            tracing::warn!("chaos: start committed, exiting with 137 before the provider call");
            std::process::exit(137);
        }
    }

    /// The provider answered; its answer is not committed yet.
    fn after_step(&self) {
        if self.fault == Some(Fault::ExitAfterProvider) {
            tracing::warn!("chaos: the provider answered, exiting with 137 before the commit");
            std::process::exit(137);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaos_values_parse_as_the_contract_names_them() {
        for (text, fault) in [
            ("crash-before-commit", Fault::CrashBeforeCommit),
            ("drop-after-commit", Fault::DropAfterCommit),
            ("exit-after-commit", Fault::ExitAfterCommit),
            (
                "delay-after-commit=1500",
                Fault::DelayAfterCommit(Duration::from_millis(1500)),
            ),
            ("exit-before-provider", Fault::ExitBeforeProvider),
            ("exit-after-provider", Fault::ExitAfterProvider),
        ] {
            assert_eq!(Fault::parse(text), Ok(fault), "{text}");
        }
        for bad in [
            "",
            "explode",
            "delay-after-commit",
            "delay-after-commit=x",
            "delay-after-commit=9999999",
        ] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_listed_name_parses_to_its_own_fault() {
        let faults: Vec<Fault> = Fault::NAMES
            .iter()
            .map(|name| Fault::parse(&name.replace("=MS", "=25")).expect(name))
            .collect();
        for fault in &faults {
            // A new fault must be added to NAMES (and so to the document).
            match fault {
                Fault::CrashBeforeCommit
                | Fault::DropAfterCommit
                | Fault::DelayAfterCommit(_)
                | Fault::ExitAfterCommit
                | Fault::ExitBeforeProvider
                | Fault::ExitAfterProvider => {}
            }
        }
        let distinct: std::collections::HashSet<_> =
            faults.iter().map(std::mem::discriminant).collect();
        assert_eq!(distinct.len(), Fault::NAMES.len());
    }
}
