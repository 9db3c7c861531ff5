//! A sqlx COMMIT whose wait for the synchronous standby was cancelled.
//!
//! PostgreSQL then answers the COMMIT as done, with a WARNING before it
//! ("canceling wait for synchronous replication … The transaction has
//! already committed locally, but might not have been replicated to the
//! standby"): committed here, perhaps lost in a failover. tokio-postgres
//! hands the notice to the store's connection loop, which closes the
//! connection, so the commit's outcome is unknown. sqlx has no notice hook:
//! it logs each notice as a `tracing` event (target
//! `sqlx::postgres::notice`) while the statement that drew it runs. So
//! the engine's COMMIT on sqlx runs under a subscriber of its own that
//! passes everything on to the one that was the default when the store was
//! opened, and notes that event; a commit that drew it is an outcome
//! unknown (503, "may or may not have been done"), as on tokio-postgres.

use super::error::classify_commit;
use crate::store::{Result, StoreError};
use sqlx::Postgres as SqlxPostgres;
use std::cell::Cell;
use tracing::instrument::WithSubscriber;
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// Where sqlx logs the server's notices.
const NOTICES: &str = "sqlx::postgres::notice";

tokio::task_local! {
    /// Set when the commit running in this task drew the WARNING.
    static REPLICATION_WAIT_CANCELLED: Cell<bool>;
}

/// Commits `tx` on sqlx; a commit that lost its connection, or whose wait
/// for the synchronous standby was cancelled, has an unknown outcome.
#[derive(Debug, Clone)]
pub(super) struct Committer {
    watch: Dispatch,
}

impl Committer {
    /// Passing every other event and span to the subscriber that is the
    /// default now.
    pub(super) fn new() -> Self {
        let inner = tracing::dispatcher::get_default(Dispatch::clone);
        Self {
            watch: Dispatch::new(Watch {
                inner,
                max_level: LevelFilter::current().max(LevelFilter::WARN),
            }),
        }
    }

    /// Commits `tx`.
    pub(super) async fn commit(&self, tx: sqlx::Transaction<'static, SqlxPostgres>) -> Result<()> {
        let commit = tx.commit().with_subscriber(self.watch.clone());
        let (committed, cancelled) = REPLICATION_WAIT_CANCELLED
            .scope(Cell::new(false), async {
                let committed = super::sqlx_timeouts::answered(commit).await;
                (committed, REPLICATION_WAIT_CANCELLED.with(Cell::get))
            })
            .await;
        committed.map_err(|e| classify_commit(e, "COMMIT"))?;
        if cancelled {
            tracing::warn!(
                "a commit's wait for the synchronous standby was cancelled: its outcome is \
                 unknown rather than a success the standby may not have"
            );
            return Err(StoreError::outcome_unknown(
                "the commit's wait for the synchronous standby was cancelled: committed here, \
                 perhaps not on the standby",
            ));
        }
        Ok(())
    }
}

/// The store's subscriber while a COMMIT runs: `inner` with an eye on
/// sqlx's notices.
struct Watch {
    inner: Dispatch,
    /// The most verbose level enabled when it was made, and at least
    /// sqlx's WARNINGs.
    max_level: LevelFilter,
}

/// Notes whether an event's message speaks of a cancelled wait for
/// synchronous replication.
struct Cancelled(bool);

impl tracing::field::Visit for Cancelled {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.note(field, value);
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.note(field, &format!("{value:?}"));
    }
}

impl Cancelled {
    fn note(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" && value.contains("synchronous replication") {
            self.0 = true;
        }
    }
}

impl Subscriber for Watch {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match metadata.target() == NOTICES {
            true => Interest::sometimes(),
            false => self.inner.register_callsite(metadata),
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == NOTICES || self.inner.enabled(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max_level)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.inner.record(span, values)
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.inner.record_follows_from(span, follows)
    }

    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() == NOTICES {
            let mut seen = Cancelled(false);
            event.record(&mut seen);
            if seen.0 {
                let _ = REPLICATION_WAIT_CANCELLED.try_with(|cancelled| cancelled.set(true));
            }
            if !self.inner.enabled(event.metadata()) {
                return;
            }
        }
        self.inner.event(event)
    }

    fn enter(&self, span: &Id) {
        self.inner.enter(span)
    }

    fn exit(&self, span: &Id) {
        self.inner.exit(span)
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.inner.try_close(id)
    }

    fn current_span(&self) -> tracing_core::span::Current {
        self.inner.current_span()
    }
}
