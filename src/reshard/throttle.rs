//! The copy's throttle: at most `--max-rows-per-second`, and a pause while
//! a shard the move touches is loaded (`Threads_running` above
//! [`THREADS_RUNNING_MAX`]) or one of its replicas lags (any
//! `Seconds_Behind_Master` of `SHOW ALL SLAVES STATUS` above
//! [`LAG_MAX_SECONDS`]), so applications keep the shards first.

use std::time::{Duration, Instant};

use super::shard::Shard;

/// The default of `--max-rows-per-second`: a 1,000,000-row table in about
/// two minutes, while each shard spends a small share of its time on the
/// copy's reads and batched writes (the README gives the measured effect
/// on applications' inserts).
pub const DEFAULT_MAX_ROWS_PER_SECOND: u64 = 10_000;

/// Back off while a shard runs more statements at once than this.
pub const THREADS_RUNNING_MAX: u64 = 32;

/// Back off while a replica of a shard lags more than this.
pub const LAG_MAX_SECONDS: u64 = 10;

/// How often the shards' load is read.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Rate and load limits of the copy.
#[derive(Debug)]
pub struct Throttle {
    max: u64,
    window_start: Instant,
    window_rows: u64,
    last_check: Option<Instant>,
    /// Shards whose replica status cannot be read (no privilege): not
    /// asked again.
    no_replica_status: Vec<usize>,
    /// Rows per second over the last window.
    rate: u64,
    /// Rows counted since the start.
    total: u64,
}

/// How long to wait before `rows` more rows, `rows_so_far` having been
/// sent `elapsed` into the window, at `max` rows per second (0: no limit).
pub fn delay(max: u64, rows_so_far: u64, elapsed: Duration) -> Duration {
    if max == 0 {
        return Duration::ZERO;
    }
    let due = Duration::from_secs_f64(rows_so_far as f64 / max as f64);
    due.saturating_sub(elapsed)
}

impl Throttle {
    /// At most `max` rows per second (0: no limit).
    pub fn new(max: u64) -> Throttle {
        Throttle {
            max,
            window_start: Instant::now(),
            window_rows: 0,
            last_check: None,
            no_replica_status: Vec::new(),
            rate: 0,
            total: 0,
        }
    }

    /// Counts `n` rows copied.
    pub fn rows(&mut self, n: u64) {
        self.window_rows += n;
        self.total += n;
        let secs = self.window_start.elapsed().as_secs_f64();
        if secs > 0.0 {
            self.rate = (self.window_rows as f64 / secs) as u64;
        }
    }

    /// Rows counted since the start.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Rows per second lately.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Waits until the next chunk may be read.
    pub async fn wait(&mut self, shards: &mut [Shard], involved: &[usize]) {
        let d = delay(self.max, self.window_rows, self.window_start.elapsed());
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
        if self.window_start.elapsed() > Duration::from_secs(10) {
            self.window_start = Instant::now();
            self.window_rows = 0;
        }
        if self.last_check.is_some_and(|t| t.elapsed() < CHECK_EVERY) {
            return;
        }
        self.last_check = Some(Instant::now());
        // Bounded: a shard loaded for minutes slows the move, it does not
        // stop it forever.
        for _ in 0..600 {
            if !self.loaded(shards, involved).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            // The pause is not counted against the rate.
            self.window_start = Instant::now();
            self.window_rows = 0;
        }
    }

    async fn loaded(&mut self, shards: &mut [Shard], involved: &[usize]) -> bool {
        for s in shards.iter_mut().filter(|s| involved.contains(&s.index)) {
            if let Ok(rows) = s.text("SHOW GLOBAL STATUS LIKE 'Threads_running'").await {
                let running = rows
                    .first()
                    .and_then(|r| r.get(1).cloned().flatten())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                if running > THREADS_RUNNING_MAX {
                    return true;
                }
            }
            if self.no_replica_status.contains(&s.index) {
                continue;
            }
            match s.named("SHOW ALL SLAVES STATUS").await {
                Ok(rows) => {
                    let lag = rows.iter().flatten().any(|(n, v)| {
                        n == "Seconds_Behind_Master"
                            && v.as_deref()
                                .and_then(|v| v.parse::<u64>().ok())
                                .is_some_and(|v| v > LAG_MAX_SECONDS)
                    });
                    if lag {
                        return true;
                    }
                }
                Err(_) => self.no_replica_status.push(s.index),
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_keeps_the_rate() {
        // 10,000 rows at 10,000/s are due at 1 s: 0.4 s to wait at 0.6 s.
        assert_eq!(
            delay(10_000, 10_000, Duration::from_millis(600)),
            Duration::from_millis(400)
        );
        assert_eq!(
            delay(10_000, 10_000, Duration::from_secs(2)),
            Duration::ZERO
        );
        assert_eq!(delay(0, 1_000_000, Duration::ZERO), Duration::ZERO);
    }
}
