//! The shop's step between phases: at `charge_created`, the card is
//! charged at the payment provider with the run's downstream key, and the
//! phase that records the provider's verdict ([`FinishCharge`]) comes
//! back to the engine, which commits it under the lease. An operator's
//! settlement of a charge set aside ([`CHARGED`], [`NOT_CHARGED`]) is
//! checked against the provider's ledger under the same key, and recorded
//! by the same phase.

use crate::domain::{ChargeId, ProviderChargeId};
use crate::operation::charge::{FinishCharge, PendingCharge, ProviderVerdict, CHARGE_CREATED};
use crate::operation::receipt::Receipts;
use crate::provider::{Provider, Reply};
use async_trait::async_trait;
use exactly_once::operator::{Refusal, Settlement};
use exactly_once::{Any, Error, Lease, Operation, StepUnavailable, Steps};
use std::sync::Arc;

/// The payment provider gave no final answer: the operation waits at its
/// recovery point; a retry resumes it (503 `provider-unavailable`).
pub fn provider_unavailable(reason: impl Into<String>) -> Error {
    Error::StepUnavailable(StepUnavailable::new(
        "provider-unavailable",
        "Payment provider unavailable",
        "the payment provider did not answer; the payment is kept and a retry with the same \
         Idempotency-Key resumes it",
        reason,
    ))
}

/// What the shop's steps need: the provider, and whether receipts are sent.
pub struct ShopSteps {
    /// `--psp-url`, if any.
    pub provider: Option<Arc<Provider>>,
    /// Whether receipts are sent (`--smtp-url`), and how many per caller.
    pub receipts: Receipts,
}

/// `server operations settle --outcome charged`: the provider charged the
/// card under the operation's key; the charge is recorded as succeeded
/// and its key answers `201` with it (and its receipt is sent).
pub const CHARGED: &str = "charged";
/// `--outcome not-charged`: the provider holds no charge under the
/// operation's key; the charge is recorded as failed and its key answers
/// `402` `card-declined`, saying the shop cancelled it and nothing was
/// charged.
pub const NOT_CHARGED: &str = "not-charged";

#[async_trait]
impl Steps<Any> for ShopSteps {
    async fn step(&self, lease: &Lease) -> Result<Arc<dyn Operation<Any>>, Error> {
        match lease.point.as_str() {
            CHARGE_CREATED => self.charge_at_provider(lease).await,
            other => Err(Error::internal(format!(
                "an operation stopped at {other:?}, which this server does not know"
            ))),
        }
    }

    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
    ) -> Result<Arc<dyn Operation<Any>>, Refusal> {
        match lease.point.as_str() {
            CHARGE_CREATED => self.settle_charge(lease, settlement).await,
            other => Err(Refusal(format!(
                "an operation stopped at {other:?}, which this server does not know"
            ))),
        }
    }

    async fn reconcile(&self, lease: &Lease) -> Result<Option<serde_json::Value>, Refusal> {
        if lease.point != CHARGE_CREATED {
            return Ok(None);
        }
        let (pending, _) = stopped_charge(lease)?;
        let key = pending.downstream_key(lease);
        let provider = self.provider()?;
        let charges = provider.charges_under(&key).await.map_err(Refusal)?;
        Ok(Some(serde_json::json!({
            "ledger": exactly_once::secrets::redact(provider.charges_url()),
            "idempotency_key": key,
            "metadata": pending.provider_metadata(lease),
            "amount": pending.amount,
            "currency": pending.currency,
            "charges": charges,
        })))
    }

    /// `charge_created`, the one point of this release: an operation a
    /// later release stopped elsewhere is left to that release.
    fn knows(&self, point: &str) -> bool {
        point == CHARGE_CREATED
    }
}

/// What a stopped charge's state says: the charge and our row's id.
fn stopped_charge(lease: &Lease) -> Result<(PendingCharge, ChargeId), Refusal> {
    let pending = PendingCharge::from_state(&lease.state)
        .map_err(|e| Refusal(format!("the stopped charge's state is unreadable: {e}")))?;
    let charge = ChargeId::parse(&pending.id)
        .ok_or_else(|| Refusal(format!("the stopped charge has a bad id {:?}", pending.id)))?;
    Ok((pending, charge))
}

impl ShopSteps {
    fn provider(&self) -> Result<&Provider, Refusal> {
        self.provider.as_deref().ok_or_else(|| {
            Refusal(
                "no --psp-url: the provider's ledger cannot be read (give the provider's URL, \
                 or settle with --unverified on what you found yourself)"
                    .into(),
            )
        })
    }

