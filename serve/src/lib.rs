//! What the workspace's two HTTP binaries share, the checkout `server` and
//! the payment provider simulator `psp`, so that each is only its own
//! application:
//!
//! - [`accept`]: the accept loop (graceful drain on shutdown, a
//!   [`ConnectionControl`] in every request), and [`shutdown_signal`];
//! - [`watch`]: what a client may hold of the listener ([`Limits`]: the
//!   header-read and idle timeouts, the connection cap) and how each
//!   connection is held to it;
//! - [`logs`]: structured logs on stderr;
//! - [`main`](fn@main): a binary's `main`: flags (a bad one is one line on
//!   stderr and exit 2), logs, the runtime, [`App::build`], the
//!   `listening on http://ADDR` line (`https://` over TLS) on stdout,
//!   serving until a signal;
//! - [`bind`]: binding the listen address, with the error both report;
//! - [`flags`]: for the binaries' flag tests, flags parsed as `main` does;
//! - [`headers`]: a header that may appear only once, read or refused,
//!   and the text of an idempotency key (1 to 255 visible ASCII);
//! - [`migrations`]: the numbered migrations of a SQLite file, applied once
//!   each and recorded in `schema_migrations`;
//! - [`sweep`]: deleting expired records in batches, every interval;
//! - [`macros`]: [`app!`] (a type's [`App`] impl from its own methods) and
//!   [`text_newtype!`] (`AsRef<str>` and `Display` of a parsed string).

pub mod accept;
mod fds;
pub mod flags;
pub mod headers;
pub mod logs;
pub mod macros;
pub mod watch;
/// The numbered migrations of a SQLite file: the engine's runner.
pub use exactly_once::workspace::migrations;
/// Deleting expired records in batches, every interval: the engine's loop.
pub use exactly_once::workspace::sweep;

pub use accept::{serve, serve_tls, serve_with_limits, shutdown_signal, ConnectionControl};
pub use tokio_rustls::TlsAcceptor;
pub use watch::Limits;

use exactly_once::secrets::redact;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::net::TcpListener;

/// An application a binary serves: built from its flags, bound, run until
/// a signal.
pub trait App: Sized {
    /// Its flags.
    type Config: clap::Parser;
    /// Why it could not start.
    type Error: std::error::Error + 'static;

    /// Opens what it needs and binds.
    fn build(config: Self::Config) -> impl Future<Output = Result<Self, Self::Error>>;

    /// The address bound (port 0 resolved).
    fn local_addr(&self) -> SocketAddr;

    /// `http`, or `https` when it serves TLS: the scheme of the
    /// `listening on` line.
    fn scheme(&self) -> &'static str {
        "http"
    }

    /// Serves until `shutdown` resolves, then drains.
    fn run_until_stopped(self, shutdown: impl Future<Output = ()>) -> impl Future<Output = ()>;
}

/// Makes ring the process's rustls crypto provider, as the first line of
/// every binary's `main`. Which providers a build compiles in depends on
/// the features Cargo unified across everything built with it (reqwest's
/// `rustls-tls-manual-roots-no-provider` brings rustls and no provider),
/// so a binary that left the choice to rustls could start when built alone
/// and panic ("No provider set") when built beside the others. An `Err`
/// only says a provider is installed already.
pub fn install_crypto_provider() {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
}

/// A binary's `main`: parses the flags of `A`, starts logs with
/// `default_filter` (`RUST_LOG` wins), builds and serves `A` until SIGTERM
/// or Ctrl-C. A bad flag: its first line on stderr, exit 2; a failed start:
/// one `error:` line with its causes, exit 1. Either line shows a URL's
/// password as `***`.
pub fn main<A: App>(default_filter: &str) -> ExitCode {
    let config = match <A::Config as clap::Parser>::try_parse() {
        Ok(config) => config,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's first line names the problem; the usage lines add noise.
            let text = e.to_string();
            let line = text.lines().next().unwrap_or("error: bad arguments");
            // clap repeats a refused value whole.
            eprintln!("{}", redact(line));
            return ExitCode::from(2);
        }
    };
    logs::init(default_filter);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let app = match A::build(config).await {
            Ok(app) => app,
            Err(e) => {
                eprintln!("error: {}", redact(&Chain(&e).to_string()));
                return ExitCode::FAILURE;
            }
        };
        println!("listening on {}://{}", app.scheme(), app.local_addr());
        app.run_until_stopped(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}

/// The listen address could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    /// The address asked for.
    pub addr: String,
    /// Why.
    pub source: std::io::Error,
}

/// Binds `addr` (port 0 picks a free port).
pub async fn bind(addr: &str) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).await.map_err(|source| BindError {
        addr: addr.to_owned(),
        source,
    })
}

/// For the binaries' tests: panics when an error line names a cause twice
/// (printed in its error's message and again as its source): a
/// `: `-separated part right after itself, or two parts in a row that
/// stand again later in the line.
#[track_caller]
pub fn assert_each_cause_once(line: &str) {
    let parts: Vec<&str> = line.split(": ").collect();
    for (i, pair) in parts.windows(2).enumerate() {
        assert_ne!(pair[0], pair[1], "a cause twice in: {line}");
        let again = parts[i + 1..].windows(2).any(|later| later == pair);
        assert!(!again, "{:?} twice in: {line}", pair.join(": "));
    }
}

/// An error and its sources, `: `-separated, on one line, each cause once:
/// the engine's.
pub use exactly_once::workspace::Chain;

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that names its cause in its message and also returns it.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot open {what}: {source}")]
    struct Opening {
        what: &'static str,
        source: std::io::Error,
    }

    /// An error that leaves its cause to the chain.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot start")]
    struct Starting(#[source] Opening);

    #[test]
    fn a_chain_names_each_cause_once() {
        let e = Starting(Opening {
            what: "the ledger",
            source: std::io::Error::other("disk on fire"),
        });
        let line = Chain(&e).to_string();
        assert_eq!(line, "cannot start: cannot open the ledger: disk on fire");
        assert_each_cause_once(&line);
    }
}
