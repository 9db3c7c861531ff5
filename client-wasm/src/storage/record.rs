//! The stored record of one operation and its text format.
//!
//! One flat JSON object per operation, readable in the browser's devtools:
//!
//! ```json
//! {"v":1,"key":"8e03…","created":1764432000000,"expires":1764518400000,
//!  "answered":false,"method":"POST","path":"/charges","body":"{\"amount\":1999}"}
//! ```
//!
//! `method`, `path` and `body` are present once a request has been sent
//! (`body` is the request's JSON text, or `null` for none). Reading is strict
//! about what it needs and lenient about what it does not: anything that is
//! not a version-1 record of this shape (garbage, an old or newer version,
//! missing or mistyped fields) decodes to `None`, which callers treat as
//! absent. Unknown extra fields with plain values are ignored.
//!
//! The encoder and the small parser live here, in plain Rust, so that the
//! format is tested on the host and the wasm module carries no JSON crate.

/// Version written into every record; any other version reads as absent.
pub(crate) const VERSION: u64 = 1;

/// Largest integer that JS numbers (and so `JSON.parse`) keep exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A request stored beside the key, so that a reloaded page can resume it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    /// The JSON text that was sent, `None` for no body.
    pub(crate) body: Option<String>,
}

/// Everything the client remembers about one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The idempotency key sent with every attempt of this operation.
    pub(crate) key: String,
    /// When the key was made, Unix epoch milliseconds.
    pub(crate) created_ms: u64,
    /// When the key stops being used, Unix epoch milliseconds.
    pub(crate) expires_ms: u64,
    /// The last request sent for this operation, if any.
    pub(crate) request: Option<StoredRequest>,
    /// Whether a final answer came for that request.
    pub(crate) answered: bool,
}

impl Record {
    /// A fresh record for a new key, with no request yet.
    pub(crate) fn new(key: String, now_ms: u64, ttl_ms: u64) -> Self {
        Record {
            key,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl_ms).min(MAX_SAFE_INTEGER),
            request: None,
            answered: false,
        }
    }

    /// True until `expires_ms`.
    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }

    /// A request was sent and no final answer came for it.
    pub(crate) fn is_pending(&self) -> bool {
        self.request.is_some() && !self.answered
    }

    /// The record as JSON text.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(160);
        out.push_str("{\"v\":");
        push_u64(&mut out, VERSION);
        out.push_str(",\"key\":");
        push_string(&mut out, &self.key);
        out.push_str(",\"created\":");
        push_u64(&mut out, self.created_ms);
        out.push_str(",\"expires\":");
        push_u64(&mut out, self.expires_ms);
        out.push_str(",\"answered\":");
        out.push_str(if self.answered { "true" } else { "false" });
        if let Some(request) = &self.request {
            out.push_str(",\"method\":");
            push_string(&mut out, &request.method);
            out.push_str(",\"path\":");
            push_string(&mut out, &request.path);
            out.push_str(",\"body\":");
            match &request.body {
                Some(body) => push_string(&mut out, body),
                None => out.push_str("null"),
            }
        }
        out.push('}');
        out
    }

    /// Reads a record; `None` for anything that is not a valid version-1
    /// record. Never panics.
    pub(crate) fn decode(text: &str) -> Option<Record> {
        let mut fields = Fields::default();
        Parser {
            s: text.as_bytes(),
            i: 0,
        }
        .object(&mut fields)?;

        if fields.v? != Value::Num(VERSION) {
            return None;
        }
        let key = fields.key?.into_string()?;
        if !is_valid_key(&key) {
            return None;
        }
        let created_ms = fields.created?.into_num()?;
        let expires_ms = fields.expires?.into_num()?;
        if created_ms > expires_ms {
            return None;
        }
        let answered = match fields.answered? {
            Value::Bool(b) => b,
            _ => return None,
        };
        let request = match (fields.method, fields.path) {
            (None, None) => {
                if fields.body.is_some() {
                    return None;
                }
                None
            }
            (Some(method), Some(path)) => {
                let method = method.into_string()?;
                if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
                    return None;
                }
                let body = match fields.body {
                    None | Some(Value::Null) => None,
                    Some(Value::Str(s)) => Some(s),
                    Some(_) => return None,
                };
                Some(StoredRequest {
                    method,
                    path: path.into_string()?,
                    body,
                })
            }
            _ => return None,
        };
        Some(Record {
            key,
            created_ms,
            expires_ms,
            request,
            answered,
        })
    }
}

