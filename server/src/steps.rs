//! The shop's step between phases: at `charge_created`, the card is
//! charged at the payment provider with the run's downstream key, and the
//! phase that records the provider's verdict ([`FinishCharge`]) comes
//! back to the engine, which commits it under the lease.

use crate::domain::ChargeId;
use crate::operation::charge::{FinishCharge, PendingCharge, CHARGE_CREATED};
use crate::provider::{Provider, Reply};
use async_trait::async_trait;
use exactly_once::{Error, Lease, Operation, StepUnavailable, Steps};
use std::sync::Arc;

/// The payment provider gave no final answer: the operation waits at its
/// recovery point; a retry resumes it (503 `provider-unavailable`).
pub fn provider_unavailable(reason: impl Into<String>) -> Error {
    Error::StepUnavailable(StepUnavailable {
        slug: "provider-unavailable",
        title: "Payment provider unavailable",
        detail: "the payment provider did not answer; the payment is kept and a retry with \
                 the same Idempotency-Key resumes it"
            .into(),
        reason: reason.into(),
    })
}

/// What the shop's steps need: the provider, and whether receipts are sent.
pub struct ShopSteps {
    /// `--psp-url`, if any.
    pub provider: Option<Arc<Provider>>,
    /// Whether receipts are sent (`--smtp-url`).
    pub receipts: bool,
}

#[async_trait]
impl Steps for ShopSteps {
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation>, Error> {
        match lease.point.as_str() {
            CHARGE_CREATED => self.charge_at_provider(lease).await,
            other => Err(Error::internal(format!(
                "an operation stopped at {other:?}, which this server does not know"
            ))),
        }
    }

    /// `charge_created`, the one point of this release: an operation a
    /// later release stopped elsewhere is left to that release.
    fn knows(&self, point: &str) -> bool {
        point == CHARGE_CREATED
    }
}

impl ShopSteps {
    /// At `charge_created`: asks the provider to charge (same downstream key
    /// every time), and returns the phase that records its verdict.
    async fn charge_at_provider(&self, lease: &Lease) -> Result<Arc<dyn Operation>, Error> {
        // A state no retry can read, or a provider that refuses the request
        // for good, will be so at every attempt: the operation is set aside
        // for an operator (StepFailedForGood), not retried forever.
        let pending = PendingCharge::from_state(&lease.state).map_err(|e| {
            Error::StepFailedForGood(format!("a stopped charge's state is unreadable: {e}"))
        })?;
        let charge = ChargeId::parse(&pending.id).ok_or_else(|| {
            Error::StepFailedForGood(format!("a stopped charge has a bad id {:?}", pending.id))
        })?;
        let Some(provider) = &self.provider else {
            return Err(provider_unavailable(
                "a payment was started with a provider and this server runs without --psp-url",
            ));
        };
        let key = pending.downstream_key(lease);
        match provider
            .charge(&key, &pending, pending.provider_metadata(lease))
            .await
        {
            Reply::Verdict(verdict) => {
                tracing::info!(status = verdict.status().as_str(), "the provider answered");
                Ok(Arc::new(FinishCharge {
                    charge,
                    verdict,
                    receipts: self.receipts,
                }))
            }
            Reply::Unavailable(why) => {
                tracing::warn!(reason = %why, "no final answer from the provider; the operation waits at its recovery point");
                Err(provider_unavailable(why))
            }
            Reply::Refused(why) => {
                tracing::error!(reason = %why, "the provider refused the charge for good");
                Err(Error::StepFailedForGood(why))
            }
        }
    }
}
