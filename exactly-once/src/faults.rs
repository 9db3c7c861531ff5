//! Points in a keyed request where an embedder may make it fail on
//! purpose, for a demo or a test of its clients: roll the first phase
//! back, misbehave after a commit, stop a process around a step. Every
//! method does nothing by default; [`NoFaults`] is what a request
//! that asks for none.

use crate::error::Error;
pub use crate::store::TransactionEnd;
use async_trait::async_trait;
use std::fmt;

/// What to do at each point of a keyed request. Your type is taken from
/// the request (it is an extractor, see [`Keyed`](crate::Keyed)), so a
/// header can choose it.
#[async_trait]
pub trait Faults: fmt::Debug + Send + Sync + 'static {
    /// How the first phase's transaction ends.
    fn first_phase_end(&self) -> TransactionEnd {
        TransactionEnd::Commit
    }

    /// The first phase ran and was rolled back on purpose
    /// ([`TransactionEnd::RollBack`]): nothing is stored. Returning `Ok` answers
    /// 503, "nothing was done".
    async fn rolled_back(&self) -> Result<(), Error> {
        Ok(())
    }

    /// The operation finished and its answer is committed; the answer has
    /// not left yet.
    async fn after_commit(&self) -> Result<(), Error> {
        Ok(())
    }

    /// A phase stopped at a recovery point is committed; its step (the
    /// work outside the database) is about to run.
    fn before_step(&self) {}

    /// The step ran; its result is not committed yet.
    fn after_step(&self) {}
}

/// The faults of a request that asks for none: it runs as it should.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFaults;

impl Faults for NoFaults {}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for NoFaults {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        _parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self)
    }
}
