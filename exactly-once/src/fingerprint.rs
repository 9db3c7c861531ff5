//! What makes two requests "the same request" for one key.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// SHA-256 over the method, the path and the body as a JSON value.
///
/// The body is canonicalised first (object keys sorted, no whitespace, a
/// number with no fraction written as the integer it is: `1999.0` and
/// `1.999e3` are `1999`), so the same JSON sent with other spacing, key
/// order or spelling of a number is the same request, while any change of
/// a value (`1999` vs `2000`, `"usd"` vs `"eur"`) is not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Fingerprints a request whose body was parsed as JSON.
    pub fn new(method: &http::Method, path: &str, body: &Value) -> Self {
        let mut canonical = Vec::with_capacity(128);
        canonical.extend_from_slice(method.as_str().as_bytes());
        canonical.push(b' ');
        canonical.extend_from_slice(path.as_bytes());
        canonical.push(b'\n');
        write_canonical(body, &mut canonical);
        Self(Sha256::digest(&canonical).into())
    }

    /// The digest as stored in the database.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Rebuilds a fingerprint from its stored digest.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", hex::encode(&self.0[..8]))
    }
}

/// Writes `value` with sorted object keys and no insignificant whitespace,
/// whatever map type serde_json was built with. Strings and numbers are
/// written by serde_json's own serializer, whose escaping is canonical (one
/// spelling per string), straight into `out`: no allocation per value.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(key, out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Number(number) => match integral(number) {
            Some(integer) => write_scalar(&integer, out),
            None => write_scalar(number, out),
        },
        scalar => write_scalar(scalar, out),
    }
}

/// The integer a float without a fraction is (`1999.0`, `1.999e3`, `-0.0`),
/// when it is one an `i64` holds exactly; the application reads such
/// numbers as that integer, so the fingerprint does too.
fn integral(number: &serde_json::Number) -> Option<i64> {
    let float = number.as_f64().filter(|_| number.is_f64())?;
    // 2^63 is exact as an f64; every integral float below it fits an i64.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    (float.is_finite() && float.fract() == 0.0 && float.abs() < LIMIT).then_some(float as i64)
}

fn write_scalar(scalar: &(impl serde::Serialize + ?Sized), out: &mut Vec<u8>) {
    serde_json::to_writer(out, scalar).expect("a string or a number always serializes");
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use proptest::prelude::*;
    use serde_json::json;

    fn fp(method: Method, path: &str, body: &str) -> Fingerprint {
        Fingerprint::new(&method, path, &serde_json::from_str(body).unwrap())
    }

    #[test]
    fn spacing_and_key_order_do_not_matter() {
        let a = fp(
            Method::POST,
            "/orders",
            r#"{"amount":1999,"currency":"usd"}"#,
        );
        let b = fp(
            Method::POST,
            "/orders",
            "{ \"currency\" : \"usd\",\n \"amount\": 1999 }",
        );
        assert_eq!(a, b);
    }

    /// The shop reads `1999.0` and `1.999e3` as the integer 1999 (docs/API.md,
    /// "Decisions where the contract is silent"), so they are the same request as `1999`; a fraction is
    /// another value.
    #[test]
    fn a_number_without_a_fraction_is_the_integer_it_spells() {
        let integer = fp(Method::POST, "/charges", r#"{"amount":1999}"#);
        for same in [
            r#"{"amount":1999.0}"#,
            r#"{"amount":1.999e3}"#,
            r#"{"amount":19990e-1}"#,
        ] {
            assert_eq!(fp(Method::POST, "/charges", same), integer, "{same}");
        }
        assert_eq!(
            fp(Method::POST, "/x", r#"{"n":-0.0}"#),
            fp(Method::POST, "/x", r#"{"n":0}"#)
        );
        for other in [
            r#"{"amount":1999.5}"#,
            r#"{"amount":2000}"#,
            r#"{"amount":1e30}"#,
        ] {
            assert_ne!(fp(Method::POST, "/charges", other), integer, "{other}");
        }
    }

    #[test]
    fn method_path_and_every_value_matter() {
        const BODY: &str = r#"{"amount":1999,"currency":"usd"}"#;
        let base = fp(Method::POST, "/orders", BODY);
        for (method, path, body) in [
            (Method::PUT, "/orders", BODY),
            (Method::POST, "/refunds", BODY),
            (
                Method::POST,
                "/orders",
                r#"{"amount":2000,"currency":"usd"}"#,
            ),
            (
                Method::POST,
                "/orders",
                r#"{"amount":1999,"currency":"eur"}"#,
            ),
            (
                Method::POST,
                "/orders",
                r#"{"amount":"1999","currency":"usd"}"#,
            ),
            (
                Method::POST,
                "/orders",
                r#"{"amount":1999,"currency":"usd","description":null}"#,
            ),
        ] {
            let other = fp(method, path, body);
            assert_ne!(base, other);
        }
    }

    #[test]
    fn nested_objects_are_canonical_too() {
        let a = fp(
            Method::POST,
            "/x",
            r#"{"a":[{"y":1,"x":2}],"b":{"d":1,"c":2}}"#,
        );
        let b = fp(
            Method::POST,
            "/x",
            r#"{"b":{"c":2,"d":1},"a":[{"x":2,"y":1}]}"#,
        );
        assert_eq!(a, b);
        let c = fp(
            Method::POST,
            "/x",
            r#"{"b":{"c":2,"d":1},"a":[{"x":2},{"y":1}]}"#,
        );
        assert_ne!(a, c);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\ é]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                proptest::collection::btree_map("[a-z]{1,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_same_value_however_spelled_has_the_same_fingerprint(v in arb_json()) {
            let compact = serde_json::to_string(&v).unwrap();
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            prop_assert_eq!(
                fp(Method::POST, "/orders", &compact),
                fp(Method::POST, "/orders", &pretty)
            );
        }

        #[test]
        fn different_values_have_different_fingerprints(a in arb_json(), b in arb_json()) {
            prop_assume!(a != b);
            prop_assert_ne!(
                Fingerprint::new(&Method::POST, "/orders", &a),
                Fingerprint::new(&Method::POST, "/orders", &b)
            );
        }
    }

    #[test]
    fn a_fingerprint_never_changes_from_one_version_to_the_next() {
        // Records outlive upgrades: if the canonical form changed, every
        // retry of a key written before the upgrade would be a 422. The
        // digest was computed independently (Python: json.dumps with
        // sort_keys, compact separators, ensure_ascii=False).
        let body = r#"{ "currency": "usd", "amount": 1999,
            "description": "caf\u00e9 \"quoted\"\n\ttab \u0001 \\ \/",
            "metadata": {"z": [1, -2.5, true, null, {"b": "x", "a": 0.125}], "a": ""} }"#;
        assert_eq!(
            // The path of the request the digest was computed for.
            hex::encode(fp(Method::POST, "/charges", body).as_bytes()),
            "81139754254432aed098164109e80a26af3a4a55866af71b0d6e5e219f33b84a"
        );
    }

    #[test]
    fn a_json_literal_example() {
        let v = json!({"b": 1, "a": [true, null, "x"]});
        let mut out = Vec::new();
        write_canonical(&v, &mut out);
        assert_eq!(out, br#"{"a":[true,null,"x"],"b":1}"#);
    }
}
