//! Command-line flags, each also read from its environment variable
//! (flags win), as docs/CONTRACT.md section 2 fixes them.

use crate::urls::parse_psp_url;
pub use crate::urls::{DatabaseUrl, SmtpTls, SmtpUrl};
use clap::{Parser, Subcommand, ValueEnum};
use exactly_once::secrets::SecretUrl;
use http::HeaderValue;
use std::path::PathBuf;
use std::time::Duration;

/// The server's configuration; `--help` opens with the crate's description.
/// Every flag is also taken after a subcommand (`server migrate --database
/// URL`).
#[derive(Debug, Clone, Parser)]
#[command(version, about, mut_args(|arg| arg.global(true)))]
pub struct Config {
    /// Instead of serving: a deploy's migration job, or an operator's
    /// command (docs/OPERATIONS.md).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address to bind; port 0 picks a free port (printed as `listening on http://ADDR`).
    #[arg(
        long,
        env = "LISTEN",
        default_value = "127.0.0.1:3000",
        value_name = "ADDR"
    )]
    pub listen: String,

    /// `sqlite://PATH` (created with its folder if missing) or `postgres://...`.
    #[arg(
        long,
        global = true,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://data/shop.db",
        value_name = "URL",
        value_parser = DatabaseUrl::parse
    )]
    pub database: DatabaseUrl,

    /// How long a key's record is kept (`2s`, `15m`, `24h`, `7d`), from the
    /// moment its answer is recorded: an operation waiting at a recovery
    /// point does not expire, and its life starts when it finishes.
    #[arg(long, env = "KEY_TTL", default_value = "24h", value_name = "DUR", value_parser = positive_duration)]
    pub key_ttl: Duration,

    /// How often expired records are swept (to tombstones), tombstones past
    /// `--tombstone-ttl` deleted, and sent receipts past `--outbox-retention`
    /// pruned.
    #[arg(long, env = "SWEEP_INTERVAL", default_value = "60s", value_name = "DUR", value_parser = positive_duration)]
    pub sweep_interval: Duration,

    /// Static files served at `/`.
    #[arg(
        long = "www",
        env = "WWW_DIR",
        default_value = "www",
        value_name = "DIR"
    )]
    pub www_dir: PathBuf,

    /// Origins allowed to call the API from another page (repeat the flag,
    /// or a comma list in the environment variable).
    #[arg(
        long = "cors-origin",
        env = "CORS_ORIGINS",
        value_name = "ORIGIN",
        value_delimiter = ',',
        value_parser = parse_origin
    )]
    pub cors_origins: Vec<HeaderValue>,

    /// `full`: answer only once the commit is on disk; `relaxed`: survives a
    /// process kill, not a power loss (benchmarks and tests only).
    #[arg(long, env = "DURABILITY", default_value = "full", value_name = "MODE")]
    pub durability: Durability,

    /// How long a client may take to send a request body before the
    /// request is refused with 408 (a slow body holds no writer slot).
    #[arg(long, env = "BODY_TIMEOUT", default_value = "10s", value_name = "DUR", value_parser = positive_duration)]
    pub body_timeout: Duration,

    /// Honour the `X-Chaos` request header (demo and tests only). The
    /// variable takes `1`/`0` as well as `true`/`false`, `yes`/`no`, `on`/`off`.
    /// Refused unless `--listen` is a loopback address or
    /// `--chaos-on-any-address` is given as well.
    #[arg(long, env = "CHAOS", value_parser = clap::builder::BoolishValueParser::new())]
    pub chaos: bool,

    /// Allow `--chaos` on an address that is not loopback: any client
    /// that reaches it can then kill the process, and `GET /operations`
    /// shows every caller's unfinished operations.
    #[arg(long, env = "CHAOS_ON_ANY_ADDRESS", value_parser = clap::builder::BoolishValueParser::new())]
    pub chaos_on_any_address: bool,

    /// Charge cards at this payment provider (`http://HOST:PORT`, or
    /// `https://…` with its certificate checked against the platform's
    /// roots and `SSL_CERT_FILE`'s); none: charges are recorded locally only.
    #[arg(long, global = true, env = "PSP_URL", hide_env_values = true, value_name = "URL", value_parser = parse_psp_url)]
    pub psp_url: Option<SecretUrl>,

    /// Send receipts by e-mail through this SMTP server: `smtp://HOST:PORT`
    /// (plain), `smtps://USER:PASS@HOST:PORT` (implicit TLS),
    /// `smtp://USER:PASS@HOST:PORT?tls=required` (STARTTLS; a password
    /// is refused with `tls=opportunistic` or without TLS); none: no receipts.
    #[arg(long, env = "SMTP_URL", hide_env_values = true, value_name = "URL", value_parser = SmtpUrl::parse)]
    pub smtp_url: Option<SmtpUrl>,

    /// How long a started operation is owned by the request running it
    /// before a retry or the completer may resume it.
    #[arg(long, env = "OPERATION_LEASE", default_value = "30s", value_name = "DUR", value_parser = positive_duration)]
    pub operation_lease: Duration,

    /// How often the completer looks for abandoned operations.
    #[arg(long, env = "COMPLETE_INTERVAL", default_value = "10s", value_name = "DUR", value_parser = positive_duration)]
    pub complete_interval: Duration,

    /// How long one provider call may take before it counts as failed.
    #[arg(long, env = "PSP_TIMEOUT", default_value = "10s", value_name = "DUR", value_parser = positive_duration)]
    pub psp_timeout: Duration,

    /// Beyond the contract: how long after its start an operation whose
    /// step keeps failing (the provider down) is still retried; past that,
    /// its next failure sets it aside for an operator (answered 424
    /// `operation-needs-attention`). Keep it below how long the provider
    /// keeps its idempotency keys (24h at Stripe and the simulator): a
    /// charge retried after the provider forgot its key could be made twice.
    #[arg(long, env = "ATTENTION_AFTER", default_value = "12h", value_name = "DUR", value_parser = positive_duration)]
    pub attention_after: Duration,

    /// Beyond the contract: how long an expired key's tombstone (its
    /// generation, what tells the key's next operation from a run a restore
    /// forgot) is kept; at least as long as the provider keeps its keys.
    #[arg(long, env = "TOMBSTONE_TTL", default_value = "7d", value_name = "DUR", value_parser = positive_duration)]
    pub tombstone_ttl: Duration,

    /// Beyond the contract: how long a sent receipt stays in the outbox.
    #[arg(long, env = "OUTBOX_RETENTION", default_value = "7d", value_name = "DUR", value_parser = positive_duration)]
    pub outbox_retention: Duration,

    /// Beyond the contract: how long the receipts a relay claims are its
    /// own before another relay may send them (at least 1s); it sends in
    /// the first half of a claim and gives a send up after a quarter.
    #[arg(long, env = "RECEIPT_CLAIM", default_value = "60s", value_name = "DUR", value_parser = receipt_claim)]
    pub receipt_claim: Duration,

    /// Start without migrating: the database must already be at a schema
    /// this release serves on (a deploy's migration job ran `server
    /// migrate`); one behind it is refused, naming what it lacks. The
    /// variable takes `1`/`0` as well as `true`/`false`.
    #[arg(long, env = "NO_MIGRATE", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_migrate: bool,

    /// At most this many connections open at once; past it, new ones wait
    /// until one closes (the requests running are not touched).
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = serve::watch::MAX_CONNECTIONS as u32, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Requests a second per caller (its bearer token or `sid` cookie; the
    /// peer's address for a request without), in bursts of up to twice
    /// that; past it, 429 `rate-limited` with `Retry-After`. `/healthz` and
    /// `/metrics` are exempt. 0: no limit.
    #[arg(long, env = "CALLER_RATE", default_value_t = 100, value_name = "N")]
    pub caller_rate: u32,

    /// Beyond the contract: at most this many unfinished operations (started,
    /// no final answer yet) per caller; a new key past it is answered 429
    /// `rate-limited` with `Retry-After`, and nothing is stored. 0: no limit.
    #[arg(
        long,
        env = "CALLER_UNFINISHED",
        default_value_t = 100,
        value_name = "N"
    )]
    pub caller_unfinished: u32,

    /// Beyond the contract: at most this many receipts per caller in any
    /// hour; a succeeded charge past it is answered as usual but sends no
    /// receipt (logged, and counted in `receipts_withheld_total`). 0: no
    /// limit.
    #[arg(long, env = "CALLER_RECEIPTS", default_value_t = 10, value_name = "N")]
    pub caller_receipts: u32,

    /// Hidden, for tests: a request's headers must arrive within this
    /// (the contract's 10s).
    #[arg(long, hide = true, value_name = "DUR", value_parser = positive_duration)]
    pub header_read_timeout: Option<Duration>,

    /// Hidden, for tests: an idle keep-alive connection is closed after
    /// this (the contract's 60s).
    #[arg(long, hide = true, value_name = "DUR", value_parser = positive_duration)]
    pub idle_timeout: Option<Duration>,
}

