//! Snowflake generators: k-sorted ids `timestamp | node | sequence`.
//!
//! - The issued position is one atomic holding the next id to issue. Taking
//!   `n` ids is one compare-and-swap: start at `max(next, now)`, and when the
//!   sequence field overflows it carries into the timestamp (the id runs a
//!   little ahead of the clock; nothing ever waits for the clock).
//! - Clock rollback: ids never go below what was issued, because the position
//!   only grows, and across restarts because of the ceiling: a tick bound
//!   `snow/<name>/ts/<node>` persisted in the store *before* any id at or above
//!   it is issued ("issued up to now + lead"). On start the generator begins at
//!   `max(now, ceiling)`. A background task extends the ceiling when the issued
//!   position or the clock comes within half a lead of it.
//! - Spread: a tick's sequence does not restart at 0. The first id of tick
//!   `t` gets sequence `(t * 0x9E3779B97F4A7C15 mod 2^64) >> (64 -
//!   sequence_bits)` (the top bits of a golden-ratio Weyl sequence; 0 when
//!   `sequence_bits` is 0), and the ids after it in the same tick count up
//!   from there, carrying into the next tick as usual. At low rates (one id
//!   per tick) a restart at 0 made every id even, so `id % 2` put every row on
//!   one shard; the rotating start spreads `id % n` and CRC-32 placement
//!   evenly at every rate. It only moves ids up within their own tick, so
//!   uniqueness, order and the ceiling are unchanged; a tick still holds at
//!   most `2^sequence_bits` ids (starting high just carries sooner).
//! - Node ids are leased from the store. Losing the lease stops issuing until
//!   a new one is leased. Extending the ceiling is a compare-and-swap on the
//!   version this process last wrote, so a process that took over the node id
//!   (after our lease expired) makes our next extension fail: we then stop;
//!   and since the taker starts above the ceiling we had persisted, the ids we
//!   issued meanwhile cannot collide with its own.
//! - Cluster high-water (`snow/<name>/hw`): the highest ceiling any node
//!   persisted, raised *before* each node's own ceiling, so every id ever
//!   issued by any node is below it. A node that leases a node id starts at
//!   or above it: after a restart (kill -9, new node id, clock set back)
//!   every id it issues is above every id issued before, by any node.
//! - Cluster clock (`snow/<name>/clock`): the newest wall-clock reading
//!   (ms) any node persisted, raised at each lease and extension (wall
//!   readings only, never logical ones, so a skewed node cannot push it).
//!   A node whose clock reads more than `max_clock_skew_ms` behind it
//!   (extrapolated with monotonic time), at a lease, an extension, or
//!   against the newest reading it knows (a clock stepped back while
//!   running), issues from a logical clock: that reading plus monotonic
//!   time, until its wall clock catches up. The lag is logged and shown in
//!   the stats (`clock_skew_ms`: /metrics, /healthz). A node whose clock
//!   runs *ahead* moves the cluster clock: the others then report the lag
//!   and follow it.
//! - Explicit ids (`observe(x)`): this process issues nothing at or below
//!   `x` afterwards (its position moves above `x`, whatever node `x`
//!   names). Across processes only the holder of `x`'s node, now or later,
//!   could issue `x`:
//!   - our own node: free while `x`'s tick is below our persisted ceiling
//!     (a later holder starts above it); else the ceiling is extended past
//!     it before `observe` returns;
//!   - another node `n`: every extension of a ceiling to `c` first moves
//!     the holder's position to the start of tick `c - lead`, so `x` is
//!     free when its tick is below `c - lead` for a ceiling of `n` read
//!     once (cached); else the floor key `snow/<name>/floor/<n>` is raised
//!     to `x` and `observe` waits until `n` is not held or its holder has
//!     acknowledged (`snow/<name>/ack/<n>` at or above `x`: it follows
//!     that floor and applies it in its background round). A holder reads
//!     the floor right after leasing the node. Bounded by the allocator's
//!     timeout; a holder that does not acknowledge makes `observe` fail,
//!     as for sequences.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::clock::Clock;
use super::error::{IdgenError, StoreError};
use super::params::SnowflakeParams;
use super::store::{NodeLease, Store, Versioned};

/// The atomics of the fast path, on their own cache line(s).
#[repr(align(128))]
#[derive(Debug)]
struct Hot {
    /// Next id to issue, composed with the node id (so a node switch and the
    /// position change together).
    state: AtomicU64,
    /// Exclusive bound on issued ticks: the persisted ceiling. 0 while there
    /// is no valid lease. Shared with the lease's lost-hook, which zeroes it
    /// the moment the store reports the lease lost.
    limit: Arc<AtomicU64>,
    /// Tick at which the background task is asked to extend the ceiling
    /// (`u64::MAX`: already asked).
    extend_mark: AtomicU64,
    /// The current tick plus one, kept fresh (every ~1 ms) by the ticker task
    /// while ids are being issued, so the fast path does not read the clock
    /// (a clock read can cost more than everything else together). 0 when
    /// the ticker is idle: the fast path then reads the clock itself.
    cached_tick: AtomicU64,
}

/// 2^64 / φ (the golden ratio), odd: consecutive ticks times this, top bits
/// taken, are spread as evenly as possible over the sequence field
/// (Fibonacci hashing). See the module doc, "Spread".
const SEQ_SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// Bit layout helpers.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Width of the sequence field.
    sb: u32,
    /// Width of node + sequence fields.
    ns: u32,
    /// Mask of the sequence field.
    seq_mask: u64,
    /// Mask of the node field, in place.
    node_mask: u64,
    /// Largest tick.
    ts_max: u64,
}

impl Layout {
    /// Position (`tick << sb | seq`) of an id.
    #[inline]
    fn counter(&self, id: u64) -> u64 {
        ((id >> self.ns) << self.sb) | (id & self.seq_mask)
    }

    /// The id at position `c` with node field `node_part` (in place).
    #[inline]
    fn compose(&self, c: u64, node_part: u64) -> u64 {
        ((c >> self.sb) << self.ns) | node_part | (c & self.seq_mask)
    }

    /// The position of the first id of `tick`: its sequence starts at a
    /// value that rotates with the tick, not at 0 (module doc, "Spread").
    #[inline]
    fn tick_start(&self, tick: u64) -> u64 {
        let seq = match self.sb {
            0 => 0,
            sb => tick.wrapping_mul(SEQ_SPREAD) >> (64 - sb),
        };
        (tick << self.sb) | seq
    }

    /// Where issuing continues at clock tick `now` when `c` is the next
    /// unissued position: `c` while it is at or ahead of the clock (same
    /// tick, or carried ahead), else the start of tick `now`. Always `>= c`.
    #[inline]
    fn resume(&self, c: u64, now: u64) -> u64 {
        if (c >> self.sb) >= now {
            c
        } else {
            self.tick_start(now)
        }
    }
}