/// A key the server accepts: 1 to 255 visible ASCII characters.
pub(crate) fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 255 && key.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// Appends the decimal digits of `n`, without `core::fmt` (and without
/// indexing, whose bounds checks format their panics).
pub(crate) fn push_u64(out: &mut String, n: u64) {
    if n >= 10 {
        push_u64(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// Appends `s` as a JSON string literal.
fn push_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(char::from(HEX[(c as usize) >> 4]));
                out.push(char::from(HEX[(c as usize) & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The plain values a record holds; nested objects and arrays, fractions
/// and negative numbers are not part of the format.
#[derive(Debug, PartialEq)]
enum Value {
    Str(String),
    Num(u64),
    Bool(bool),
    Null,
}

impl Value {
    fn into_string(self) -> Option<String> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    fn into_num(self) -> Option<u64> {
        match self {
            Value::Num(n) => Some(n),
            _ => None,
        }
    }
}

/// The known members, each set at most once.
#[derive(Default)]
struct Fields {
    v: Option<Value>,
    key: Option<Value>,
    created: Option<Value>,
    expires: Option<Value>,
    answered: Option<Value>,
    method: Option<Value>,
    path: Option<Value>,
    body: Option<Value>,
}

impl Fields {
    /// Stores a member; a repeated known member makes the record invalid.
    fn set(&mut self, name: &str, value: Value) -> Option<()> {
        let slot = match name {
            "v" => &mut self.v,
            "key" => &mut self.key,
            "created" => &mut self.created,
            "expires" => &mut self.expires,
            "answered" => &mut self.answered,
            "method" => &mut self.method,
            "path" => &mut self.path,
            "body" => &mut self.body,
            _ => return Some(()),
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(value);
        Some(())
    }
}

/// A strict reader for one flat JSON object (RFC 8259 grammar, restricted
/// values).
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.skip_ws();
        (self.next()? == b).then_some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.s.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// `{ "name": value, … }` and nothing after it but whitespace.
    fn object(&mut self, fields: &mut Fields) -> Option<()> {
        self.eat(b'{')?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
        } else {
            loop {
                self.eat(b'"')?;
                let name = self.string()?;
                self.eat(b':')?;
                self.skip_ws();
                let value = self.value()?;
                fields.set(&name, value)?;
                self.skip_ws();
                match self.next()? {
                    b',' => continue,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        self.skip_ws();
        (self.i == self.s.len()).then_some(())
    }

    fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => {
                self.i += 1;
                self.string().map(Value::Str)
            }
            b't' => self.literal(b"true").map(|()| Value::Bool(true)),
            b'f' => self.literal(b"false").map(|()| Value::Bool(false)),
            b'n' => self.literal(b"null").map(|()| Value::Null),
            b'0'..=b'9' => self.number().map(Value::Num),
            _ => None,
        }
    }

    /// A non-negative integer without leading zeros, at most 2^53 - 1.
    fn number(&mut self) -> Option<u64> {
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(b @ b'0'..=b'9') = self.peek() {
            if self.i > start && n == 0 {
                return None; // leading zero
            }
            n = n * 10 + u64::from(b - b'0');
            if n > MAX_SAFE_INTEGER {
                return None;
            }
            self.i += 1;
        }
        match self.peek() {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(n),
        }
    }

    /// The rest of a string literal whose opening quote was consumed.
    fn string(&mut self) -> Option<String> {
        let mut out: Vec<u8> = Vec::new();
        loop {
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                b if b < 0x20 => return None,
                b => out.push(b),
            }
        }
        // The input was a `str` and only whole characters were copied.
        String::from_utf8(out).ok()
    }

    /// `XXXX` after `\u`, with a following `\uXXXX` for a surrogate pair.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.hex4()?;
        let code = match first {
            0xd800..=0xdbff => {
                self.literal(b"\\u")?;
                let second = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&second) {
                    return None;
                }
                0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
            }
            0xdc00..=0xdfff => return None,
            c => c,
        };
        char::from_u32(code)
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut n = 0;
        for _ in 0..4 {
            let d = char::from(self.next()?).to_digit(16)?;
            n = n * 16 + d;
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            key: "8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b".into(),
            created_ms: 1_764_432_000_000,
            expires_ms: 1_764_518_400_000,
            request: Some(StoredRequest {
                method: "POST".into(),
                path: "/charges".into(),
                body: Some(
                    r#"{"amount":1999,"currency":"usd","description":"cart \"42\" é ✓ 😀\n"}"#
                        .into(),
                ),
            }),
            answered: false,
        }
    }

    #[test]
    fn a_record_survives_a_round_trip() {
        let record = sample();
        assert_eq!(Record::decode(&record.encode()), Some(record.clone()));

        let bare = Record::new("k".into(), 5, 10);
        assert_eq!(Record::decode(&bare.encode()), Some(bare));

        let no_body = Record {
            request: Some(StoredRequest {
                method: "DELETE".into(),
                path: "/x?y=1".into(),
                body: None,
            }),
            answered: true,
            ..record
        };
        assert_eq!(Record::decode(&no_body.encode()), Some(no_body));
    }

    #[test]
    fn control_characters_round_trip() {
        let mut record = sample();
        let body: String = (0u8..0x80).map(char::from).collect();
        record.request.as_mut().unwrap().body = Some(body);
        let text = record.encode();
        assert!(!text.bytes().any(|b| b < 0x20), "{text}");
        assert_eq!(Record::decode(&text), Some(record));
    }

    #[test]
    fn the_format_is_stable() {
        let text = Record::new("abc".into(), 1, 1).encode();
        assert_eq!(
            text,
            r#"{"v":1,"key":"abc","created":1,"expires":2,"answered":false}"#
        );
    }

    #[test]
    fn records_written_by_hand_or_by_js_are_read() {
        let text = r#" { "expires" : 20 , "created":10, "key":"k-1","v":1,
            "answered":true, "method":"POST", "path":"/charges",
            "body":"{\"a\":\"\u00e9\ud83d\ude00\/\"}", "note": "extra fields are fine", "n": null } "#;
        let record = Record::decode(text).expect("valid record");
        assert_eq!(record.key, "k-1");
        assert_eq!((record.created_ms, record.expires_ms), (10, 20));
        assert!(record.answered);
        let request = record.request.unwrap();
        assert_eq!(request.body.as_deref(), Some("{\"a\":\"é😀/\"}"));
    }

    #[test]
    fn garbage_reads_as_absent() {
        let long = "x".repeat(100_000);
        for text in [
            "",
            "null",
            "[]",
            "{}",
            "{",
            "not json at all",
            "8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b",
            r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false"#,
            r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false}}"#,
            r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false} x"#,
            r#"{"v":1,"key":"k","created":1,"expires":2,"answered":false,}"#,
            r#"{"v":1,"key":"k\u","created":1,"expires":2,"answered":false}"#,
            r#"{"v":1,"key":"k\ud800","created":1,"expires":2,"answered":false}"#,
            r#"{"v":1,"key":"k\x","created":1,"expires":2,"answered":false}"#,
            "{\"v\":1,\"key\":\"k\n\",\"created\":1,\"expires\":2,\"answered\":false}",
            long.as_str(),
        ] {
            assert_eq!(Record::decode(text), None, "{text:?}");
        }
    }

    #[test]
    fn other_versions_read_as_absent() {
        let current = Record::new("k".into(), 1, 2).encode();
        for v in ["0", "2", "\"1\"", "1.0", "null"] {
            let text = current.replacen("\"v\":1", &format!("\"v\":{v}"), 1);
            assert_eq!(Record::decode(&text), None, "{text}");
        }
        // An old, unversioned shape: just the key.
        assert_eq!(Record::decode(r#"{"key":"k","created":1}"#), None);
    }

    #[test]
    fn records_of_another_shape_read_as_absent() {
        let base = r#""v":1,"key":"k","created":1,"expires":2,"answered":false"#;
        for text in [
            // missing fields
            r#"{"v":1,"created":1,"expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"expires":2}"#.to_string(),
            // mistyped fields
            r#"{"v":1,"key":7,"created":1,"expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":"1","expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"expires":-2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"expires":2.5,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"expires":2e3,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":01,"expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"expires":2,"answered":0}"#.to_string(),
            r#"{"v":1,"key":"k","created":1,"expires":99999999999999999,"answered":false}"#
                .to_string(),
            // invalid keys and times
            r#"{"v":1,"key":"","created":1,"expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"a b","created":1,"expires":2,"answered":false}"#.to_string(),
            r#"{"v":1,"key":"k","created":3,"expires":2,"answered":false}"#.to_string(),
            // half a request, or a body without one
            format!(r#"{{{base},"method":"POST"}}"#),
            format!(r#"{{{base},"path":"/charges"}}"#),
            format!(r#"{{{base},"body":"{{}}"}}"#),
            format!(r#"{{{base},"method":"","path":"/p"}}"#),
            format!(r#"{{{base},"method":"PO ST","path":"/p"}}"#),
            format!(r#"{{{base},"method":"POST","path":"/p","body":1}}"#),
            format!(r#"{{{base},"method":"POST","path":null}}"#),
            // nested values and repeated members
            format!(r#"{{{base},"extra":{{}}}}"#),
            format!(r#"{{{base},"extra":[1]}}"#),
            format!(r#"{{{base},"key":"k2"}}"#),
        ] {
            assert_eq!(Record::decode(&text), None, "{text}");
        }
        assert!(Record::decode(&format!("{{{base}}}")).is_some());
    }

    #[test]
    fn a_key_is_live_until_it_expires() {
        let record = Record::new("k".into(), 1_000, 500);
        assert_eq!(record.expires_ms, 1_500);
        assert!(record.is_live(1_000));
        assert!(record.is_live(1_499));
        assert!(!record.is_live(1_500));
        let forever = Record::new("k".into(), 1_000, u64::MAX);
        assert_eq!(Record::decode(&forever.encode()), Some(forever));
    }

    #[test]
    fn pending_means_sent_without_a_final_answer() {
        let mut record = sample();
        assert!(record.is_pending());
        record.answered = true;
        assert!(!record.is_pending());
        assert!(!Record::new("k".into(), 0, 1).is_pending());
    }

    #[test]
    fn numbers_are_written_without_fmt() {
        for n in [0, 7, 10, 1_764_432_000_000, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }

    #[test]
    fn keys_are_visible_ascii_up_to_255() {
        assert!(is_valid_key("8e03c5a2-1f4b-4c1e-9d3a-2b7f6e5d4c3b"));
        assert!(is_valid_key(&"~".repeat(255)));
        assert!(!is_valid_key(&"a".repeat(256)));
        assert!(!is_valid_key(""));
        assert!(!is_valid_key("é"));
        assert!(!is_valid_key("a\tb"));
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = Record> {
        let request = proptest::option::of(
            ("[A-Z]{1,7}", ".{0,40}", proptest::option::of(".{0,200}"))
                .prop_map(|(method, path, body)| StoredRequest { method, path, body }),
        );
        (
            "[!-~]{1,255}",
            0..=MAX_SAFE_INTEGER,
            0..=MAX_SAFE_INTEGER,
            request,
            any::<bool>(),
        )
            .prop_map(|(key, a, b, request, answered)| Record {
                key,
                created_ms: a.min(b),
                expires_ms: a.max(b),
                request,
                answered,
            })
    }

    proptest! {
        /// Whatever the client stores, it reads back unchanged.
        #[test]
        fn every_record_survives_a_round_trip(record in arb_record()) {
            prop_assert_eq!(Record::decode(&record.encode()), Some(record));
        }

        /// A record cut short (a full quota, a torn write) reads as absent,
        /// never as another record.
        #[test]
        fn a_truncated_record_reads_as_absent(record in arb_record(), cut in 0.0f64..1.0) {
            let text = record.encode();
            let mut at = (text.len() as f64 * cut) as usize;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            prop_assert_eq!(Record::decode(&text[..at]), None);
        }

        /// Arbitrary text never panics, and whatever decodes re-encodes to
        /// the same record.
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,300}") {
            if let Some(record) = Record::decode(&text) {
                prop_assert_eq!(Record::decode(&record.encode()), Some(record));
            }
        }

        /// Arbitrary JSON-looking text never panics either.
        #[test]
        fn json_shaped_garbage_never_panics(text in r#"\{("[a-z]{1,8}":(-?[0-9]{1,20}|"[^"]{0,10}"|true|null|\{\}),?){0,8}\}"#) {
            let _ = Record::decode(&text);
        }
    }
}
