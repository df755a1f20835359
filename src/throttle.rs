//! A growing delay for logins from an address after repeated failed ones,
//! so a password cannot be guessed at line speed: one table per process,
//! shared by the MySQL and the Redis-protocol listeners. The clock is
//! injected (tests move it instead of sleeping); `idgen`'s `Clock` is all
//! it uses of the crate.

use crate::idgen::Clock;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Failed logins an address may have before its logins are delayed.
pub const FREE_FAILURES: u32 = 3;
/// The first delay; each further failure doubles it, up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_secs(10);
/// An address without a failure for this long starts afresh.
pub const QUIET_PERIOD: Duration = Duration::from_secs(300);
/// Addresses remembered at most (the oldest are forgotten first).
pub const MAX_ADDRESSES: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// `Clock::mono_ms` of the last failure.
    last_ms: u64,
}

/// Failed logins per client address, with the delay they earn.
pub struct LoginThrottle {
    clock: Arc<dyn Clock>,
    table: Mutex<HashMap<IpAddr, Failures>>,
    capacity: usize,
    /// Logins delayed so far (for `/metrics` and tests).
    pub delayed: AtomicU64,
    /// Their delays added up, in ms.
    pub delayed_ms: AtomicU64,
}

impl std::fmt::Debug for LoginThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginThrottle")
            .field("addresses", &self.table.lock().len())
            .finish()
    }
}

impl LoginThrottle {
    /// A throttle reading time from `clock`, remembering at most `capacity` addresses.
    pub fn new(clock: Arc<dyn Clock>, capacity: usize) -> LoginThrottle {
        LoginThrottle {
            clock,
            table: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            delayed: AtomicU64::new(0),
            delayed_ms: AtomicU64::new(0),
        }
    }

    /// The delay the next login from `ip` waits before its password is
    /// checked, and the failures that earned it (counted, see
    /// [`LoginThrottle::delayed`]).
    pub fn delay(&self, ip: IpAddr) -> (Duration, u32) {
        let now = self.clock.mono_ms();
        let count = match self.table.lock().get(&ip) {
            Some(f) if !stale(f, now) => f.count,
            _ => 0,
        };
        let d = delay_for(count);
        if !d.is_zero() {
            self.delayed.fetch_add(1, Ordering::Relaxed);
            self.delayed_ms
                .fetch_add(d.as_millis() as u64, Ordering::Relaxed);
        }
        (d, count)
    }

    /// Waits the delay the next login from `ip` has earned ([`LoginThrottle::delay`];
    /// none for the first failures), logging it with the address, the user
    /// and `what` is delayed. Only the caller's connection waits.
    pub async fn wait(&self, ip: IpAddr, user: &str, what: &str) {
        let (delay, failures) = self.delay(ip);
        if delay.is_zero() {
            return;
        }
        tracing::warn!(
            peer = %ip,
            user = %user.chars().take(64).collect::<String>(),
            failures,
            delay_ms = delay.as_millis() as u64,
            "{what} delayed after repeated failed logins from this address"
        );
        tokio::time::sleep(delay).await;
    }

    /// Records a failed login from `ip`.
    pub fn failed(&self, ip: IpAddr) {
        let now = self.clock.mono_ms();
        let mut t = self.table.lock();
        if !t.contains_key(&ip) && t.len() >= self.capacity {
            t.retain(|_, f| !stale(f, now));
            if t.len() >= self.capacity {
                if let Some(oldest) = t.iter().min_by_key(|(_, f)| f.last_ms).map(|(a, _)| *a) {
                    t.remove(&oldest);
                }
            }
        }
        let f = t.entry(ip).or_insert(Failures {
            count: 0,
            last_ms: now,
        });
        if stale(f, now) {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last_ms = now;
    }

    /// Records a successful login from `ip`: its failures are forgotten.
    pub fn succeeded(&self, ip: IpAddr) {
        self.table.lock().remove(&ip);
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.table.lock().len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn stale(f: &Failures, now_ms: u64) -> bool {
    now_ms.saturating_sub(f.last_ms) >= QUIET_PERIOD.as_millis() as u64
}

/// The delay after `failures` failed logins: none for the first
/// [`FREE_FAILURES`], then [`FIRST_DELAY`] doubling up to [`MAX_DELAY`].
pub fn delay_for(failures: u32) -> Duration {
    if failures < FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (failures - FREE_FAILURES).min(16);
    (FIRST_DELAY * (1u32 << doublings)).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idgen::FakeClock;

    #[test]
    fn delay_grows_after_free_failures_and_resets() {
        let clock = Arc::new(FakeClock::new(0));
        let t = LoginThrottle::new(clock.clone(), 100);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let mut seen = Vec::new();
        for _ in 0..12 {
            seen.push(t.delay(ip).0.as_millis() as u64);
            t.failed(ip);
        }
        assert_eq!(
            seen,
            [0, 0, 0, 100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        );
        assert_eq!(t.delayed.load(Ordering::Relaxed), 9);
        // Other addresses are not delayed.
        assert_eq!(t.delay(other).0, Duration::ZERO);
        // A quiet period forgets the failures.
        clock.advance(QUIET_PERIOD.as_millis() as u64);
        assert_eq!(t.delay(ip).0, Duration::ZERO);
        t.failed(ip);
        assert_eq!(t.delay(ip).0, Duration::ZERO);
        // So does a success.
        for _ in 0..5 {
            t.failed(ip);
        }
        assert!(t.delay(ip).0 > Duration::ZERO);
        t.succeeded(ip);
        assert_eq!(t.delay(ip).0, Duration::ZERO);
    }

    #[test]
    fn the_table_stays_bounded() {
        let clock = Arc::new(FakeClock::new(0));
        let t = LoginThrottle::new(clock.clone(), 50);
        for i in 0..1000u32 {
            clock.advance(1);
            t.failed(IpAddr::from(i.to_be_bytes()));
        }
        assert_eq!(t.len(), 50);
        // The newest are kept.
        let last = IpAddr::from(999u32.to_be_bytes());
        t.failed(last);
        t.failed(last);
        assert_eq!(t.delay(last).0, FIRST_DELAY);
    }
}
