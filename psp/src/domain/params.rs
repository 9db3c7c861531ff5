//! The parameters of `POST /v1/charges`, parsed once at the edge, and the
//! fingerprint that tells a replay from a reused key.
//!
//! The body is read by hand from a JSON object (not through a derived
//! `Deserialize`) so that every refusal names its parameter and carries a
//! Stripe-style error code.

use super::card::PaymentMethod;
use super::metadata::Metadata;
use super::param_error::ParamError;
use serde::Serialize;
use serde_json::Value;

/// The smallest and largest amounts, in minor units (as the checkout
/// server takes them).
const AMOUNT_RANGE: std::ops::RangeInclusive<i64> = 1..=100_000_000;

/// The parameters of one charge request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChargeParams {
    /// What to charge, in minor units.
    pub amount: Amount,
    /// In which currency.
    pub currency: Currency,
    /// Which test card: it decides success or decline.
    pub payment_method: PaymentMethod,
    /// Free-form labels, kept with the charge.
    pub metadata: Metadata,
}

impl ChargeParams {
    /// Parses a request body: a JSON object with `amount`, `currency`,
    /// `payment_method` and optionally `metadata`, nothing else.
    pub fn parse(body: &[u8]) -> Result<Self, ParamError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| ParamError::Json(e.to_string()))?;
        let Value::Object(mut fields) = value else {
            return Err(ParamError::NotAnObject);
        };
        let mut take = |name: &'static str| fields.remove(name).filter(|v| !v.is_null());
        let amount = take("amount").ok_or(ParamError::Missing("amount"))?;
        let currency = take("currency").ok_or(ParamError::Missing("currency"))?;
        let payment_method = take("payment_method").ok_or(ParamError::Missing("payment_method"))?;
        let metadata = take("metadata");
        if let Some(unknown) = fields.keys().next() {
            return Err(ParamError::Unknown(unknown.clone()));
        }
        Ok(Self {
            amount: Amount::parse(&amount)?,
            currency: Currency::parse(&currency)?,
            payment_method: match payment_method {
                Value::String(s) => PaymentMethod::parse(&s)?,
                _ => return Err(ParamError::PaymentMethodNotString),
            },
            metadata: metadata.map_or(Ok(Metadata::default()), Metadata::parse)?,
        })
    }

    /// All of the parameters as canonical JSON (fixed field order, metadata
    /// keys sorted): equal exactly when the requests ask for the same charge.
    /// An absent `metadata` and `{}` are the same request.
    pub fn fingerprint(&self) -> Fingerprint {
        #[derive(Serialize)]
        struct Canonical<'a> {
            amount: i64,
            currency: &'a str,
            metadata: &'a Metadata,
            payment_method: &'a str,
        }
        Fingerprint(
            serde_json::to_string(&Canonical {
                amount: self.amount.get(),
                currency: self.currency.as_ref(),
                metadata: &self.metadata,
                payment_method: self.payment_method.as_str(),
            })
            .expect("strings, integers and scalar JSON always serialise"),
        )
    }
}

/// The canonical JSON of a request's parameters (see
/// [`ChargeParams::fingerprint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// A fingerprint as the ledger stored it.
    pub fn from_stored(text: String) -> Self {
        Self(text)
    }
}

impl AsRef<str> for Fingerprint {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// An amount in minor units, 1 to 100000000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount(i64);

impl Amount {
    fn parse(value: &Value) -> Result<Self, ParamError> {
        let amount = value.as_i64().ok_or(match value.as_u64() {
            Some(_) => ParamError::AmountTooLarge,
            None => ParamError::AmountNotInteger,
        })?;
        if amount < *AMOUNT_RANGE.start() {
            Err(ParamError::AmountTooSmall)
        } else if amount > *AMOUNT_RANGE.end() {
            Err(ParamError::AmountTooLarge)
        } else {
            Ok(Self(amount))
        }
    }

    /// The amount in minor units.
    pub fn get(self) -> i64 {
        self.0
    }
}

/// A currency: three lowercase ASCII letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Currency(String);

impl Currency {
    fn parse(value: &Value) -> Result<Self, ParamError> {
        match value.as_str() {
            Some(s) if s.len() == 3 && s.bytes().all(|b| b.is_ascii_lowercase()) => {
                Ok(Self(s.to_owned()))
            }
            _ => Err(ParamError::Currency),
        }
    }
}

impl AsRef<str> for Currency {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: &str) -> Result<ChargeParams, ParamError> {
        ChargeParams::parse(body.as_bytes())
    }

