//! The stored record of one operation: its schema and its text.
//!
//! One flat JSON object per operation, readable in the browser's devtools.
//! Version 2, written by this build:
//!
//! ```json
//! {"v":2,"prefix":"idem:","scope":"u1","op":"checkout:42","key":"8e03…",
//!  "created":1764432000000,"expires":1764518400000,"answered":false,
//!  "method":"POST","path":"/charges","body":"{\"amount\":1999}",
//!  "sent":1764432000100,"busy":1764432012000}
//! ```
//!
//! `prefix`, `scope` and `op` name the record's owner: a client uses only
//! records whose three members equal its own `storagePrefix`, `scope` and
//! the operation, whatever the entry is called (so `"idem:"` never takes
//! `"idem:admin:"`'s records, nor scope `"u1"` scope `"u12"`'s). `method`,
//! `path` and `body` are present while a request is stored, always in the
//! same write as the key (`body` is the request's JSON text, or `null` for
//! none), with `sent`, when that request was first stored. `busy` is
//! present while a call is sending the request: until then, `release`
//! refuses and an expired key is not replaced (see
//! [`Record::busy_until_ms`]).
//!
//! **Private after the answer.** Once the request has its final answer,
//! the record keeps only what the client still needs: the key (so the same
//! operation gets the stored answer, and the server refuses another body
//! under it), its times, `answered` and the answer's `status`. `method`,
//! `path`, `body` and `sent` are gone:
//!
//! ```json
//! {"v":2,"prefix":"idem:","scope":"u1","op":"checkout:42","key":"8e03…",
//!  "created":1764432000000,"expires":1764518400000,"answered":true,
//!  "status":201}
//! ```
//!
//! Still version 2: a client of the first version-2 releases reads it as a
//! record whose key has no request (as after `keyFor`) and ignores
//! `status`. Answered records that such a client wrote with their request
//! are rewritten so at a client's first use of its storage
//! ([`Record::forget_request`]).
//!
//! **Tombstones.** A record whose key expired (or whose clock went back
//! before it was made) while its request had no final answer is kept as
//! a tombstone, written as version 3 with the same members: this client
//! never sends it and never gives its operation a new key until the page
//! `release`s it, and a client of version 2 (an older tab during a
//! deploy) leaves it alone as a later version's record.
//!
//! **Upgrades.** Version 1 (the first release: the same members without
//! `prefix`, `scope`, `op` and `sent`) is still read, as a record of scope
//! `""` whose owner is the name of its entry, and is written back as
//! version 2 the next time it changes (the committed fixture
//! `browser_tests/fixtures/record-v1.json` is one, resumed by the browser
//! tests). A record of a later version ([`Slot::Later`]) is never
//! overwritten or deleted, and only its own operation is refused, naming
//! the version. Unknown extra members are ignored, so a later version may
//! add some without a new `v`.
//!
//! Reading is strict about what it needs and lenient about what it does
//! not ([`Slot`]): anything that is not a record of a known shape
//! (garbage, a torn write, mistyped fields) counts as absent.
//!
//! The text is parsed by the browser's `JSON.parse`; the schema is checked
//! here, on [`Field`]s, so that the host tests can feed it the members of
//! JSON parsed by serde_json instead. (A hand-written JSON reader, tested
//! on the host, made the module 1.7 KB brotli larger: docs/BENCHMARKS.md.)
//! It is written here, its strings quoted by the browser's `JSON.stringify`
//! (serde_json's on the host): an escaper of our own made the package
//! about 200 bytes brotli larger.

use alloc::string::String;
use wasm_bindgen::JsValue;

use crate::js;
use crate::text::push_u64;

/// Largest integer that JS numbers (and so `JSON.parse`) keep exactly.
pub(crate) const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Version written into every record.
pub(crate) const VERSION: u64 = 2;

/// The first release's version, still read (its records name no owner).
pub(crate) const LEGACY: u64 = 1;

/// The version of a tombstone: a record whose key expired while its
/// request had no final answer. A client of version 2 leaves it alone (a
/// later version's record), so an older tab during a deploy can neither
/// drop it nor send its operation with a new key.
pub(crate) const TOMB: u64 = 3;