/// Lease and ceiling, changed only under the async slow lock.
#[derive(Debug, Default)]
struct Slow {
    /// The node-id lease, if any.
    lease: Option<NodeLease>,
    /// The ceiling this process last persisted for its node, and its version.
    ceiling: Option<Versioned>,
    /// The floor published for the leased node (`snow/<name>/floor/<n>`),
    /// followed (None: the store has no other process to publish it).
    floor_rx: Option<tokio::sync::watch::Receiver<u64>>,
    /// The highest floor of the leased node applied and acknowledged.
    floor_acked: u64,
}

/// Stats visible without taking the async lock.
#[derive(Debug, Default)]
struct Info {
    /// Current node id.
    node: Option<u64>,
    /// Last persisted ceiling tick.
    ceiling: u64,
    /// Last store error.
    last_error: Option<String>,
    /// Why there is no lease, if there is none.
    no_node: Option<String>,
    /// Highest ceiling read for other nodes: node -> tick. Every id their
    /// holders issue later has a tick at or above `ceiling - lead`.
    ceilings: std::collections::HashMap<u64, u64>,
}

/// Counters for the stats view.
#[derive(Debug, Default)]
struct Counters {
    /// Requests that waited for the store (ceiling or lease).
    waits: AtomicU64,
    /// Failed store calls.
    store_errors: AtomicU64,
    /// Successful store writes.
    store_writes: AtomicU64,
}

/// A snowflake generator.
pub(crate) struct Snowflake {
    /// The generator's name.
    pub(crate) name: String,
    /// Its layout.
    p: SnowflakeParams,
    /// Derived bit layout.
    l: Layout,
    /// Store scope of node leases: `snow/<name>`.
    scope: String,
    /// Where leases and ceilings live.
    store: Arc<dyn Store>,
    /// Wall clock for timestamps.
    clock: Arc<dyn Clock>,
    /// Bound on a wait for the store.
    timeout: Duration,
    /// Fast-path atomics.
    hot: Hot,
    /// Lease and ceiling; async because it is held across store calls.
    slow: tokio::sync::Mutex<Slow>,
    /// Stats.
    info: Mutex<Info>,
    /// Wakes the background task (extend, re-lease).
    pub(crate) wake: Arc<Notify>,
    /// Set by shutdown.
    pub(crate) stopped: std::sync::atomic::AtomicBool,
    /// Highest tick asked for by `set_floor`: a node id leased later (after a
    /// lost lease) also starts at or above it.
    floor_tick: AtomicU64,
    /// Stats counters.
    counters: Counters,
    /// Logical clock: `ms = origin + mono_ms` (0: off, the wall clock alone).
    /// Set when the wall clock is found behind the cluster high-water by
    /// more than the tolerated skew; the clock read is the larger of both.
    logical_origin: AtomicU64,
    /// The newest wall-clock reading known (ms; this node's or the
    /// cluster clock's), and the monotonic time it was taken at.
    seen_clock: Mutex<(u64, u64)>,
    /// How far (ms) the wall clock was behind the cluster high-water's
    /// clock at the last check (0: within the tolerated skew).
    skew_ms: AtomicU64,
}

/// Read-only view for stats (see `GeneratorStats` for the meaning).
pub(crate) struct SnowView {
    /// Persisted ceiling tick.
    pub high_water: u64,
    /// Next id this process would issue now.
    pub next_id: u64,
    /// Positions left below the ceiling.
    pub cached_remaining: u64,
    /// Leased node id.
    pub node: Option<u64>,
    /// Whether it may issue.
    pub lease_valid: bool,
    /// Requests that waited for the store.
    pub waits: u64,
    /// Failed store calls.
    pub store_errors: u64,
    /// Successful store writes.
    pub store_writes: u64,
    /// Last store error or why there is no node id.
    pub last_error: Option<String>,
    /// Wall clock behind the cluster high-water, ms (0: within the skew).
    pub clock_skew_ms: u64,
}

impl Snowflake {
    /// Its layout.
    pub(crate) fn params(&self) -> &SnowflakeParams {
        &self.p
    }

    /// A snowflake with no lease yet; call [`Snowflake::prepare`].
    pub(crate) fn new(
        name: &str,
        p: SnowflakeParams,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        timeout: Duration,
    ) -> Snowflake {
        let sb = p.sequence_bits;
        let ns = p.node_bits + p.sequence_bits;
        let l = Layout {
            sb,
            ns,
            seq_mask: (1u64 << sb) - 1,
            node_mask: ((1u64 << p.node_bits) - 1) << sb,
            ts_max: (1u64 << p.timestamp_bits) - 1,
        };
        Snowflake {
            name: name.to_string(),
            scope: format!("snow/{name}"),
            l,
            p,
            store,
            clock,
            timeout,
            hot: Hot {
                state: AtomicU64::new(0),
                limit: Arc::new(AtomicU64::new(0)),
                extend_mark: AtomicU64::new(u64::MAX),
                cached_tick: AtomicU64::new(0),
            },
            slow: tokio::sync::Mutex::new(Slow::default()),
            info: Mutex::new(Info::default()),
            wake: Arc::new(Notify::new()),
            stopped: std::sync::atomic::AtomicBool::new(false),
            floor_tick: AtomicU64::new(0),
            counters: Counters::default(),
            logical_origin: AtomicU64::new(0),
            seen_clock: Mutex::new((0, 0)),
            skew_ms: AtomicU64::new(0),
        }
    }

    /// Current tick, clamped to the timestamp field.
    #[inline]
    fn now_tick(&self) -> u64 {
        let mut wall = self.clock.wall_ms();
        let origin = self.logical_origin.load(Ordering::Relaxed);
        if origin != 0 {
            wall = wall.max(origin.saturating_add(self.clock.mono_ms()));
        }
        let ms = wall.saturating_sub(self.p.epoch_ms);
        let t = if self.p.unit_ms == 1 {
            ms
        } else {
            ms / self.p.unit_ms
        };
        t.min(self.l.ts_max)
    }

    /// Leases a node id and persists the first ceiling.
    pub(crate) async fn prepare(&self) -> Result<(), IdgenError> {
        let wall = self.clock.wall_ms();
        if wall < self.p.epoch_ms {
            return Err(IdgenError::ClockBeforeEpoch {
                generator: self.name.clone(),
                detail: format!("clock {wall} ms, epoch {} ms since 1970", self.p.epoch_ms),
            });
        }
        let mut slow = self.slow.lock().await;
        self.acquire(&mut slow).await
    }

