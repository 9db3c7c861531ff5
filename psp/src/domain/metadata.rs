//! Charge metadata: free-form labels under Stripe's limits.

use super::param_error::ParamError;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Stripe's metadata limits.
const MAX_METADATA_KEYS: usize = 50;
const MAX_METADATA_KEY_CHARS: usize = 40;
const MAX_METADATA_VALUE_CHARS: usize = 500;

/// Labels kept with a charge: up to 50 keys of 1 to 40 characters (no
/// square brackets), each a string of up to 500 characters, a number or a
/// boolean. Kept sorted by key, so it serialises canonically.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metadata(BTreeMap<String, Value>);

impl Metadata {
    pub(super) fn parse(value: Value) -> Result<Self, ParamError> {
        let Value::Object(entries) = value else {
            return Err(ParamError::Metadata("must be a JSON object".into()));
        };
        if entries.len() > MAX_METADATA_KEYS {
            return Err(ParamError::Metadata(format!(
                "may hold at most {MAX_METADATA_KEYS} keys"
            )));
        }
        Ok(Self(check_entries(entries)?))
    }
}

fn check_entries(entries: Map<String, Value>) -> Result<BTreeMap<String, Value>, ParamError> {
    entries
        .into_iter()
        .map(|(key, value)| {
            let chars = key.chars().count();
            if chars == 0 || chars > MAX_METADATA_KEY_CHARS || key.contains(['[', ']']) {
                return Err(ParamError::Metadata(format!(
                    "keys must be 1 to {MAX_METADATA_KEY_CHARS} characters without square brackets; {key:?} is not"
                )));
            }
            match &value {
                Value::String(s) if s.chars().count() > MAX_METADATA_VALUE_CHARS => {
                    Err(ParamError::Metadata(format!(
                        "values may be at most {MAX_METADATA_VALUE_CHARS} characters; {key:?}'s is longer"
                    )))
                }
                Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok((key, value)),
                _ => Err(ParamError::Metadata(format!(
                    "values must be strings, numbers or booleans; {key:?}'s is not"
                ))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_limits_are_stripes() {
        let parse = |json: String| Metadata::parse(serde_json::from_str(&json).unwrap());
        let entries = |n: usize| {
            let pairs: Vec<String> = (0..n).map(|i| format!(r#""k{i}":"v""#)).collect();
            format!("{{{}}}", pairs.join(","))
        };
        assert!(parse(entries(50)).is_ok());
        assert!(parse(entries(51)).is_err());
        let long_key = "k".repeat(40);
        assert!(parse(format!(r#"{{"{long_key}":"v"}}"#)).is_ok());
        assert!(parse(format!(r#"{{"{long_key}x":"v"}}"#)).is_err());
        let long_value = "é".repeat(500);
        assert!(parse(format!(r#"{{"k":"{long_value}"}}"#)).is_ok());
        assert!(parse(format!(r#"{{"k":"{long_value}x"}}"#)).is_err());
        for bad in [
            "[]",
            r#"{"a":{}}"#,
            r#"{"a":null}"#,
            r#"{"a[0]":"x"}"#,
            r#"{"":"x"}"#,
        ] {
            assert!(parse(bad.to_owned()).is_err(), "{bad}");
        }
        assert!(parse(r#"{"n":1,"b":true,"s":"x"}"#.to_owned()).is_ok());
    }
}
