//! Time that no one sets: how long this machine has been running, suspend
//! included (Linux's `CLOCK_BOOTTIME`).
//!
//! The wall clock is for people (a row's creation time); it jumps when NTP
//! or an operator sets it, by seconds or by a day. A lease or a record's
//! life measured on it lasts a day too long, or ends a day early. The
//! monotonic clock (`Instant`) never jumps, but it stops while the machine
//! is suspended, so a deadline on it outlives a suspended host's pause.
//! `CLOCK_BOOTTIME` does neither: it counts every second since boot,
//! suspended or not, and nothing can set it. What measures a duration that
//! another process or instance relies on (the replay cache's copies, the
//! SQLite store's clock) reads it here.

use std::time::Duration;

/// A moment on the boot clock, in milliseconds since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct BootInstant(i64);

impl BootInstant {
    /// Now.
    pub(crate) fn now() -> Self {
        Self(read_ms())
    }

    /// Milliseconds since boot.
    #[cfg(feature = "sqlite")]
    pub(crate) fn as_ms(self) -> i64 {
        self.0
    }

    /// How long after `earlier` this is (zero if it is not later).
    pub(crate) fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// `by` earlier (saturating).
    #[cfg(test)]
    pub(crate) fn before(self, by: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(i64::try_from(by.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// `by` later (saturating).
    pub(crate) fn after(self, by: Duration) -> Self {
        Self(
            self.0
                .saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX)),
        )
    }
}

/// This boot's identity (Linux's `boot_id`), so that a process can tell a
/// boot clock reading of an earlier process of the same boot, which it may
/// compare with its own, from one of another boot, which it may not.
/// `None` where the system does not say.
#[cfg(feature = "sqlite")]
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_ms() -> i64 {
    use nix::time::{clock_gettime, ClockId};
    let now = clock_gettime(ClockId::CLOCK_BOOTTIME)
        .or_else(|_| clock_gettime(ClockId::CLOCK_MONOTONIC))
        .expect("the boot and monotonic clocks are always readable");
    now.tv_sec()
        .saturating_mul(1000)
        .saturating_add(now.tv_nsec() / 1_000_000)
}

/// Elsewhere the monotonic clock is the closest there is (it may stop while
/// the machine sleeps).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read_ms() -> i64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_goes_forward_with_real_time() {
        let (start, wall) = (BootInstant::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let elapsed = BootInstant::now().as_ms() - start.as_ms();
        let real = wall.elapsed().as_millis() as i64;
        assert!(
            (real - 5..=real + 5).contains(&elapsed),
            "{elapsed} ms, {real} ms"
        );
        assert!(start.after(Duration::from_secs(1)) > start);
    }

    #[test]
    fn this_machine_has_a_boot_id() {
        assert_eq!(boot_id().map(|id| id.len()), Some(36));
    }
}