impl Config {
    /// What one client may hold of the listener: `--max-connections`, and
    /// the contract's timeouts unless a test shortened them.
    pub fn listener_limits(&self) -> serve::Limits {
        let contract = serve::Limits::default();
        serve::Limits {
            header_read_timeout: self
                .header_read_timeout
                .unwrap_or(contract.header_read_timeout),
            idle_timeout: self.idle_timeout.unwrap_or(contract.idle_timeout),
            max_connections: self.max_connections as usize,
        }
    }
}

/// What the binary does instead of serving.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Apply the database's migrations and exit (a deploy's migration
    /// job): 0 once the database is at a schema this release serves on;
    /// non-zero with one line otherwise. Takes the server's flags,
    /// `--database` above all.
    Migrate,
    /// The operator's view of unfinished and dead-lettered operations:
    /// list, show, retry, settle (against --database; no server needed).
    Operations(crate::operations::Operations),
}

/// When an answer may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// After the commit is on disk (`synchronous=FULL`).
    Full,
    /// After the commit is in the OS (`synchronous=NORMAL`).
    Relaxed,
}

impl From<Durability> for exactly_once::Durability {
    fn from(durability: Durability) -> Self {
        match durability {
            Durability::Full => Self::Full,
            Durability::Relaxed => Self::Relaxed,
        }
    }
}