    /// An operator's settlement of a charge set aside: checked against the
    /// provider's ledger under the charge's downstream key (unless
    /// unverified), then the phase that records it, as the provider's
    /// verdict would have been recorded.
    async fn settle_charge(
        &self,
        lease: &Lease,
        settlement: &Settlement,
    ) -> Result<Arc<dyn Operation<Any>>, Refusal> {
        let (_, charge) = stopped_charge(lease)?;
        let verdict = self.settlement_verdict(lease, settlement).await?;
        Ok(Arc::new(FinishCharge {
            charge,
            verdict,
            receipts: self.receipts.clone(),
        }))
    }

    /// What settling the charge `lease` stopped at as `settlement` says
    /// would record, judged against the provider's ledger under its
    /// downstream key, or why it is refused; changes nothing (what
    /// `settle --dry-run` shows). Verified, the ledger must be read and
    /// agree: one charge, of the operation's amount and currency, for
    /// `charged`; none for `not-charged`. Unverified, the ledger is not
    /// needed, but what it shows when it can be read still counts, and
    /// `charged` needs the provider's charge id.
    pub async fn settlement_verdict(
        &self,
        lease: &Lease,
        settlement: &Settlement,
    ) -> Result<ProviderVerdict, Refusal> {
        if lease.point != CHARGE_CREATED {
            return Err(Refusal(format!(
                "an operation stopped at {:?}, which this server does not know",
                lease.point
            )));
        }
        let (pending, _) = stopped_charge(lease)?;
        let key = pending.downstream_key(lease);
        let ledger = match (settlement.unverified, self.provider.as_deref()) {
            (true, None) => None,
            (true, Some(provider)) => provider.charges_under(&key).await.ok(),
            (false, _) => Some(self.provider()?.charges_under(&key).await.map_err(|e| {
                Refusal(format!(
                    "{e}; settle with --unverified to record your outcome without it"
                ))
            })?),
        };
        let reference = settlement.reference.as_deref();
        match settlement.outcome.as_str() {
            CHARGED => {
                let id = match (ledger.as_deref(), reference) {
                    (Some([found]), given) => {
                        if let Some(given) = given.filter(|given| *given != found.id) {
                            return Err(Refusal(format!(
                                "the provider's ledger holds {} under this operation's key {key}, not {given}",
                                found.id
                            )));
                        }
                        if found.amount != pending.amount
                            || !found.currency.eq_ignore_ascii_case(&pending.currency)
                        {
                            return Err(Refusal(format!(
                                "the provider's ledger holds {} for {} {} under this operation's \
                                 key {key}, and the operation is for {} {}: settle it with the \
                                 provider first",
                                found.id,
                                found.amount,
                                found.currency,
                                pending.amount,
                                pending.currency
                            )));
                        }
                        found.id.clone()
                    }
                    (Some([]), Some(given)) if settlement.unverified => given.to_owned(),
                    (Some([]), _) => {
                        return Err(Refusal(format!(
                            "the provider's ledger holds no charge under this operation's key \
                             {key}: settle as {NOT_CHARGED}, or, if you found its charge \
                             elsewhere, give --provider-charge with --unverified"
                        )))
                    }
                    (Some(many), _) => {
                        return Err(Refusal(format!(
                            "the provider's ledger holds {} charges under one key {key}: \
                             settle it with the provider first",
                            many.len()
                        )))
                    }
                    (None, Some(given)) => given.to_owned(),
                    (None, None) => {
                        return Err(Refusal(format!(
                            "settling as {CHARGED} without the ledger needs the provider's \
                             charge id (--provider-charge)"
                        )))
                    }
                };
                let id = ProviderChargeId::parse(&id).ok_or_else(|| {
                    Refusal(format!("{id:?} is not a provider charge id (pch_…)"))
                })?;
                Ok(ProviderVerdict::Charged(id))
            }
            NOT_CHARGED => {
                if let Some(found) = ledger.as_deref().and_then(<[_]>::first) {
                    return Err(Refusal(format!(
                        "the provider charged {} ({} {}) under this operation's key {key}: \
                         settle as {CHARGED} (and refund it at the provider if the shopper \
                         must not pay)",
                        found.id, found.amount, found.currency
                    )));
                }
                Ok(ProviderVerdict::NotCharged)
            }
            other => Err(Refusal(format!(
                "{other:?} is not an outcome of a charge: {CHARGED} or {NOT_CHARGED}"
            ))),
        }
    }

    /// At `charge_created`: asks the provider to charge (same downstream key
    /// every time), and returns the phase that records its verdict.
    async fn charge_at_provider(&self, lease: &Lease) -> Result<Arc<dyn Operation<Any>>, Error> {
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
                    receipts: self.receipts.clone(),
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
