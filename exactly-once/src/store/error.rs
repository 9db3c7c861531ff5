//! Why a store could not answer, and whether anything was done: the one
//! error type every backend returns.

use std::fmt;
use std::sync::Arc;

/// What a store call returns: its value, or why the store could not answer.
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlx")),
    allow(unreachable_pub)
)]
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why the store could not answer. Either way nothing was written.
///
/// It keeps the driver's error as its [`source`](std::error::Error::source),
/// so the log shows the whole chain; cloning shares it (a batch answers
/// every request of a failed commit with the same error).
#[derive(Debug, Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    context: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Whether a retry may succeed, and whether anything was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The database cannot be reached, is full, busy or gone: nothing was
    /// done, a retry may succeed (503).
    Unavailable,
    /// The connection broke while the transaction was committing: it may
    /// or may not have committed. A retry with the same key answers with
    /// what was done (503).
    OutcomeUnknown,
    /// Anything else: a bug or a corrupt database; nothing was done (500).
    Internal,
    /// The database's schema is one this release cannot serve on: not
    /// migrated to this release's version yet, or migrated by a later
    /// release with a migration that does not run beside this one
    /// (see [`Migration`](crate::Migration)). Nothing was done (503); the context names the
    /// migration.
    IncompatibleSchema,
}

impl StoreError {
    /// A retryable failure.
    pub fn unavailable(context: impl Into<String>) -> Self {
        Self {
            kind: StoreErrorKind::Unavailable,
            context: context.into(),
            source: None,
        }
    }

    /// A commit whose outcome is unknown.
    pub fn outcome_unknown(context: impl Into<String>) -> Self {
        Self {
            kind: StoreErrorKind::OutcomeUnknown,
            context: context.into(),
            source: None,
        }
    }

    /// A failure a retry will not fix.
    pub fn internal(context: impl Into<String>) -> Self {
        Self {
            kind: StoreErrorKind::Internal,
            context: context.into(),
            source: None,
        }
    }

    /// The database's schema is one this release cannot serve on;
    /// `context` names the migration that stands in the way.
    pub fn incompatible_schema(context: impl Into<String>) -> Self {
        Self {
            kind: StoreErrorKind::IncompatibleSchema,
            context: context.into(),
            source: None,
        }
    }

    /// What the error says without its causes (for the incompatible
    /// schema, the migration that stands in the way).
    pub fn context(&self) -> &str {
        &self.context
    }

    /// A driver's error, sorted by the backend: [`unavailable`](Self::unavailable)
    /// when a retry may fix it, [`internal`](Self::internal) otherwise.
    pub fn sorted(
        retryable: bool,
        backend: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let error = if retryable {
            Self::unavailable(backend)
        } else {
            Self::internal(backend)
        };
        error.caused_by(source)
    }

    /// The same error, caused by `source`.
    pub fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// Retryable or not.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// True when a retry may succeed: every kind but
    /// [`StoreErrorKind::Internal`] (an incompatible schema is fixed by
    /// deploying the release it needs, or by migrating).
    pub fn is_unavailable(&self) -> bool {
        self.kind != StoreErrorKind::Internal
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StoreErrorKind::Unavailable => write!(f, "database unavailable: {}", self.context),
            StoreErrorKind::OutcomeUnknown => {
                write!(f, "database commit outcome unknown: {}", self.context)
            }
            StoreErrorKind::Internal => write!(f, "database error: {}", self.context),
            StoreErrorKind::IncompatibleSchema => {
                write!(f, "incompatible database schema: {}", self.context)
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