    #[test]
    fn a_full_request_parses() {
        let params = parse(
            r#"{"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa",
                "metadata": {"order": "42", "attempt": 1, "test": true}}"#,
        )
        .unwrap();
        assert_eq!(params.amount.get(), 1999);
        assert_eq!(params.currency.as_ref(), "usd");
        assert_eq!(params.payment_method, PaymentMethod::Visa);
        assert_eq!(
            params.fingerprint().as_ref(),
            r#"{"amount":1999,"currency":"usd","metadata":{"attempt":1,"order":"42","test":true},"payment_method":"pm_card_visa"}"#
        );
    }

    #[test]
    fn the_fingerprint_ignores_spelling_but_not_parameters() {
        let base = parse(
            r#"{"amount":1,"currency":"eur","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}"#,
        )
        .unwrap()
        .fingerprint();
        let same = parse(
            r#"{ "metadata": {"b": "2", "a": "1"}, "payment_method": "pm_card_visa", "currency": "eur", "amount": 1 }"#,
        )
        .unwrap()
        .fingerprint();
        assert_eq!(base, same);
        for other in [
            r#"{"amount":2,"currency":"eur","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}"#,
            r#"{"amount":1,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}"#,
            r#"{"amount":1,"currency":"eur","payment_method":"pm_card_mastercard","metadata":{"a":"1","b":"2"}}"#,
            r#"{"amount":1,"currency":"eur","payment_method":"pm_card_visa","metadata":{"a":"1"}}"#,
            r#"{"amount":1,"currency":"eur","payment_method":"pm_card_visa","metadata":{"a":1,"b":"2"}}"#,
        ] {
            assert_ne!(parse(other).unwrap().fingerprint(), base, "{other}");
        }
        let bare =
            parse(r#"{"amount":1,"currency":"eur","payment_method":"pm_card_visa"}"#).unwrap();
        let empty =
            parse(r#"{"amount":1,"currency":"eur","payment_method":"pm_card_visa","metadata":{}}"#)
                .unwrap();
        assert_eq!(bare.fingerprint(), empty.fingerprint());
    }

    #[test]
    fn bad_bodies_name_their_parameter_and_code() {
        for body in ["{", "[1]"] {
            let e = parse(body).expect_err(body);
            assert_eq!(
                (e.code(), e.param()),
                ("invalid_request_body", None),
                "{body}: {e}"
            );
        }
        // A valid body with one parameter removed (`None`) or replaced:
        // the refusal names that parameter.
        let cases = [
            ("amount", None, "parameter_missing"),
            ("amount", Some(json!(null)), "parameter_missing"),
            ("currency", None, "parameter_missing"),
            ("payment_method", None, "parameter_missing"),
            ("description", Some(json!("x")), "parameter_unknown"),
            ("amount", Some(json!("5")), "parameter_invalid_integer"),
            ("amount", Some(json!(19.99)), "parameter_invalid_integer"),
            ("amount", Some(json!(0)), "amount_too_small"),
            ("amount", Some(json!(-5)), "amount_too_small"),
            ("amount", Some(json!(100_000_001)), "amount_too_large"),
            ("amount", Some(json!(u64::MAX)), "amount_too_large"),
            ("currency", Some(json!("USD")), "parameter_invalid"),
            ("currency", Some(json!("usdx")), "parameter_invalid"),
            ("currency", Some(json!(7)), "parameter_invalid"),
            ("payment_method", Some(json!(7)), "parameter_invalid"),
            (
                "payment_method",
                Some(json!("pm_card_amex")),
                "resource_missing",
            ),
            ("metadata", Some(json!([])), "parameter_invalid"),
            ("metadata", Some(json!({"a": {}})), "parameter_invalid"),
            ("metadata", Some(json!({"a": null})), "parameter_invalid"),
            ("metadata", Some(json!({"a[0]": "x"})), "parameter_invalid"),
            ("metadata", Some(json!({"": "x"})), "parameter_invalid"),
        ];
        for (param, value, code) in cases {
            let mut body =
                json!({"amount": 5, "currency": "usd", "payment_method": "pm_card_visa"});
            match value {
                Some(value) => body[param] = value,
                None => drop(body.as_object_mut().unwrap().remove(param)),
            }
            let body = body.to_string();
            let e = parse(&body).expect_err(&body);
            assert_eq!((e.code(), e.param()), (code, Some(param)), "{body}: {e}");
        }
    }
}
