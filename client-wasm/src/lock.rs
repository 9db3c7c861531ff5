//! How a call gets its operation to itself across tabs.
//!
//! 1. **The Web Lock** named like the operation's storage entry
//!    (`storagePrefix + operation`, with the scope between them when there
//!    is one; `navigator.locks`, requested by `locked` in `js/browser.js`,
//!    around `run`, which drives `Sending` of `send.rs`),
//!    held from reading the key to the final answer, so one operation is
//!    never in flight twice at once, in one tab or several. The wait for
//!    it lasts as long as the holder may still be sending: at least the
//!    time the call's own attempts could take, `timeoutMs` × `maxAttempts`,
//!    and then as long as the holder's `busy` lease (renewed before every
//!    attempt and every wait, `Retry-After` included) is live. A frozen
//!    background tab's lease runs out, and the call then rejects with
//!    `lock-timeout` (kind `exhausted`), nothing sent; an abort of the
//!    caller's `signal` ends the wait too.
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
//! 4. **Page memory** (`localStorage` full or refused): a tab cannot read
//!    another tab's memory, so `Store` in `js/browser.js` shares the
//!    records of clients in that case over a `BroadcastChannel` named
//!    after the prefix and scope. A call that made a new key in memory
//!    waits at least `ASK_MS` (200 ms) instead of the settle: a tab
//!    holding an older live key of the operation answers the new record
//!    with its own, which the settle's read adopts, so the second tab of
//!    a paid operation sends the first one's key.

/// How old a key must be before a call sends it: longer than a
/// `localStorage` write takes to reach the other tabs of the browser
/// (a few milliseconds), with a wide margin for a busy machine.
pub(crate) const SETTLE_MS: u64 = 100;
