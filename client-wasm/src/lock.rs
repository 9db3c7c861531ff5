//! How a call gets its operation to itself across tabs.
//!
//! 1. **The Web Lock** named like the operation's storage entry
//!    (`storagePrefix + operation`, with the scope between them when there
//!    is one; `navigator.locks`, requested by `locked` in `js/browser.js`),
//!    held from reading the key to the final answer, so one operation is
//!    never in flight twice at once, in one tab or several. The wait for
//!    it is bounded: an abort of the caller's `signal` ends it, and so does
//!    the time the call's own attempts could take, `timeoutMs` ×
//!    `maxAttempts` (a frozen background tab can hold a lock for ever),
//!    which rejects the call as `exhausted` with nothing sent.
//! 2. **Without it** (no `navigator.locks`: plain http on a host other than
//!    localhost, older browsers; or a request that is refused: opaque
//!    origins reject it with a `SecurityError`), the call runs unlocked,
//!    and two tabs may send the same operation at once. The server's
//!    deduplication keeps that to one run, provided both send the same key,
//!    which step 3 sees to.
//! 3. **The settle** ([`SETTLE_MS`]): `localStorage` has no
//!    compare-and-swap, and a write in one tab reaches another only a few
//!    milliseconds later. Two tabs that both find no key for a new
//!    operation both make one and store it; the last write wins in
//!    storage. So a call whose key is younger than `SETTLE_MS` waits until
//!    it is that old, reads the entry again and adopts the key found there:
//!    every tab ends with the key that won. (`keyFor` cannot wait: a key it
//!    returns for a brand-new operation may still be replaced by a racing
//!    tab's within `SETTLE_MS`; a call never sends before that.) This runs
//!    under the Web Lock too, because `keyFor` in another tab takes no
//!    lock.

use core::future::Future;

use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::js::{self, Call};

/// How old a key must be before a call sends it: longer than a
/// `localStorage` write takes to reach the other tabs of the browser
/// (a few milliseconds), with a wide margin for a busy machine.
pub(crate) const SETTLE_MS: u64 = 100;

/// Runs `work` under the operation's Web Lock (named like its storage
/// entry, which the call knows) where there is one, else directly
/// (`locked` in `js/browser.js`); the promise settles as `work` does. A
/// lock request that is refused or aborted before it is granted runs
/// `work` unlocked: `work` itself sees the abort and rejects without
/// sending.
pub(crate) fn run(
    operation: &str,
    call: &Call,
    work: impl Future<Output = Result<JsValue, JsValue>> + 'static,
) -> Promise {
    let start = Closure::once_into_js(move || future_to_promise(work));
    js::locked(call, &start, operation)
}