    /// The fast path: positions `[first, next)` and the node field, or `None`.
    #[inline]
    fn try_take(&self, n: u64, now: u64) -> Option<(u64, u64, u64)> {
        let hot = &self.hot;
        let l = self.l;
        let mut s = hot.state.load(Ordering::Acquire);
        loop {
            // Loaded after `state`: a node switch zeroes `limit` before it
            // changes `state`, so a new state is never paired with an old limit.
            let limit = hot.limit.load(Ordering::Acquire);
            let node_part = s & l.node_mask;
            let first = l.resume(l.counter(s), now);
            let next = first.checked_add(n)?;
            if n == 0 || ((next - 1) >> l.sb) >= limit {
                return if n == 0 {
                    Some((first, first, node_part))
                } else {
                    None
                };
            }
            let s2 = l.compose(next, node_part);
            match hot
                .state
                .compare_exchange_weak(s, s2, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let tick = (next >> l.sb).max(now);
                    if tick >= hot.extend_mark.load(Ordering::Relaxed)
                        && hot.extend_mark.swap(u64::MAX, Ordering::Relaxed) != u64::MAX
                    {
                        self.wake.notify_one();
                    }
                    return Some((first, next, node_part));
                }
                Err(x) => s = x,
            }
        }
    }

    #[inline]
    fn emit(&self, out: &mut Vec<u64>, first: u64, next: u64, node_part: u64) {
        let l = self.l;
        out.extend((first..next).map(|c| l.compose(c, node_part)));
    }

    /// The current tick for the fast path: the ticker's, or the clock's.
    #[inline]
    fn fast_tick(&self) -> u64 {
        match self.hot.cached_tick.load(Ordering::Relaxed) {
            0 => self.now_tick(),
            t => t - 1,
        }
    }

    /// One step of the ticker task: refreshes the cached tick while the
    /// generator is in use; goes idle (and lets the fast path read the clock)
    /// after `IDLE_TICKS` steps without an id issued. Returns the pause before
    /// the next step, and remembers the state it saw in `last`.
    pub(crate) fn tick(&self, last: &mut (u64, u32)) -> Duration {
        const IDLE_TICKS: u32 = 200;
        let state = self.hot.state.load(Ordering::Relaxed);
        if state != last.0 {
            *last = (state, 0);
        } else {
            last.1 = last.1.saturating_add(1);
        }
        if last.1 < IDLE_TICKS {
            self.hot
                .cached_tick
                .store(self.now_tick() + 1, Ordering::Relaxed);
            Duration::from_millis(1)
        } else {
            self.hot.cached_tick.store(0, Ordering::Relaxed);
            Duration::from_millis(20)
        }
    }

    /// See [`crate::idgen::Generator::try_next`].
    #[inline]
    pub(crate) fn try_next(&self, n: u64, out: &mut Vec<u64>) -> Result<bool, IdgenError> {
        match self.try_take(n, self.fast_tick()) {
            Some((first, next, node)) => {
                self.emit(out, first, next, node);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// See [`crate::idgen::Generator::next`].
    pub(crate) async fn next(&self, n: u64, out: &mut Vec<u64>) -> Result<(), IdgenError> {
        if self.try_next(n, out)? {
            return Ok(());
        }
        if self.stopped.load(Ordering::Relaxed) {
            return Err(IdgenError::Shutdown(self.name.clone()));
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        for _ in 0..8 {
            if self.try_next(n, out)? {
                return Ok(());
            }
            // The ceiling (or the lease) is the limit: wait for the store.
            self.counters.waits.fetch_add(1, Ordering::Relaxed);
            let mut slow = tokio::time::timeout_at(deadline, self.slow.lock())
                .await
                .map_err(|_| self.unavailable(StoreError::Timeout(self.timeout)))?;
            if self.try_next(n, out)? {
                return Ok(());
            }
            let step = async {
                if slow.lease.as_ref().is_some_and(|l| l.state.is_valid()) {
                    self.extend(&mut slow, n).await
                } else {
                    self.acquire(&mut slow).await
                }
            };
            match tokio::time::timeout_at(deadline, step).await {
                Ok(r) => r?,
                Err(_) => return Err(self.unavailable(StoreError::Timeout(self.timeout))),
            }
        }
        Err(self.unavailable(StoreError::Unavailable(
            "the ceiling kept falling behind".into(),
        )))
    }

    fn unavailable(&self, source: StoreError) -> IdgenError {
        self.note_error(&source);
        IdgenError::Unavailable {
            generator: self.name.clone(),
            source,
        }
    }

    fn note_error(&self, e: &StoreError) {
        self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
        self.info.lock().last_error = Some(e.to_string());
    }

    fn no_node(&self, detail: String) -> IdgenError {
        self.info.lock().no_node = Some(detail.clone());
        IdgenError::NoNode {
            generator: self.name.clone(),
            detail,
        }
    }

    fn hw_key(&self) -> String {
        format!("{}/hw", self.scope)
    }

    /// Raises the cluster high-water to at least `target`; returns the
    /// value it held before (the highest ceiling any node persisted).
    async fn raise_hw(&self, target: u64) -> Result<u64, StoreError> {
        let key = self.hw_key();
        for _ in 0..64 {
            let current = self.store.load(&key).await?;
            let before = current.map(|v| v.value).unwrap_or(0);
            if before >= target {
                return Ok(before);
            }
            if self
                .store
                .compare_and_set(&key, current.map(|v| v.version), target)
                .await?
                .is_some()
            {
                self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                return Ok(before);
            }
        }
        Err(StoreError::Unavailable(
            "compare-and-swap on the high-water kept failing (64 conflicts in a row)".into(),
        ))
    }

    fn clock_key(&self) -> String {
        format!("{}/clock", self.scope)
    }

    /// Raises the cluster clock (`snow/<name>/clock`: the newest wall-clock
    /// reading, ms, any node persisted; never a logical reading, so a
    /// skewed node cannot push it) to this node's wall clock, and
    /// remembers the newest reading known. Returns the stored value before.
    async fn raise_clock(&self) -> Result<u64, StoreError> {
        let key = self.clock_key();
        let wall = self.clock.wall_ms();
        let mono = self.clock.mono_ms();
        let mut before = 0;
        for _ in 0..64 {
            let current = self.store.load(&key).await?;
            before = current.map(|v| v.value).unwrap_or(0);
            if before >= wall
                || self
                    .store
                    .compare_and_set(&key, current.map(|v| v.version), wall)
                    .await?
                    .is_some()
            {
                break;
            }
        }
        let mut seen = self.seen_clock.lock();
        if before.max(wall) > seen.0 {
            *seen = (before.max(wall), mono);
        }
        Ok(before)
    }

    /// Compares this node's wall clock with a clock reading
    /// `reference_ms` taken at monotonic time `reference_mono` (the
    /// cluster clock, or this node's own last reading), extrapolated to
    /// now. Behind by more than the tolerated skew: switches to (or moves
    /// up) the logical clock, which reads that extrapolation, logs, and
    /// returns `true`. Otherwise turns the logical clock off once the wall
    /// clock has caught up with it. Records the lag for the stats.
    fn check_skew(&self, reference_ms: u64, reference_mono: u64) -> bool {
        let wall = self.clock.wall_ms();
        let mono = self.clock.mono_ms();
        let reference_now = reference_ms.saturating_add(mono.saturating_sub(reference_mono));
        let behind = reference_now.saturating_sub(wall);
        let origin = self.logical_origin.load(Ordering::Relaxed);
        let skewed = reference_ms > 0 && behind > self.p.max_skew_ms;
        if skewed {
            let new_origin = reference_ms.saturating_sub(reference_mono).max(1);
            if new_origin > origin {
                self.logical_origin.store(new_origin, Ordering::Relaxed);
            }
        } else if origin != 0 && wall >= origin.saturating_add(mono) {
            self.logical_origin.store(0, Ordering::Relaxed);
            tracing::info!(generator = %self.name, "clock caught up with the cluster clock; logical clock off");
        }
        let lag = match self.logical_origin.load(Ordering::Relaxed) {
            0 => 0,
            o => o.saturating_add(mono).saturating_sub(wall),
        };
        if self.skew_ms.swap(lag, Ordering::Relaxed) == 0 && lag > 0 {
            tracing::warn!(
                generator = %self.name,
                skew_ms = lag,
                max_clock_skew_ms = self.p.max_skew_ms,
                "this node's clock is behind the cluster clock; issuing from a logical clock until it catches up"
            );
        }
        skewed
    }

    fn ceiling_key(&self, node: u64) -> String {
        format!("{}/ts/{node}", self.scope)
    }

    /// Stops issuing: no valid lease.
    fn stop_issuing(&self) {
        self.hot.limit.store(0, Ordering::SeqCst);
    }

    /// Leases a node id (giving up any old lease) and persists a ceiling for it.
    async fn acquire(&self, slow: &mut Slow) -> Result<(), IdgenError> {
        self.stop_issuing();
        if let Some(old) = slow.lease.take() {
            // Lost or taken over; nothing to release (best effort anyway).
            let _ = self.store.release_node(&self.scope, &old).await;
        }
        slow.ceiling = None;
        self.info.lock().node = None;
        let count = 1u64 << self.p.node_bits;
        let lease = match self.store.acquire_node(&self.scope, count).await {
            Ok(l) => l,
            Err(StoreError::NodesExhausted(n)) => {
                return Err(self.no_node(format!(
                    "all {n} node ids are leased by live processes; widen node_bits or stop one"
                )))
            }
            Err(e) => {
                self.note_error(&e);
                return Err(self.no_node(format!("cannot lease a node id: {e}")));
            }
        };
        let (limit, wake) = (self.hot.limit.clone(), self.wake.clone());
        lease.state.on_lost(Box::new(move || {
            limit.store(0, Ordering::SeqCst);
            wake.notify_one();
        }));
        let node = lease.node;
        // A floor published for this node (an explicit id another process
        // saw): read after leasing, so one published before is seen here
        // and one published later is followed.
        slow.floor_rx = self.store.follow(&self.floor_key(node));
        slow.floor_acked = 0;
        if let Some(rx) = slow.floor_rx.clone() {
            // A floor published for the node wakes the background task,
            // which applies and acknowledges it at once (the observer
            // waits for that). Ends with the lease.
            tokio::spawn(wake_on_floor(
                rx,
                self.wake.clone(),
                Arc::downgrade(&lease.state),
            ));
        }
        match self.store.load(&self.floor_key(node)).await {
            Ok(Some(f)) if f.value > 0 => {
                self.skip_past(f.value);
                if let Err(e) = self.raise(&self.ack_key(node), f.value).await {
                    let _ = self.store.release_node(&self.scope, &lease).await;
                    return Err(self.unavailable(e));
                }
                slow.floor_acked = f.value;
            }
            Ok(_) => {}
            Err(e) => {
                let _ = self.store.release_node(&self.scope, &lease).await;
                return Err(self.unavailable(e));
            }
        }
        let hw = match self.store.load(&self.hw_key()).await {
            Ok(v) => v.map(|v| v.value).unwrap_or(0),
            Err(e) => {
                let _ = self.store.release_node(&self.scope, &lease).await;
                return Err(self.unavailable(e));
            }
        };
        match self.raise_clock().await {
            Ok(c) => {
                self.check_skew(c, self.clock.mono_ms());
            }
            Err(e) => {
                let _ = self.store.release_node(&self.scope, &lease).await;
                return Err(self.unavailable(e));
            }
        }
        let key = self.ceiling_key(node);
        let mut done = None;
        for _ in 0..16 {
            let current = match self.store.load(&key).await {
                Ok(c) => c,
                Err(e) => {
                    let _ = self.store.release_node(&self.scope, &lease).await;
                    return Err(self.unavailable(e));
                }
            };
            let persisted = current.map(|v| v.value).unwrap_or(0);
            // Our own position matters if we get our old node back.
            let own = self.hot.state.load(Ordering::Acquire);
            let own_tick = if own & self.l.node_mask == node << self.l.sb {
                self.l.counter(own) >> self.l.sb
            } else {
                0
            };
            // Above every id any node issued before (the high-water).
            let start = self
                .now_tick()
                .max(persisted)
                .max(own_tick)
                .max(hw)
                .max(self.floor_tick.load(Ordering::Acquire));
            if start >= self.l.ts_max {
                let _ = self.store.release_node(&self.scope, &lease).await;
                return Err(IdgenError::Exhausted {
                    generator: self.name.clone(),
                    max: self.l.ts_max,
                });
            }
            let target = start.saturating_add(self.p.lead_ticks).min(self.l.ts_max);
            if let Err(e) = self.raise_hw(target).await {
                let _ = self.store.release_node(&self.scope, &lease).await;
                return Err(self.unavailable(e));
            }
            match self
                .store
                .compare_and_set(&key, current.map(|v| v.version), target)
                .await
            {
                Ok(Some(version)) => {
                    self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                    done = Some((
                        start,
                        Versioned {
                            value: target,
                            version,
                        },
                    ));
                    break;
                }
                Ok(None) => continue,
                Err(e) => {
                    let _ = self.store.release_node(&self.scope, &lease).await;
                    return Err(self.unavailable(e));
                }
            }
        }
        let Some((start, ceiling)) = done else {
            let _ = self.store.release_node(&self.scope, &lease).await;
            return Err(self.unavailable(StoreError::Unavailable(
                "ceiling compare-and-swap kept failing".into(),
            )));
        };
        let node_part = node << self.l.sb;
        let own = self.hot.state.load(Ordering::Acquire);
        let mut pos = self.l.tick_start(start);
        if own & self.l.node_mask == node_part {
            pos = pos.max(self.l.counter(own));
        }
        // limit is 0 here (stop_issuing), so no fast path runs until the
        // new limit is published after the new state.
        self.hot
            .state
            .store(self.l.compose(pos, node_part), Ordering::SeqCst);
        // An explicit id observed while this ran (`skip_past` raised
        // `floor_tick` before moving the old state, which the store above
        // may have overwritten): still skipped.
        self.raise_position(self.floor_tick.load(Ordering::SeqCst), node_part);
        self.publish(ceiling.value, &lease);
        slow.ceiling = Some(ceiling);
        slow.lease = Some(lease);
        let mut info = self.info.lock();
        info.node = Some(node);
        info.ceiling = ceiling.value;
        info.no_node = None;
        Ok(())
    }

    /// Lets the fast path issue below `ceiling`, unless the lease is lost
    /// (checked after the store, so a concurrent lost-hook always wins).
    fn publish(&self, ceiling: u64, lease: &NodeLease) {
        let mark = ceiling.saturating_sub(self.p.lead_ticks / 2 + 1);
        self.hot.extend_mark.store(mark, Ordering::SeqCst);
        self.hot.limit.store(ceiling, Ordering::SeqCst);
        if !lease.state.is_valid() {
            self.stop_issuing();
        }
    }

    /// Persists a higher ceiling so that `n` more ids (and the clock plus
    /// half a lead) fit below it.
    async fn extend(&self, slow: &mut Slow, n: u64) -> Result<(), IdgenError> {
        let Some(lease) = slow.lease.as_ref() else {
            return Err(self.no_node("no node id leased".into()));
        };
        if !lease.state.is_valid() {
            self.stop_issuing();
            return Err(self.no_node("the node id lease was lost".into()));
        }
        let node = lease.node;
        let l = self.l;
        let now = self.now_tick();
        let pos = l.resume(l.counter(self.hot.state.load(Ordering::Acquire)), now);
        let need_tick = (pos.saturating_add(n.max(1)) - 1) >> l.sb;
        if need_tick >= l.ts_max {
            return Err(IdgenError::Exhausted {
                generator: self.name.clone(),
                max: l.ts_max,
            });
        }
        let limit = self.hot.limit.load(Ordering::Acquire);
        let base = need_tick.max(now);
        if base + self.p.lead_ticks / 2 < limit {
            return Ok(()); // still enough room
        }
        let mut target = base.saturating_add(self.p.lead_ticks).min(l.ts_max);
        // The high-water first: every id under the new ceiling is below it.
        match self.raise_clock().await {
            Ok(c) => {
                if self.check_skew(c, self.clock.mono_ms()) {
                    // Now on the logical clock: the ceiling covers it.
                    let now = self.now_tick();
                    target = target.max(now.saturating_add(self.p.lead_ticks).min(l.ts_max));
                    if let Err(e) = self.raise_hw(target).await {
                        return Err(self.unavailable(e));
                    }
                }
            }
            Err(e) => return Err(self.unavailable(e)),
        }
        if let Err(e) = self.raise_hw(target).await {
            return Err(self.unavailable(e));
        }
        // Before the new ceiling is visible: nothing below `target - lead`
        // is issued after it (other processes rely on that, see `observe`).
        self.raise_position(target.saturating_sub(self.p.lead_ticks), node << l.sb);
        let expected = slow.ceiling.map(|v| v.version);
        match self
            .store
            .compare_and_set(&self.ceiling_key(node), expected, target)
            .await
        {
            Ok(Some(version)) => {
                self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                slow.ceiling = Some(Versioned {
                    value: target,
                    version,
                });
                self.publish(target, lease);
                self.info.lock().ceiling = target;
                Ok(())
            }
            Ok(None) => {
                // Someone else wrote our node's ceiling: our lease expired and
                // the node id was taken over. Stop; lease a new one.
                self.stop_issuing();
                lease.state.mark_lost();
                Err(self.no_node(format!("node id {node} was taken over by another process")))
            }
            Err(e) => Err(self.unavailable(e)),
        }
    }

    /// Raises the position to at least the start of `tick` (node unchanged).
    fn raise_position(&self, tick: u64, node_part: u64) {
        let l = self.l;
        let mut s = self.hot.state.load(Ordering::Acquire);
        loop {
            if s & l.node_mask != node_part || l.counter(s) >= l.tick_start(tick) {
                return;
            }
            let want = l.compose(l.tick_start(tick), node_part);
            match self
                .hot
                .state
                .compare_exchange(s, want, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(x) => s = x,
            }
        }
    }

    /// One round of background work: re-lease after a loss, extend the ceiling
    /// when the clock or the position comes near it.
    pub(crate) async fn background_round(&self) -> Result<(), IdgenError> {
        let Ok(mut slow) = tokio::time::timeout(self.timeout, self.slow.lock()).await else {
            return Ok(());
        };
        let valid = slow.lease.as_ref().is_some_and(|l| l.state.is_valid());
        let work = async {
            if !valid {
                self.acquire(&mut slow).await
            } else {
                if let Err(e) = self.apply_floor(&mut slow).await {
                    return Err(self.unavailable(e));
                }
                // A clock stepped back while running: the newest clock
                // reading known here tells, without the store.
                let (seen_ms, seen_mono) = *self.seen_clock.lock();
                if self.check_skew(seen_ms, seen_mono) {
                    let now = self.now_tick();
                    self.raise_position(
                        now,
                        slow.lease.as_ref().map_or(0, |l| l.node) << self.l.sb,
                    );
                }
                self.extend(&mut slow, 1).await
            }
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(self.unavailable(StoreError::Timeout(self.timeout))),
        }
    }

    /// How long the background task may sleep between rounds.
    pub(crate) fn period(&self) -> Duration {
        let lead_ms = self.p.lead_ticks.saturating_mul(self.p.unit_ms);
        Duration::from_millis((lead_ms / 4).clamp(20, 1000))
    }

    /// The smallest position whose id with node field `node_part` is above
    /// `id` (may be past the last tick: then nothing is issued any more).
    fn position_above(&self, id: u64, node_part: u64) -> u64 {
        let l = self.l;
        let x_node = id & l.node_mask;
        let x_tick = id >> l.ns;
        if x_tick > l.ts_max {
            // Beyond the timestamp field (not an id of this layout): past
            // the last tick, where nothing is issued. Fits: the layout is
            // at most 63 bits.
            return (l.ts_max + 1) << l.sb;
        }
        if node_part > x_node {
            x_tick << l.sb
        } else if node_part == x_node {
            l.counter(id) + 1
        } else {
            (x_tick + 1) << l.sb
        }
    }

    /// Moves this process's position so that every id it issues later is
    /// above `id` (compare-and-swap on the composed state, so a node switch
    /// in between is never mixed with the old node's position).
    fn skip_past(&self, id: u64) {
        let l = self.l;
        self.floor_tick
            .fetch_max((id >> l.ns).min(l.ts_max) + 1, Ordering::SeqCst);
        let mut s = self.hot.state.load(Ordering::Acquire);
        loop {
            let node_part = s & l.node_mask;
            let pos = self.position_above(id, node_part);
            if l.counter(s) >= pos {
                return;
            }
            let want = l.compose(pos, node_part);
            match self
                .hot
                .state
                .compare_exchange(s, want, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(x) => s = x,
            }
        }
    }

    /// See [`crate::idgen::Generator::observe`]: skips `id` here; `true`
    /// when no other process can issue it either.
    ///
    /// An id carries its node: only the holder of that node (now or later)
    /// could issue it. Our own node while the lease is valid: safe when its
    /// tick is below the persisted ceiling (a later holder starts above
    /// it). Another node: safe when its tick is below that node's ceiling
    /// minus the lead, as last read (its holder never goes below that).
    pub(crate) fn observe(&self, id: u64) -> bool {
        self.skip_past(id);
        let l = self.l;
        let x_tick = id >> l.ns;
        let x_node = (id & l.node_mask) >> l.sb;
        let limit = self.hot.limit.load(Ordering::Acquire);
        let own = self.hot.state.load(Ordering::Acquire) & l.node_mask;
        if limit > 0 && own >> l.sb == x_node {
            return x_tick < limit;
        }
        let info = self.info.lock();
        info.ceilings
            .get(&x_node)
            .is_some_and(|&c| x_tick.saturating_add(self.p.lead_ticks) < c)
    }

    fn floor_key(&self, node: u64) -> String {
        format!("{}/floor/{node}", self.scope)
    }

    fn ack_key(&self, node: u64) -> String {
        format!("{}/ack/{node}", self.scope)
    }

    /// Compare-and-swap loop raising `key` to at least `target`.
    async fn raise(&self, key: &str, target: u64) -> Result<(), StoreError> {
        for _ in 0..64 {
            let current = self.store.load(key).await?;
            if current.is_some_and(|v| v.value >= target) {
                return Ok(());
            }
            if self
                .store
                .compare_and_set(key, current.map(|v| v.version), target)
                .await?
                .is_some()
            {
                self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(
            "compare-and-swap kept failing (64 conflicts in a row)".into(),
        ))
    }

    /// The slow path of an explicit id that another process (the holder of
    /// its node) may issue, or whose tick is beyond our own ceiling.
    /// Bounded by the allocator's timeout.
    pub(crate) async fn confirm(&self, id: u64) -> Result<(), IdgenError> {
        let l = self.l;
        let x_tick = id >> l.ns;
        let x_node = (id & l.node_mask) >> l.sb;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let unconfirmed = |detail: String| IdgenError::Unconfirmed {
            generator: self.name.clone(),
            id,
            detail,
        };
        let timed_out = || unconfirmed(format!("timed out after {:?}", self.timeout));
        // Our own node: persist a ceiling above it (a later holder of the
        // node starts above the ceiling).
        {
            let mut slow = tokio::time::timeout_at(deadline, self.slow.lock())
                .await
                .map_err(|_| timed_out())?;
            let own = slow
                .lease
                .as_ref()
                .filter(|lease| lease.state.is_valid())
                .map(|lease| lease.node);
            if own == Some(x_node) {
                if x_tick >= l.ts_max {
                    return Ok(()); // nothing is issued at or past the last tick
                }
                self.skip_past(id);
                return match tokio::time::timeout_at(deadline, self.extend(&mut slow, 1)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(IdgenError::Exhausted { .. })) => Ok(()),
                    Ok(Err(e)) => Err(unconfirmed(e.to_string())),
                    Err(_) => Err(timed_out()),
                };
            }
        }
        let store_err = |e: StoreError| unconfirmed(format!("store: {e}"));
        // Another node: its holder may still issue it. Its ceiling first.
        let ceiling = tokio::time::timeout_at(deadline, self.store.load(&self.ceiling_key(x_node)))
            .await
            .map_err(|_| timed_out())?
            .map_err(store_err)?
            .map(|v| v.value)
            .unwrap_or(0);
        {
            let mut info = self.info.lock();
            let c = info.ceilings.entry(x_node).or_insert(0);
            *c = (*c).max(ceiling);
        }
        if x_tick.saturating_add(self.p.lead_ticks) < ceiling {
            return Ok(());
        }
        // Publish a floor for that node; its holder skips it and acknowledges,
        // a later holder reads it when it leases the node.
        tokio::time::timeout_at(deadline, self.raise(&self.floor_key(x_node), id))
            .await
            .map_err(|_| timed_out())?
            .map_err(store_err)?;
        loop {
            let check = async {
                if !self.store.node_held(&self.scope, x_node).await? {
                    return Ok::<bool, StoreError>(true);
                }
                let ack = self.store.load(&self.ack_key(x_node)).await?;
                Ok(ack.is_some_and(|v| v.value >= id))
            };
            match tokio::time::timeout_at(deadline, check).await {
                Ok(Ok(true)) => return Ok(()),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => return Err(store_err(e)),
                Err(_) => return Err(timed_out()),
            }
            if tokio::time::Instant::now() + Duration::from_millis(5) >= deadline {
                return Err(unconfirmed(format!(
                    "the idgate process holding node id {x_node} did not acknowledge within {:?}",
                    self.timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Applies the floor published for our node (if it rose) and
    /// acknowledges it. Caller holds the slow lock.
    async fn apply_floor(&self, slow: &mut Slow) -> Result<(), StoreError> {
        let Some(node) = slow
            .lease
            .as_ref()
            .filter(|lease| lease.state.is_valid())
            .map(|lease| lease.node)
        else {
            return Ok(());
        };
        let Some(rx) = slow.floor_rx.as_mut() else {
            return Ok(());
        };
        let floor = *rx.borrow_and_update();
        if floor <= slow.floor_acked {
            return Ok(());
        }
        self.skip_past(floor);
        self.raise(&self.ack_key(node), floor).await?;
        slow.floor_acked = floor;
        Ok(())
    }

    /// See [`crate::idgen::Generator::set_floor`]: ids of this node after it
    /// returns are above `value`.
    pub(crate) async fn set_floor(&self, value: u64) -> Result<(), IdgenError> {
        let l = self.l;
        let tick = (value >> l.ns).saturating_add(1);
        if tick > l.ts_max {
            return Err(IdgenError::Exhausted {
                generator: self.name.clone(),
                max: l.ts_max,
            });
        }
        let mut slow = tokio::time::timeout(self.timeout, self.slow.lock())
            .await
            .map_err(|_| self.unavailable(StoreError::Timeout(self.timeout)))?;
        let Some(node) = slow
            .lease
            .as_ref()
            .filter(|l| l.state.is_valid())
            .map(|l| l.node)
        else {
            return Err(self.no_node("no node id leased".into()));
        };
        self.floor_tick.fetch_max(tick, Ordering::AcqRel);
        let node_part = node << l.sb;
        self.hot
            .state
            .fetch_max(l.compose(l.tick_start(tick), node_part), Ordering::SeqCst);
        match tokio::time::timeout(self.timeout, self.extend(&mut slow, 1)).await {
            Ok(r) => r,
            Err(_) => Err(self.unavailable(StoreError::Timeout(self.timeout))),
        }
    }

    /// Gives the node id back (clean shutdown).
    pub(crate) async fn release(&self) {
        self.stop_issuing();
        if let Ok(mut slow) = tokio::time::timeout(self.timeout, self.slow.lock()).await {
            if let Some(lease) = slow.lease.take() {
                let _ = tokio::time::timeout(
                    self.timeout,
                    self.store.release_node(&self.scope, &lease),
                )
                .await;
            }
        }
    }

    /// Read-only view for stats.
    pub(crate) fn view(&self) -> SnowView {
        let info = self.info.lock();
        let state = self.hot.state.load(Ordering::Acquire);
        let limit = self.hot.limit.load(Ordering::Acquire);
        let pos = self.l.resume(self.l.counter(state), self.now_tick());
        SnowView {
            high_water: info.ceiling,
            next_id: self.l.compose(pos, state & self.l.node_mask),
            cached_remaining: (limit << self.l.sb).saturating_sub(pos),
            node: info.node,
            lease_valid: limit > 0,
            waits: self.counters.waits.load(Ordering::Relaxed),
            store_errors: self.counters.store_errors.load(Ordering::Relaxed),
            store_writes: self.counters.store_writes.load(Ordering::Relaxed),
            last_error: info.last_error.clone().or_else(|| info.no_node.clone()),
            clock_skew_ms: self.skew_ms.load(Ordering::Relaxed),
        }
    }
}

/// Wakes the background task whenever the followed floor rises, until the
/// lease is lost or dropped (holds it only weakly: a crashed holder's lease
/// must be seen as orphaned).
async fn wake_on_floor(
    mut rx: tokio::sync::watch::Receiver<u64>,
    wake: Arc<Notify>,
    lease: std::sync::Weak<super::store::LeaseState>,
) {
    loop {
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
                wake.notify_one();
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if !lease.upgrade().is_some_and(|l| l.is_valid()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idgen::clock::FakeClock;
    use crate::idgen::params::{resolve, Params, DEFAULT_EPOCH_MS};
    use crate::idgen::store::memory::MemoryStore;
    use crate::rules::spec::{GeneratorKind, GeneratorRule};

    // Every test here runs on paused tokio time over a memory store and a
    // fake clock: the store timeout cannot run out because the machine is
    // slow, and the ids are the same in every run.

    /// Ids per spread measurement.
    const IDS: usize = 30_000;

    /// 100 days and a bit after the default epoch.
    const T0: u64 = DEFAULT_EPOCH_MS + 100 * 86_400_000 + 123;

    /// A prepared snowflake over a memory store and a fake clock.
    async fn snowflake(rule: &GeneratorRule) -> (Snowflake, Arc<FakeClock>) {
        let Ok(Params::Snowflake(p)) = resolve(rule) else {
            panic!("test rule is valid: {rule:?}")
        };
        let clock = Arc::new(FakeClock::new(T0));
        let store: Arc<dyn Store> = MemoryStore::new();
        let s = Snowflake::new(&rule.name, p, store, clock.clone(), Duration::from_secs(3));
        s.prepare().await.expect("prepare");
        (s, clock)
    }

    fn preset(name: &str) -> GeneratorRule {
        let mut r = GeneratorRule::new("ev", GeneratorKind::Snowflake);
        r.preset = Some(name.to_string());
        r
    }

    /// `count` ids, one `next(per_call)` at a time, the clock moving `gap`
    /// ticks (ms) before every `per_tick` ids. Checks they strictly increase.
    async fn issue(
        rule: &GeneratorRule,
        count: usize,
        per_call: u64,
        per_tick: usize,
        gap: u64,
    ) -> Vec<u64> {
        let (s, clock) = snowflake(rule).await;
        let mut out = Vec::with_capacity(count);
        let mut in_tick = 0;
        while out.len() < count {
            if in_tick >= per_tick {
                clock.advance(gap);
                in_tick = 0;
            }
            let before = out.len();
            s.next(per_call, &mut out).await.expect("next");
            in_tick += out.len() - before;
        }
        for w in out.windows(2) {
            assert!(w[1] > w[0], "{:#x} then {:#x}", w[0], w[1]);
        }
        out
    }

    /// The largest distance of a shard's row count from the mean, as a
    /// fraction of the mean, placing `ids` by `shard(id) % n`.
    fn worst(ids: &[u64], n: u64, shard: impl Fn(u64) -> u64) -> f64 {
        let mut counts = vec![0u64; n as usize];
        for &id in ids {
            counts[(shard(id) % n) as usize] += 1;
        }
        let mean = ids.len() as f64 / n as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - mean).abs() / mean)
            .fold(0.0, f64::max)
    }

    /// `id % n` and `CRC32(id) % n` (the `hash` placement of the id's
    /// decimal text) for n = 2, 3, 4: every shard within 5% of the mean.
    /// (CRC-32 behaves like a random function here: with 30,000 ids, 5% is
    /// about five standard deviations for n = 4, so only a real pile-up fails.)
    fn assert_even(ids: &[u64], what: &str) {
        for n in 2..=4 {
            let by_mod = worst(ids, n, |id| id);
            assert!(
                by_mod <= 0.05,
                "{what}: id % {n} is off by {:.1}%",
                by_mod * 100.0
            );
            let by_hash = worst(ids, n, |id| {
                u64::from(crc32fast::hash(id.to_string().as_bytes()))
            });
            assert!(
                by_hash <= 0.05,
                "{what}: CRC32(id) % {n} is off by {:.1}%",
                by_hash * 100.0
            );
        }
    }

    /// Low rates: one id per tick (the clock moving 1, 2, 3 or 5 ticks
    /// between ids), where a sequence restarting at 0 made every id even.
    #[tokio::test(start_paused = true)]
    async fn low_rates_spread_evenly() {
        for layout in ["twitter", "js53"] {
            for gap in [1, 2, 3, 5] {
                let ids = issue(&preset(layout), IDS, 1, 1, gap).await;
                assert_even(&ids, &format!("{layout}, one id every {gap} ticks"));
            }
            // Two ids per tick.
            let ids = issue(&preset(layout), IDS, 1, 2, 1).await;
            assert_even(&ids, &format!("{layout}, two ids per tick"));
        }
    }

    /// High rates: many ids per tick, one at a time or in batches, and more
    /// than a tick holds (carry into the next ticks).
    #[tokio::test(start_paused = true)]
    async fn high_rates_spread_evenly() {
        for layout in ["twitter", "js53"] {
            let ids = issue(&preset(layout), IDS, 1, 50, 1).await;
            assert_even(&ids, &format!("{layout}, 50 ids per tick"));
            let ids = issue(&preset(layout), IDS, 100, 1000, 1).await;
            assert_even(&ids, &format!("{layout}, next(100), 1000 ids per tick"));
            let ids = issue(&preset(layout), IDS, 1, usize::MAX, 1).await;
            assert_even(&ids, &format!("{layout}, every id in one tick"));
        }
    }

    /// A tick's first id has the documented sequence (the README gives the
    /// same formula), the next ones count up from it.
    #[tokio::test(start_paused = true)]
    async fn a_tick_starts_at_its_documented_sequence() {
        let (s, clock) = snowflake(&preset("twitter")).await;
        let node = s.info.lock().node.expect("leased");
        let mut out = Vec::new();
        clock.advance(10);
        s.next(1, &mut out).await.unwrap();
        s.next(2, &mut out).await.unwrap();
        let tick = T0 + 10 - DEFAULT_EPOCH_MS;
        let seq = tick.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 12);
        let first = (tick << 22) | (node << 12) | seq;
        // Ticks whose start is within 2 of the end carry into the next tick.
        assert!(seq < 4094, "pick another T0: sequence {seq}");
        assert_eq!(out, [first, first + 1, first + 2]);
        assert_ne!(seq, 0);
    }

    /// Without sequence bits there is nothing to rotate: ids are still
    /// unique and increasing (one per tick, carrying), and nothing panics.
    #[tokio::test(start_paused = true)]
    async fn no_sequence_bits() {
        let mut r = GeneratorRule::new("ev", GeneratorKind::Snowflake);
        r.sequence_bits = Some(0);
        let ids = issue(&r, 1000, 3, 10, 1).await;
        assert_eq!(ids.len(), 1002);
    }

    /// The rotation keeps the guarantees: a clock set back never lowers the
    /// ids, and a floor still puts every later id above it.
    #[tokio::test(start_paused = true)]
    async fn rotation_keeps_order_across_clock_jumps_and_floors() {
        let (s, clock) = snowflake(&preset("twitter")).await;
        let mut out = Vec::new();
        for step in 0..200u64 {
            match step % 20 {
                7 => clock.jump(-50),
                13 => {
                    let floor = out.last().copied().unwrap_or(0) + (1 << 22) * 3 + 5;
                    s.set_floor(floor).await.unwrap();
                    let mut next = Vec::new();
                    s.next(1, &mut next).await.unwrap();
                    assert!(next[0] > floor);
                    out.extend(next);
                }
                _ => clock.advance(1),
            }
            s.next(1, &mut out).await.unwrap();
        }
        for w in out.windows(2) {
            assert!(w[1] > w[0], "{:#x} then {:#x}", w[0], w[1]);
        }
    }
    /// One snowflake node ("process") on `store`, reading `clock`.
    async fn node(store: &Arc<dyn Store>, clock: &Arc<FakeClock>) -> Snowflake {
        let Ok(Params::Snowflake(p)) = resolve(&GeneratorRule::new("sk", GeneratorKind::Snowflake))
        else {
            panic!("default snowflake rule is valid")
        };
        let s = Snowflake::new(
            "sk",
            p,
            store.clone(),
            clock.clone(),
            Duration::from_secs(3),
        );
        s.prepare().await.expect("prepare");
        s
    }

    /// Ids for `ms` milliseconds of the node's clock, one per ms.
    async fn run(s: &Snowflake, clock: &FakeClock, ms: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for _ in 0..ms {
            s.next(1, &mut out).await.expect("next");
            clock.advance(1);
        }
        out
    }

    /// The measured bug (issue 16, part 5): killed, restarted with the
    /// clock an hour behind, a new node id. Every id after the restart is
    /// above every id before; the node runs on a logical clock (ids keep
    /// moving with time), reports the skew, and goes back to its wall clock
    /// once that catches up.
    #[tokio::test]
    async fn restart_an_hour_behind_stays_above_every_earlier_id() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let a_clock = Arc::new(FakeClock::new(T0));
        let a = node(&store, &a_clock).await;
        let before = run(&a, &a_clock, 10_000).await;
        let max_before = *before.iter().max().unwrap();
        // kill -9: nothing released, the old node id stays leased.
        std::mem::forget(a);
        let b_clock = Arc::new(FakeClock::new(T0 + 10_000 - 3_600_000));
        let b = node(&store, &b_clock).await;
        let skew = b.view().clock_skew_ms;
        assert!(
            (3_590_000..=3_610_000).contains(&skew),
            "skew reported: {skew}"
        );
        let after = run(&b, &b_clock, 10_000).await;
        assert!(after[0] > max_before, "{} <= {max_before}", after[0]);
        assert!(after.windows(2).all(|w| w[0] < w[1]));
        // The logical clock moves with time: once it has passed the
        // high-water B started at (at most a lead ahead), ticks follow it.
        let l = b.l;
        let (t0, t1) = (after[0] >> l.ns, after[after.len() - 1] >> l.ns);
        assert!(t1 - t0 >= 5_000, "{t0} -> {t1}");
        // The wall clock is corrected (NTP): the logical clock goes off at
        // the next extension, the skew reads 0, ids still increase.
        b_clock.set_wall_ms(T0 + 30_000);
        let mut slow = b.slow.lock().await;
        b.extend(&mut slow, 1).await.expect("extend");
        drop(slow);
        assert_eq!(b.view().clock_skew_ms, 0);
        let later = run(&b, &b_clock, 10).await;
        assert!(later[0] > after[after.len() - 1]);
        assert!(b.logical_origin.load(Ordering::Relaxed) == 0);
    }

    /// Within the tolerated skew the node keeps its own clock (no skew
    /// reported) and still starts above every id issued before.
    #[tokio::test]
    async fn restart_within_the_skew_uses_the_wall_clock_and_stays_above() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let a_clock = Arc::new(FakeClock::new(T0));
        let a = node(&store, &a_clock).await;
        let before = run(&a, &a_clock, 10_000).await;
        let max_before = *before.iter().max().unwrap();
        std::mem::forget(a);
        let b_clock = Arc::new(FakeClock::new(T0 + 10_000 - 500));
        let b = node(&store, &b_clock).await;
        assert_eq!(b.view().clock_skew_ms, 0);
        let after = run(&b, &b_clock, 100).await;
        assert!(after[0] > max_before);
        assert_eq!(b.logical_origin.load(Ordering::Relaxed), 0);
    }

    /// A running node whose clock steps back an hour: at its next
    /// extension it switches to the logical clock and its ids keep moving.
    #[tokio::test]
    async fn a_clock_stepping_back_while_running_is_reported() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let clock = Arc::new(FakeClock::new(T0));
        let a = node(&store, &clock).await;
        let before = run(&a, &clock, 5_000).await;
        clock.set_wall_ms(T0 + 5_000 - 3_600_000);
        a.background_round().await.expect("background round");
        let after = run(&a, &clock, 10_000).await;
        assert!(after[0] > before[before.len() - 1]);
        assert!(after.windows(2).all(|w| w[0] < w[1]));
        assert!(
            a.view().clock_skew_ms > 3_500_000,
            "{}",
            a.view().clock_skew_ms
        );
        let l = a.l;
        let (t0, t1) = (after[0] >> l.ns, after[after.len() - 1] >> l.ns);
        assert!(t1 - t0 >= 5_000, "the logical clock moved: {t0} -> {t1}");
    }
    /// Restarts with correct clocks raise no alarm and do not run away: a
    /// node that starts at the high-water (ahead of its clock by at most a
    /// lead) does not count that as skew, and neither do the others.
    #[tokio::test]
    async fn restarts_with_correct_clocks_report_no_skew() {
        let store: Arc<dyn Store> = MemoryStore::new();
        let clock = Arc::new(FakeClock::new(T0));
        let mut last = 0;
        for _ in 0..5 {
            let n = node(&store, &clock).await;
            let ids = run(&n, &clock, 2_000).await;
            n.background_round().await.expect("background round");
            assert_eq!(n.view().clock_skew_ms, 0);
            assert!(ids[0] > last);
            last = *ids.last().unwrap();
            std::mem::forget(n); // kill -9
        }
        // Five quick restarts moved ids ahead of the clock by at most
        // five leads (each starts at the high-water), not more.
        let tick = (last >> 22) as i64;
        let now = (clock.wall_ms() - DEFAULT_EPOCH_MS) as i64;
        assert!(tick - now <= 5 * 3000, "{}", tick - now);
    }
}
