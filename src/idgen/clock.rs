//! The clock, behind a trait so tests can make it jump.
//!
//! Two readings: wall time (snowflake timestamps; it may jump backwards, which
//! the snowflake generator tolerates) and monotonic time (rates, deadlines).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of time for the generators.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch. May go backwards (NTP step, VM
    /// migration, operator error).
    fn wall_ms(&self) -> u64;
    /// Milliseconds since an arbitrary origin; never goes backwards.
    fn mono_ms(&self) -> u64;
}

/// The operating system's clocks.
#[derive(Debug)]
pub struct SystemClock {
    /// Origin of `mono_ms`.
    origin: Instant,
}

impl SystemClock {
    /// A clock reading the system's wall and monotonic clocks.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn wall_ms(&self) -> u64 {
        // A clock before 1970 reads as 0; the snowflake generator then refuses
        // to issue (the clock is before its epoch) rather than panic.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    #[inline]
    fn mono_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug)]
pub struct FakeClock {
    /// Current wall reading, ms since the Unix epoch.
    wall: AtomicU64,
    /// Current monotonic reading.
    mono: AtomicU64,
}

impl FakeClock {
    /// A fake clock whose wall time reads `wall_ms`.
    pub fn new(wall_ms: u64) -> FakeClock {
        FakeClock {
            wall: AtomicU64::new(wall_ms),
            mono: AtomicU64::new(0),
        }
    }

    /// Sets the wall clock (forwards or backwards); monotonic time is unchanged.
    pub fn set_wall_ms(&self, wall_ms: u64) {
        self.wall.store(wall_ms, Ordering::SeqCst);
    }

    /// Moves both clocks forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.wall.fetch_add(ms, Ordering::SeqCst);
        self.mono.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the wall clock by a signed amount (saturating at 0); monotonic
    /// time moves forward by `|delta|` so time still passes.
    pub fn jump(&self, delta_ms: i64) {
        let w = self.wall.load(Ordering::SeqCst);
        self.wall
            .store(w.saturating_add_signed(delta_ms), Ordering::SeqCst);
        self.mono
            .fetch_add(delta_ms.unsigned_abs(), Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn wall_ms(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }

    fn mono_ms(&self) -> u64 {
        self.mono.load(Ordering::SeqCst)
    }
}