fn positive_duration(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if d.is_zero() => Err("must be longer than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{e} (examples: 2s, 15m, 24h, 7d)")),
    }
}

fn receipt_claim(raw: &str) -> Result<Duration, String> {
    let claim = positive_duration(raw)?;
    if claim < Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    Ok(claim)
}

fn parse_origin(raw: &str) -> Result<HeaderValue, String> {
    let raw = raw.trim();
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
        .ok_or_else(|| format!("{raw:?} is not an origin such as http://localhost:8080"))?;
    if rest.is_empty() || rest.contains('/') {
        return Err(format!(
            "{raw:?} is not an origin such as http://localhost:8080 (no path)"
        ));
    }
    HeaderValue::from_str(raw).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serve::flags::{assert_refused, parse};

    #[test]
    fn defaults_follow_the_contract() {
        let c: Config = parse(&[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:3000");
        assert_eq!(c.database, DatabaseUrl::Sqlite("data/shop.db".into()));
        assert_eq!(c.key_ttl, Duration::from_secs(24 * 3600));
        assert_eq!(c.sweep_interval, Duration::from_secs(60));
        assert_eq!(c.www_dir, PathBuf::from("www"));
        assert!(c.cors_origins.is_empty());
        assert_eq!(c.durability, Durability::Full);
        assert!(!c.chaos);
        assert_eq!(c.psp_url, None);
        assert_eq!(c.smtp_url, None);
        assert_eq!(c.operation_lease, Duration::from_secs(30));
        assert_eq!(c.complete_interval, Duration::from_secs(10));
        assert_eq!(c.psp_timeout, Duration::from_secs(10));
        assert_eq!(c.listener_limits(), serve::Limits::default());
        assert_eq!(c.listener_limits().max_connections, 4096);
        assert_eq!(c.caller_rate, 100);
    }

    #[test]
    fn provider_and_smtp_urls_parse() {
        let c: Config = parse(&[
            "--psp-url",
            "http://127.0.0.1:3001/",
            "--smtp-url",
            "smtp://localhost:1025",
            "--operation-lease",
            "5s",
        ])
        .unwrap();
        assert_eq!(c.psp_url.as_deref(), Some("http://127.0.0.1:3001"));
        assert!(!c.chaos_on_any_address);
        assert_eq!(
            c.smtp_url,
            Some(SmtpUrl {
                host: "localhost".into(),
                port: 1025,
                tls: SmtpTls::None,
                credentials: None,
            })
        );
        assert_eq!(c.operation_lease, Duration::from_secs(5));
        assert_eq!(SmtpUrl::parse("smtp://mail").unwrap().port, 25);
    }

    #[test]
    fn tls_urls_parse_as_lettre_names_them() {
        let c: Config = parse(&["--psp-url", "https://psp.example:8443/"]).unwrap();
        assert_eq!(c.psp_url.as_deref(), Some("https://psp.example:8443"));
        let implicit = SmtpUrl::parse("smtps://shop:s%40cret@mail.example").unwrap();
        assert_eq!(
            implicit,
            SmtpUrl {
                host: "mail.example".into(),
                port: 465,
                tls: SmtpTls::Implicit,
                credentials: Some(("shop".into(), "s@cret".into())),
            }
        );
        let starttls = SmtpUrl::parse("smtp://u:p@127.0.0.1:2525?tls=required").unwrap();
        assert_eq!(starttls.tls, SmtpTls::Required);
        assert_eq!((starttls.host.as_str(), starttls.port), ("127.0.0.1", 2525));
        assert!(
            !format!("{implicit:?}").contains("s@cret"),
            "the password stays out of Debug"
        );
    }

    #[test]
    fn debug_shows_no_password() {
        let c: Config = parse(&[
            "--database",
            "postgres://shop:hunter2@db.example/shop",
            "--psp-url",
            "https://shop:hunter2@psp.example",
            "--smtp-url",
            "smtps://shop:hunter2@mail.example",
        ])
        .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("postgres://shop:***@db.example/shop"),
            "{shown}"
        );
        assert!(shown.contains("https://shop:***@psp.example"), "{shown}");
    }

    #[test]
    fn flags_parse_durations_origins_and_modes() {
        let c: Config = parse(&[
            "--key-ttl",
            "7d",
            "--sweep-interval",
            "2s",
            "--cors-origin",
            "http://a:1",
            "--cors-origin",
            "https://b.example",
            "--durability",
            "relaxed",
            "--chaos",
            "--database",
            "sqlite:///tmp/x/shop.db",
        ])
        .unwrap();
        assert_eq!(c.key_ttl, Duration::from_secs(7 * 86400));
        assert_eq!(c.sweep_interval, Duration::from_secs(2));
        assert_eq!(c.cors_origins.len(), 2);
        assert_eq!(c.durability, Durability::Relaxed);
        assert!(c.chaos);
        assert_eq!(c.database, DatabaseUrl::Sqlite("/tmp/x/shop.db".into()));
    }

    #[test]
    fn migrate_is_a_subcommand_that_takes_the_server_s_flags_on_either_side() {
        let serve: Config = parse(&["--database", "sqlite://a.db"]).unwrap();
        assert!(serve.command.is_none());
        assert!(!serve.no_migrate);
        for args in [
            &["migrate", "--database", "sqlite://a.db"][..],
            &["--database", "sqlite://a.db", "migrate"][..],
        ] {
            let c: Config = parse(args).unwrap();
            assert!(matches!(c.command, Some(Command::Migrate)), "{args:?}");
            assert_eq!(c.database, DatabaseUrl::Sqlite("a.db".into()), "{args:?}");
        }
        assert!(parse::<Config>(&["--no-migrate"]).unwrap().no_migrate);
        assert_refused::<Config>(&[&["migrate", "now"], &["migrations"]]);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert_refused::<Config>(&[
            &["--key-ttl", "soon"],
            &["--key-ttl", "0s"],
            &["--durability", "maybe"],
            &["--database", "mysql://x"],
            &["--database", "sqlite://"],
            &["--cors-origin", "localhost:8080"],
            &["--cors-origin", "http://a/path"],
            &["--psp-url", "ftp://psp.example"],
            &["--psp-url", "127.0.0.1:3001"],
            &["--psp-url", "https://"],
            &["--smtp-url", "imap://mail:143"],
            &["--smtp-url", "smtp://mail:notaport"],
            &["--smtp-url", "smtp://mail?tls=sometimes"],
            &["--smtp-url", "smtps://mail?tls=required"],
            &["--smtp-url", "smtp://user:pass@mail:25"],
            &["--smtp-url", "smtp://user:pass@mail:25?tls=opportunistic"],
            &["--smtp-url", "smtps://user@mail"],
            &["--operation-lease", "0s"],
            &["--max-connections", "0"],
            &["--caller-rate", "-1"],
            &["--no-such-flag"],
        ]);
    }
}