/// The longest `busy` lease a call writes, and so the longest one
/// believed: a lease that ends further ahead than this was written by a
/// clock that has since been set back (or is garbage), and says nothing
/// about a call in flight (`js/browser.js` has the same bound).
pub(crate) const MAX_LEASE_MS: u64 = 300_000;

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
    /// The last request stored for this operation, if any.
    pub(crate) request: Option<StoredRequest>,
    /// Whether a final answer came for that request.
    pub(crate) answered: bool,
    /// While a call (in any tab) is sending the request: until when, Unix
    /// epoch milliseconds. The sender renews it before every attempt and
    /// every wait, and clears it when the call settles; a closed tab's
    /// lease simply runs out.
    pub(crate) busy_until_ms: Option<u64>,
    /// When the stored request was first stored, Unix epoch milliseconds
    /// (`None` in a version-1 record).
    pub(crate) sent_ms: Option<u64>,
    /// A tombstone: the key expired while the request had no final answer.
    /// Never sent again, never replaced by a new key, until the page
    /// `release`s it (written as version [`TOMB`]).
    pub(crate) tomb: bool,
    /// The status of the final answer, once the request is forgotten
    /// ([`Record::forget_request`]); `None` before, and in records written
    /// by earlier versions.
    pub(crate) status: Option<u16>,
}

/// What an entry of the storage holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Nothing usable: no entry, or garbage. A new record may replace it.
    Empty,
    /// A record of the reader's, of this version or of an earlier one.
    Ours(Record),
    /// A record of another prefix or scope (an entry name that two owners
    /// spell alike): never overwritten or deleted, never used.
    Taken,
    /// A record of a later version of the client, this one: never
    /// overwritten or deleted, never used.
    Later(u64),
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
            busy_until_ms: None,
            sent_ms: None,
            tomb: false,
            status: None,
        }
    }

    /// The request got its final answer (`status`; `None` when an earlier
    /// version did not say): forgets the request, body and all, and keeps
    /// the key with the answer's status. A later call of the operation
    /// sends its own request with the same key, and the server answers it
    /// (the stored answer, or a refusal of another body).
    pub(crate) fn forget_request(&mut self, status: Option<u16>) {
        self.request = None;
        self.sent_ms = None;
        self.answered = true;
        self.status = status;
    }

    /// True until `expires_ms`, and only while the clock is not before
    /// `created_ms`: a device clock set back past the moment the key was
    /// made hides how old the key really is, and the server may have
    /// forgotten it already (docs/CLIENT.md, "Expiry and the device clock").
    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        self.created_ms <= now_ms && now_ms < self.expires_ms
    }

    /// A call is sending the request right now, in this tab or another:
    /// its lease ends after now, and no more than [`MAX_LEASE_MS`] after
    /// (a longer one was written by a clock since set back).
    pub(crate) fn is_busy(&self, now_ms: u64) -> bool {
        self.busy_until_ms
            .is_some_and(|until| now_ms < until && until - now_ms <= MAX_LEASE_MS)
    }

    /// The key may still be used: not a tombstone, and live, or expired
    /// while a call is still sending with it (that call's key must not be
    /// replaced under it).
    pub(crate) fn is_usable(&self, now_ms: u64) -> bool {
        !self.tomb && (self.is_live(now_ms) || self.is_busy(now_ms))
    }

    /// A request was stored and no final answer came for it.
    pub(crate) fn is_pending(&self) -> bool {
        self.request.is_some() && !self.answered
    }

    /// The record as JSON text of the current version, without its owner
    /// (`Store.put` in `js/browser.js` writes `prefix`, `scope` and `op`
    /// after the `v`).
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(200);
        out.push_str("{\"v\":");
        push_u64(&mut out, if self.tomb { TOMB } else { VERSION });
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
        if self.request.is_some() {
            // A version-1 record did not say: its key's birth is the best
            // bound there is.
            out.push_str(",\"sent\":");
            push_u64(&mut out, self.sent_ms.unwrap_or(self.created_ms));
        }
        if let Some(until) = self.busy_until_ms {
            out.push_str(",\"busy\":");
            push_u64(&mut out, until);
        }
        if let Some(status) = self.status {
            out.push_str(",\"status\":");
            push_u64(&mut out, status.into());
        }
        out.push('}');
        out
    }

    /// Reads an entry's text, as `Store.get` gave it. Never panics.
    pub(crate) fn decode(text: &str) -> Slot {
        match js::json_parse(&text.into()) {
            Ok(value) if value.is_object() && !js_sys::Array::is_array(&value) => {
                Record::from_members(|name| Field::of(js::get(&value, name)))
            }
            _ => Slot::Empty,
        }
    }

    /// Reads the members of a JSON object, `member(name)` giving each.
    /// Versions 1, 2 and 3 are read alike (2 adds `sent`, and the owner that
    /// `Store.get` checked: what it hands over is the reader's own record,
    /// or `{"v":0}` for another owner's; 3 is a tombstone of version 2).
    pub(crate) fn from_members(member: impl Fn(&str) -> Field) -> Slot {
        let version = match member("v").whole() {
            Some(0) => return Slot::Taken,
            Some(version @ (LEGACY | VERSION | TOMB)) => version,
            Some(later) => return Slot::Later(later),
            None => return Slot::Empty,
        };
        let Some(mut record) = Record::from_v1(&member) else {
            return Slot::Empty;
        };
        record.tomb = version == TOMB;
        record.sent_ms = match member("sent") {
            Field::Absent => None,
            sent => match sent.whole() {
                Some(sent) => Some(sent),
                None => return Slot::Empty,
            },
        };
        Slot::Ours(record)
    }

    /// The version-1 record the members make, if they make one.
    fn from_v1(member: &impl Fn(&str) -> Field) -> Option<Record> {
        let key = member("key").string().filter(|key| is_valid_key(key))?;
        let created_ms = member("created").whole()?;
        let expires_ms = member("expires").whole()?;
        if created_ms > expires_ms {
            return None;
        }
        let Field::Bool(answered) = member("answered") else {
            return None;
        };
        let request = match (member("method"), member("path"), member("body")) {
            (Field::Absent, Field::Absent, Field::Absent) => None,
            (method, path, body) => Some(StoredRequest {
                method: method.string().filter(|method| is_method(method))?,
                path: path.string()?,
                body: match body {
                    Field::Absent | Field::Null => None,
                    body => Some(body.string()?),
                },
            }),
        };
        let busy_until_ms = match member("busy") {
            Field::Absent => None,
            busy => Some(busy.whole()?),
        };
        Some(Record {
            key,
            created_ms,
            expires_ms,
            request,
            answered,
            busy_until_ms,
            sent_ms: None,
            tomb: false,
            // Only ever said, never needed: a mistyped one is no status.
            status: member("status")
                .whole()
                .and_then(|status| u16::try_from(status).ok()),
        })
    }
}

