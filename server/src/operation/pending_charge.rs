//! A charge stopped between its phases, waiting for the provider: what the
//! provider is asked to charge, under which downstream key and metadata,
//! as every run, resumption and release of the operation must send it.

use crate::domain::{Amount, Currency, OperationId, PaymentMethod};
use exactly_once::Lease;
use serde::{Deserialize, Serialize};

/// What a stopped charge resumes from: what the provider is asked to
/// charge. Stored as JSON with the recovery point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCharge {
    /// How the provider call's `Idempotency-Key` is derived. A state
    /// recorded by an earlier release has no such field: it is
    /// [`KeyScheme::PerOperation`], and goes on with the key it may have
    /// sent already.
    #[serde(default)]
    pub key_scheme: KeyScheme,
    /// Our charge's id.
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency code.
    pub currency: String,
    /// The card, as the provider knows it.
    pub payment_method: String,
}

/// How a stopped charge's downstream key is derived, and what the provider
/// is sent with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScheme {
    /// From the caller and the key alone (releases before per-run keys):
    /// only ever read from states those releases stored.
    #[default]
    PerOperation,
    /// From the caller, the key and the charge this run created (releases
    /// before per-life keys): a run that a restore forgot made another
    /// charge row, so its retry charged the card again. Only read from
    /// states those releases stored.
    PerRun,
    /// From the caller, the key, the request and the key's generation
    /// ([`exactly_once::Lease::downstream_key`]), and the provider request
    /// a pure function of the operation (its metadata names the operation,
    /// not our charge row): a run that a restore, a point-in-time recovery
    /// or an asynchronous failover made the database forget sends the
    /// provider the same key and the same request again, and adopts its
    /// answer; a key reused after its record expired is the key's next
    /// generation, a new charge.
    PerLife,
}

/// The downstream key of a charge whose first phase was recorded by a
/// release that derived it from the caller and the key alone (before runs
/// had keys of their own): such a run must go on with the key it may
/// already have sent.
fn legacy_downstream_key(operation: &OperationId) -> String {
    format!("eo_{}", hex::encode(operation.as_bytes()))
}

impl PendingCharge {
    /// The `Idempotency-Key` the provider is sent for this charge: the same
    /// for every attempt, resumption and instance of this operation (and,
    /// for [`KeyScheme::PerLife`], of a run of it the database forgot).
    pub fn downstream_key(&self, lease: &Lease) -> String {
        match self.key_scheme {
            KeyScheme::PerOperation => legacy_downstream_key(&lease.operation()),
            KeyScheme::PerRun => lease.downstream_key_of_run(&self.id),
            KeyScheme::PerLife => lease.downstream_key(),
        }
    }

    /// The provider request's `metadata`: for [`KeyScheme::PerLife`], the
    /// operation (the `op` of the logs and of `server operations`) and its
    /// generation, the same for every run of it, by which an operator
    /// finds the provider's charge of an operation in the provider's
    /// ledger; before, our charge row's id, as those releases sent it (a
    /// resumed charge must send what it may have sent already).
    pub fn provider_metadata(&self, lease: &Lease) -> serde_json::Value {
        match self.key_scheme {
            KeyScheme::PerOperation | KeyScheme::PerRun => {
                serde_json::json!({ "charge_id": self.id })
            }
            KeyScheme::PerLife => serde_json::json!({
                "operation": lease.operation().to_string(),
                "generation": lease.generation.to_string(),
            }),
        }
    }

    /// Reads the state a start phase stored.
    pub fn from_state(state: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(state)
    }

    /// The amount, as parsed when the charge was created.
    pub fn amount(&self) -> Option<Amount> {
        Amount::parse(self.amount).ok()
    }

    /// The currency, as parsed when the charge was created.
    pub fn currency(&self) -> Option<Currency> {
        Currency::parse(&self.currency).ok()
    }

    /// The card.
    pub fn payment_method(&self) -> Option<PaymentMethod> {
        PaymentMethod::parse(&self.payment_method)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(state: &str, generation: u64) -> Lease {
        let caller = crate::domain::Caller::from_bytes([7; 32]);
        let key = crate::domain::IdempotencyKey::parse(b"8e03c5a2").unwrap();
        Lease {
            caller,
            key,
            token: [1; 16],
            point: crate::operation::charge::CHARGE_CREATED.into(),
            state: state.into(),
            fingerprint: exactly_once::Fingerprint::from_bytes([9; 32]),
            generation,
        }
    }

    /// A charge stopped by a release before per-run keys has no
    /// `key_scheme`, and one stopped before per-life keys says `per_run`:
    /// each goes on with the key (and the request) it may already have
    /// sent the provider, or the provider would charge the card a second
    /// time, or refuse the request as another one under its key.
    #[test]
    fn a_state_stored_by_an_earlier_release_keeps_its_downstream_key_and_request() {
        let stored = r#"{"id":"ch_0192f0c4a2b07c3d9e8f1a2b3c4d5e6f","amount":1999,"currency":"usd","payment_method":"pm_card_visa"}"#;
        let pending = PendingCharge::from_state(stored).unwrap();
        assert_eq!(pending.key_scheme, KeyScheme::PerOperation);
        let lease = lease(stored, 0);
        let op = lease.operation();
        assert_eq!(pending.downstream_key(&lease), legacy_downstream_key(&op));
        assert_eq!(legacy_downstream_key(&op).len(), 67);

        let per_run = PendingCharge {
            key_scheme: KeyScheme::PerRun,
            ..pending.clone()
        };
        let back = PendingCharge::from_state(&serde_json::to_string(&per_run).unwrap()).unwrap();
        assert_eq!(back, per_run);
        assert_eq!(back.downstream_key(&lease), op.downstream_key(&pending.id));
        for earlier in [&pending, &per_run] {
            assert_eq!(
                earlier.provider_metadata(&lease),
                serde_json::json!({ "charge_id": pending.id })
            );
        }
    }

    /// A charge of this release: its key and its provider request are a
    /// pure function of the operation and the key's generation, not of the
    /// charge row a run made, so a run the database forgot (a restore)
    /// sends both again as they were; the key's next life sends another.
    #[test]
    fn a_charge_sends_the_same_key_and_request_from_every_run_of_one_life() {
        let first = PendingCharge {
            key_scheme: KeyScheme::PerLife,
            id: "ch_0192f0c4a2b07c3d9e8f1a2b3c4d5e6f".into(),
            amount: 1999,
            currency: "usd".into(),
            payment_method: "pm_card_visa".into(),
        };
        let forgotten_and_run_again = PendingCharge {
            id: "ch_0192f0c4a2b07c3d9e8f1a2b3c4d5e70".into(),
            ..first.clone()
        };
        let state = serde_json::to_string(&first).unwrap();
        let (life, next_life) = (lease(&state, 3), lease(&state, 4));
        assert_eq!(
            first.downstream_key(&life),
            forgotten_and_run_again.downstream_key(&life)
        );
        assert_eq!(
            first.provider_metadata(&life),
            forgotten_and_run_again.provider_metadata(&life)
        );
        assert_ne!(
            first.downstream_key(&life),
            first.downstream_key(&next_life)
        );
        assert_ne!(
            first.downstream_key(&life),
            legacy_downstream_key(&life.operation())
        );
        assert_ne!(
            first.downstream_key(&life),
            life.downstream_key_of_run(&first.id)
        );
    }
}
