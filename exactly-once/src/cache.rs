//! LiveRecord records in memory, so that a retry is answered without asking
//! the database. A finished record never changes until it expires, so a
//! copy is exact for as long as it lives; the only question is *how long*,
//! and the database's clock decides that, not this process's (instances on
//! one PostgreSQL database may disagree about the time by minutes).
//!
//! So every copy carries a deadline on this machine's **boot clock**
//! ([`crate::clock`]): the record's remaining life as the database measured
//! it when the copy was made (or, for a record this process just wrote, the
//! whole TTL from before the write was sent), minus a margin. A copy is
//! never served past it, so the cache never replays a record that the
//! database would call expired, whatever any wall clock says, and however
//! long the host was suspended meanwhile (the boot clock counts a suspend;
//! the monotonic clock, which an earlier release used, stops during one, so
//! a copy outlived the database's expiry by the pause). A record the database has not
//! expired is never deleted by anyone (the sweepers delete only expired
//! records). A store that can change under the cache (a SQLite file
//! replaced on disk) bumps its epoch, and copies of older epochs are misses.
//!
//! The size is bounded: each shard forgets its oldest copies first.

use crate::caller::Caller;
use crate::clock::BootInstant;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::record::{Record, StoredResponse};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Duration;

/// Copies kept at most, over all shards.
const CAPACITY: usize = 65_536;
/// Shards, each behind its own lock; a copy's shard is a hash of its
/// caller and key, so one caller's copies spread over all of them.
const SHARDS: usize = 16;
/// Taken off every deadline: time between the database's reading and ours,
/// and monotonic-clock drift.
const MARGIN: Duration = Duration::from_secs(1);

type CacheKey = (Caller, IdempotencyKey);

struct Copy {
    fingerprint: Fingerprint,
    response: StoredResponse,
    deadline: BootInstant,
    epoch: u64,
}

#[derive(Default)]
struct Shard {
    copies: HashMap<CacheKey, Copy>,
    /// Insertion order, for forgetting the oldest first.
    order: VecDeque<CacheKey>,
}

/// LiveRecord records of this process's recent requests.
pub(crate) struct ReplayCache {
    shards: Vec<Mutex<Shard>>,
    /// Picks a copy's shard.
    hasher: RandomState,
}

impl Default for ReplayCache {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl ReplayCache {
    fn shard(&self, caller: &Caller, key: &IdempotencyKey) -> &Mutex<Shard> {
        let hash = self.hasher.hash_one((caller, key));
        // The remainder is below SHARDS, so it fits a usize.
        &self.shards[(hash % SHARDS as u64) as usize]
    }

    /// The record of `key`, if a live copy of the store's current `epoch`
    /// is here.
    pub(crate) fn get(&self, caller: &Caller, key: &IdempotencyKey, epoch: u64) -> Option<Record> {
        let shard = self
            .shard(caller, key)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let copy = shard.copies.get(&(*caller, key.clone()))?;
        (copy.deadline > BootInstant::now() && copy.epoch == epoch).then(|| Record {
            fingerprint: copy.fingerprint,
            response: copy.response.clone(),
        })
    }

    /// Keeps a copy of a finished record that the database will keep for at
    /// least `life` from `since` (a reading of the boot clock taken before
    /// the database was asked).
    pub(crate) fn put(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
        record: &Record,
        since: BootInstant,
        life: Duration,
        epoch: u64,
    ) {
        let deadline = since.after(life.saturating_sub(MARGIN));
        if deadline <= BootInstant::now() {
            return;
        }
        let cache_key = (*caller, key.clone());
        let mut shard = self
            .shard(caller, key)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let copy = Copy {
            fingerprint: record.fingerprint,
            response: record.response.clone(),
            deadline,
            epoch,
        };
        if shard.copies.insert(cache_key.clone(), copy).is_none() {
            shard.order.push_back(cache_key);
        }
        while shard.order.len() > CAPACITY / SHARDS {
            if let Some(oldest) = shard.order.pop_front() {
                shard.copies.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn record() -> Record {
        Record {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            response: StoredResponse::new(StatusCode::CREATED, "application/json", "{}"),
        }
    }

    fn caller() -> Caller {
        Caller::of("cache-test-token-0123")
    }

    fn key(n: usize) -> IdempotencyKey {
        IdempotencyKey::parse(format!("key-{n}").as_bytes()).unwrap()
    }

    /// Keeps a copy of [`record`] for key `n` of [`caller`], `life` from `since`.
    fn put(cache: &ReplayCache, n: usize, since: BootInstant, life: Duration, epoch: u64) {
        cache.put(&caller(), &key(n), &record(), since, life, epoch);
    }

    #[test]
    fn a_copy_lives_until_its_deadline_less_the_margin_and_no_longer() {
        let cache = ReplayCache::default();
        let now = BootInstant::now();
        put(&cache, 1, now, Duration::from_secs(60), 0);
        assert!(cache.get(&caller(), &key(1), 0).is_some());
        // A record with less life left than the margin is not kept at all.
        put(&cache, 2, now, Duration::from_millis(900), 0);
        assert!(cache.get(&caller(), &key(2), 0).is_none());
        // A copy whose deadline has passed is a miss.
        let long_ago = now.before(Duration::from_secs(120));
        put(&cache, 3, long_ago, Duration::from_secs(60), 0);
        assert!(cache.get(&caller(), &key(3), 0).is_none());
    }

    #[test]
    fn a_copy_of_another_epoch_is_a_miss() {
        let cache = ReplayCache::default();
        put(&cache, 1, BootInstant::now(), Duration::from_secs(60), 3);
        assert!(cache.get(&caller(), &key(1), 3).is_some());
        assert!(cache.get(&caller(), &key(1), 4).is_none());
    }

    #[test]
    fn the_oldest_copies_are_forgotten_first() {
        // Twice the capacity: every shard receives far more than its share
        // (8 192 ± 90 of 4 096), so each has forgotten its oldest.
        let cache = ReplayCache::default();
        let since = BootInstant::now();
        let written = 2 * CAPACITY;
        for n in 0..written {
            put(&cache, n, since, Duration::from_secs(60), 0);
        }
        let kept = |range: std::ops::Range<usize>| {
            range
                .filter(|&n| cache.get(&caller(), &key(n), 0).is_some())
                .count()
        };
        assert_eq!(kept(0..CAPACITY / 4), 0, "the oldest went");
        let newest = written - CAPACITY / 4..written;
        assert_eq!(kept(newest.clone()), newest.len(), "the newest stayed");
        assert!(kept(0..written) <= CAPACITY, "never more than the capacity");
    }

    #[test]
    fn one_caller_may_fill_the_whole_cache() {
        // A server-to-server client is one caller with many keys: its
        // copies spread over every shard, not one sixteenth of the cache.
        let cache = ReplayCache::default();
        let since = BootInstant::now();
        for n in 0..CAPACITY / 2 {
            put(&cache, n, since, Duration::from_secs(60), 0);
        }
        let kept = (0..CAPACITY / 2)
            .filter(|&n| cache.get(&caller(), &key(n), 0).is_some())
            .count();
        assert_eq!(kept, CAPACITY / 2, "every copy of one caller is kept");
    }
}
