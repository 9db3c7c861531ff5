//! A strict reader for one JSON object (RFC 8259), made for the records of
//! [`super::record`]: it hands each top-level member to the caller with its
//! value when the value is plain (a string, a safe non-negative integer,
//! `true`, `false`, `null`) and as [`Value::Other`] otherwise (a nested
//! object or array, a fraction, a negative number), so that a record
//! written by another version of the client, whatever it holds, is still
//! recognised as an object with a `v`.
//!
//! Hand-written rather than `JSON.parse` through js-sys: it is tested and
//! fuzzed on the host, and docs/BENCHMARKS.md ("client size levers") has
//! the size of both.

/// Largest integer that JS numbers (and so `JSON.parse`) keep exactly.
pub(crate) const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// How deep nested values may go before the text counts as garbage: far
/// more than any record, few enough that the recursion cannot overflow.
const MAX_DEPTH: u32 = 32;

/// A member's value, as far as a record cares.
#[derive(Debug, PartialEq)]
pub(crate) enum Value {
    Str(String),
    /// A non-negative integer up to 2^53 - 1.
    Num(u64),
    Bool(bool),
    Null,
    /// Anything else that is valid JSON: nested, fractional, negative.
    Other,
}

impl Value {
    pub(crate) fn into_string(self) -> Option<String> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn into_num(self) -> Option<u64> {
        match self {
            Value::Num(n) => Some(n),
            _ => None,
        }
    }
}

/// Reads `text` as one JSON object and calls `member(name, value)` for each
/// member in order; `None` when the text is not exactly one object or when
/// `member` returns `None`. Never panics.
pub(crate) fn members(text: &str, member: impl FnMut(&str, Value) -> Option<()>) -> Option<()> {
    let mut parser = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    parser.top(member)?;
    parser.skip_ws();
    (parser.i == parser.s.len()).then_some(())
}

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

    /// `{ "name": value, … }` at the top, each member handed out.
    fn top(&mut self, mut member: impl FnMut(&str, Value) -> Option<()>) -> Option<()> {
        self.sequence(b'{', b'}', |p| {
            p.eat(b'"')?;
            let name = p.string()?;
            p.eat(b':')?;
            p.skip_ws();
            let value = p.value(0)?;
            member(&name, value)
        })
    }

    /// `open item (, item)* close` or `open close`.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        self.skip_ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Some(());
        }
        loop {
            item(self)?;
            self.skip_ws();
            match self.next()? {
                b',' => {}
                b if b == close => return Some(()),
                _ => return None,
            }
        }
    }

    fn value(&mut self, depth: u32) -> Option<Value> {
        match self.peek()? {
            b'"' => {
                self.i += 1;
                self.string().map(Value::Str)
            }
            b't' => self.literal(b"true").map(|()| Value::Bool(true)),
            b'f' => self.literal(b"false").map(|()| Value::Bool(false)),
            b'n' => self.literal(b"null").map(|()| Value::Null),
            b'0'..=b'9' | b'-' => self.number(),
            b'{' | b'[' if depth < MAX_DEPTH => {
                self.nested(depth + 1)?;
                Some(Value::Other)
            }
            _ => None,
        }
    }

    /// An object or array below the top, read and dropped.
    fn nested(&mut self, depth: u32) -> Option<()> {
        if self.peek()? == b'[' {
            self.sequence(b'[', b']', |p| {
                p.skip_ws();
                p.value(depth).map(drop)
            })
        } else {
            self.sequence(b'{', b'}', |p| {
                p.eat(b'"')?;
                p.string()?;
                p.eat(b':')?;
                p.skip_ws();
                p.value(depth).map(drop)
            })
        }
    }

    /// A JSON number: [`Value::Num`] for a safe non-negative integer,
    /// [`Value::Other`] for any other valid number.
    fn number(&mut self) -> Option<Value> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(b @ b'0'..=b'9') = self.peek() {
            n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
            self.i += 1;
        }
        let leading_zero = self.s.get(start) == Some(&b'0') && self.i > start + 1;
        if self.i == start || leading_zero {
            return None;
        }
        let mut exact = !negative && n <= MAX_SAFE_INTEGER;
        if self.peek() == Some(b'.') {
            self.i += 1;
            exact = false;
            self.digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            exact = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
        }
        Some(if exact { Value::Num(n) } else { Value::Other })
    }

    /// One or more digits.
    fn digits(&mut self) -> Option<()> {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        (self.i > start).then_some(())
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

    fn read(text: &str) -> Option<Vec<(String, Value)>> {
        let mut out = Vec::new();
        members(text, |name, value| {
            out.push((name.to_owned(), value));
            Some(())
        })?;
        Some(out)
    }

    #[test]
    fn plain_values_are_handed_out() {
        let members = read(r#" {"s":"a\"\u00e9\ud83d\ude00\/", "n":9007199254740991, "t":true, "f":false, "z":null} "#)
            .expect("valid");
        assert_eq!(
            members,
            vec![
                ("s".into(), Value::Str("a\"é😀/".into())),
                ("n".into(), Value::Num(9_007_199_254_740_991)),
                ("t".into(), Value::Bool(true)),
                ("f".into(), Value::Bool(false)),
                ("z".into(), Value::Null),
            ]
        );
        assert_eq!(read("{}"), Some(vec![]));
    }

    #[test]
    fn any_other_json_value_is_other() {
        for value in [
            "{}",
            "[]",
            r#"{"a":[1,{"b":null}],"c":"d"}"#,
            "[1, 2.5, -3, \"x\", [], {}]",
            "-1",
            "-0",
            "0.5",
            "1e3",
            "1E+3",
            "2.5e-3",
            "9007199254740992",
            "123456789012345678901234567890",
        ] {
            let text = format!(r#"{{"x":{value}}}"#);
            assert_eq!(
                read(&text),
                Some(vec![("x".into(), Value::Other)]),
                "{text}"
            );
        }
        assert_eq!(read(r#"{"x":0}"#), Some(vec![("x".into(), Value::Num(0))]));
    }

    #[test]
    fn anything_but_one_json_object_is_refused() {
        let deep = "[".repeat(40) + &"]".repeat(40);
        for text in [
            "",
            "null",
            "[]",
            "{",
            "}",
            "not json",
            r#"{"a":1"#,
            r#"{"a":1}}"#,
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            r#"{a:1}"#,
            r#"{"a":01}"#,
            r#"{"a":-01}"#,
            r#"{"a":-}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":1e}"#,
            r#"{"a":+1}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":{"b"}}"#,
            r#"{"a":"\u"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\x"}"#,
            "{\"a\":\"line\nbreak\"}",
            r#"{"a":tru}"#,
            &format!(r#"{{"a":{deep}}}"#),
        ] {
            assert_eq!(read(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_caller_can_refuse_a_member() {
        assert_eq!(members(r#"{"a":1}"#, |_, _| None), None);
    }
}