/// One member of a stored JSON object, as the schema sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Field {
    Absent,
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    /// An object or an array.
    Other,
}

impl Field {
    /// A member of a value `JSON.parse` made.
    fn of(value: JsValue) -> Field {
        if let Some(s) = value.as_string() {
            Field::Str(s)
        } else if let Some(n) = value.as_f64() {
            Field::Num(n)
        } else if let Some(b) = value.as_bool() {
            Field::Bool(b)
        } else if value.is_undefined() {
            Field::Absent
        } else if value.is_null() {
            Field::Null
        } else {
            Field::Other
        }
    }

    fn string(self) -> Option<String> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A whole number from 0 to 2^53 - 1.
    fn whole(&self) -> Option<u64> {
        match *self {
            Field::Num(n) if n >= 0.0 && n <= MAX_SAFE_INTEGER as f64 && n == (n as u64) as f64 => {
                Some(n as u64)
            }
            _ => None,
        }
    }
}

/// A key the server accepts: 1 to 255 visible ASCII characters.
pub(crate) fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 255 && key.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// An HTTP method name as the client sends it: ASCII letters only.
pub(crate) fn is_method(method: &str) -> bool {
    !method.is_empty() && method.bytes().all(|b| b.is_ascii_alphabetic())
}

/// Appends `s` as a JSON string literal: `JSON.stringify`'s.
#[cfg(not(all(test, not(target_arch = "wasm32"))))]
fn push_string(out: &mut String, s: &str) {
    out.push_str(&js::json_string(s));
}

/// Appends `s` as a JSON string literal (the host's tests have no
/// `JSON.stringify`).
#[cfg(all(test, not(target_arch = "wasm32")))]
fn push_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap());
}

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "record_tests.rs"]
mod tests;
