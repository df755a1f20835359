//! Sequence generators: dense increasing integers served from segments.
//!
//! A segment `[base, end)` is reserved in the store with a compare-and-swap on
//! the generator's high-water mark (`seq/<name>/hwm`, the first id nobody has
//! reserved) *before* any id of it is handed out. So after a crash the unused
//! rest of a segment is skipped (a gap), never issued again.
//!
//! Serving is lock-free: the current segment is two atomics, `cur` (next id)
//! and `end`; taking `n` ids is one compare-and-swap on `cur`. `cur` only ever
//! grows, so a stale read can never succeed (no ABA), and a segment switch
//! stores `cur` before `end` so a reader never pairs an old cursor with a new
//! end. A background task reserves the next segment when the current one falls
//! below the watermark (double buffering); requests wait for the store only
//! when both are used up. The batch adapts so that one segment lasts about
//! `segment_seconds` at the measured rate.
//!
//! # Explicit ids across processes
//!
//! The promise: once `observe(x)` returned `Ok` (before the client that
//! wrote `x` gets its reply), no idgate process on the store issues `x`.
//!
//! - Every process is a *member* of the store (`Store::join`: in etcd a
//!   key `seq/<name>/member/<lease>` attached to a lease with a TTL, kept
//!   alive), holding its `low`: the lowest id it may still issue (its
//!   cursor, or above its floor). It joins before it reserves anything and
//!   rewrites `low` about once per segment (background).
//! - `observe(x)` is free (one short lock, no store call) when `x` is in a
//!   range this process reserved (the compare-and-swap that reserved it
//!   moved the high-water mark over it: nobody else ever holds it), or
//!   below both the high-water mark `H` and every other member's `low` in
//!   one consistent read (`Store::members`, one etcd txn): a segment
//!   reserved after that read starts at or above `H`; the members in it
//!   never issue below their `low`; a member that joins later holds only
//!   later segments. Any read, however old, is safe (values only grow).
//! - Otherwise, synchronously (bounded by the allocator's timeout): a fresh
//!   read; if `x >= H`, a segment is reserved above `x` (one
//!   compare-and-swap; the explicit ids just above it are then this
//!   process's own); else `x` may be in another member's cache: the floor
//!   key is raised to `x`, and `observe` waits until every live member
//!   except this one has a `low` above `x`. Each member follows the floor
//!   (etcd watch), skips every id at or below it, then rewrites its `low`:
//!   that is its acknowledgement. A member that joins after the floor was
//!   raised holds only segments above `x`.
//! - Failure rules. A member that does not acknowledge in time (cut off
//!   from etcd, stuck) makes `observe` fail: the statement is refused
//!   (error 1467; for ids read back after the statement, the row is stored
//!   but the client gets the error), never a risk of a duplicate. A member
//!   that cannot renew its lease (TTL, `allocator.lease_ttl_secs`) drops
//!   its whole cache a margin before the lease expires in etcd
//!   (`drop_cache`: the current segment is used up, waiting ones and
//!   reservations in flight are abandoned) and joins again with fresh
//!   segments once etcd answers; so once its record is gone, the others
//!   may go on without it. A process that crashes mid-way leaves at most a
//!   raised floor (a gap). With etcd down, the free cases above go on and
//!   the others fail. The state file has one process: no members, and `H`
//!   is this process's own reservations.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::clock::Clock;
use super::error::{IdgenError, StoreError};
use super::params::SequenceParams;
use super::store::{NodeLease, Store, Versioned};

/// The atomics of the fast path, on their own cache line(s).
#[repr(align(128))]
#[derive(Debug)]
struct Hot {
    /// Next id to issue from the current segment. Only grows.
    cur: AtomicU64,
    /// Exclusive end of the current segment.
    end: AtomicU64,
    /// When `cur` reaches this, the background task is asked for the next
    /// segment (`u64::MAX`: already asked, or a segment is waiting).
    refill_mark: AtomicU64,
}

/// The adaptive batch's parameters, which a rule reload may change.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    /// The configured `batch` (where the adaptive batch starts).
    batch: u64,
    min_batch: u64,
    max_batch: u64,
    segment_ms: u64,
}

impl Tuning {
    fn of(p: &SequenceParams) -> Tuning {
        Tuning {
            batch: p.batch,
            min_batch: p.min_batch,
            max_batch: p.max_batch,
            segment_ms: p.segment_ms,
        }
    }
}

/// State changed only on the slow path, under a short lock (never held
/// across an await).
#[derive(Debug)]
struct Slow {
    /// The adaptive batch's bounds and target (changed by a rule reload).
    tuning: Tuning,
    /// Base of the current segment (to count issued ids).
    seg_base: u64,
    /// Reserved segments waiting to become current, in increasing order.
    pending: VecDeque<(u64, u64)>,
    /// End of the highest segment this process ever reserved: no reservation
    /// starts below it, even if the store's value went back.
    reserved_end: u64,
    /// Highest id seen by `observe`/`set_floor`: no later id is at or below it.
    floor: u64,
    /// Highest floor known to be in the store.
    floor_persisted: u64,
    /// Highest floor that was above every reservation of this process when
    /// seen, so other processes may hold it in their caches: to be published.
    floor_to_publish: u64,
    /// Ids consumed (issued or skipped) from earlier segments.
    issued_done: u64,
    /// Size of the next reservation (adaptive).
    batch: u64,
    /// Measured consumption, ids per second (0 until measured).
    rate: f64,
    /// (mono ms, issued) at the last rate sample.
    sample: (u64, u64),
    /// The store's error at the last failed call, for stats.
    last_error: Option<String>,
    /// Ranges this process reserved (segments, the gaps below them, blocks
    /// for loaders), merged, oldest first, at most `OWNED_MAX`: no other
    /// process ever issues an id inside them.
    owned: VecDeque<(u64, u64)>,
    /// From the last consistent read of the store (`Store::members`): the
    /// high-water mark, and the lowest `low` of the other live members.
    /// Every id below both is safe from other processes (module doc).
    snap_hwm: u64,
    /// See `snap_hwm` (`u64::MAX`: no other member).
    snap_others_low: u64,
    /// Whether the store has members (etcd, memory); false: one process.
    members: bool,
    /// This process's member record, while it holds one.
    member: Option<NodeLease>,
    /// The `low` last written to the member record.
    low_published: u64,
    /// Highest floor other processes published (seen through the watch):
    /// the member record must be above it (the acknowledgement; retried by
    /// the background task until written).
    floor_seen: u64,
    /// Bumped when the cache is dropped (member record lost): a
    /// reservation that started before is not installed.
    epoch: u64,
}

/// Most owned ranges remembered (older ones are forgotten: only a cost).
const OWNED_MAX: usize = 64;

/// What a reservation can fail with.
enum ReserveError {
    /// Nothing left below `max`.
    Exhausted,
    /// The store failed.
    Store(StoreError),
}

/// Counters for the stats view.
#[derive(Debug, Default)]
struct Counters {
    /// Requests that had to wait for the store (cache exhausted).
    waits: AtomicU64,
    /// Failed store calls.
    store_errors: AtomicU64,
    /// Successful store writes.
    store_writes: AtomicU64,
}

/// A sequence generator.
pub(crate) struct Sequence {
    /// The generator's name (errors, keys).
    pub(crate) name: String,
    /// Its parameters.
    p: SequenceParams,
    /// Exclusive, aligned bound: every id below it with the right alignment
    /// is `<= max` (raised or lowered by a rule reload: [`Sequence::tune`]).
    limit: AtomicU64,
    /// `max` in force (`p.max` until a reload changes it).
    max: AtomicU64,
    /// Store key of the high-water mark.
    key: String,
    /// Store key of the highest explicit id (or floor) any process has seen
    /// above its own reservations; followed so every process skips it.
    floor_key: String,
    /// Where segments are reserved.
    store: Arc<dyn Store>,
    /// For rates.
    clock: Arc<dyn Clock>,
    /// Bound on a wait for the store.
    timeout: Duration,
    /// Fast-path atomics.
    hot: Hot,
    /// Slow-path state.
    slow: Mutex<Slow>,
    /// Serializes store reservations; caches the last known (hwm, version) so
    /// a reservation is usually one round trip.
    store_view: tokio::sync::Mutex<Option<Versioned>>,
    /// Wakes the background task (refill, floor).
    pub(crate) wake: Arc<Notify>,
    /// Set when `max` is reached: requests fail at once.
    exhausted: AtomicBool,
    /// Set by shutdown.
    pub(crate) stopped: AtomicBool,
    /// Stats counters.
    counters: Counters,
    /// Store scope of the member records: `seq/<name>`.
    scope: String,
    /// Run when the member record is lost (drops the cache); set by the
    /// allocator once the generator is shared.
    pub(crate) on_lost: std::sync::OnceLock<Arc<dyn Fn() + Send + Sync>>,
}

/// Read-only view of a sequence for stats (see `GeneratorStats` for the meaning).
pub(crate) struct SeqView {
    /// End of the highest local reservation.
    pub high_water: u64,
    /// Next id from the cache.
    pub next_id: u64,
    /// Ids left in the current and waiting segments.
    pub cached_remaining: u64,
    /// Size of the next reservation.
    pub batch: u64,
    /// Measured ids/s.
    pub rate: f64,
    /// Ids issued or skipped by this process.
    pub issued: u64,
    /// Highest observed/floored id.
    pub floor: u64,
    /// Requests that waited for the store.
    pub waits: u64,
    /// Failed store calls.
    pub store_errors: u64,
    /// Successful store writes.
    pub store_writes: u64,
    /// Last store error.
    pub last_error: Option<String>,
}

impl Sequence {
    /// A sequence with no segment yet; call [`Sequence::prepare`].
    pub(crate) fn new(
        name: &str,
        p: SequenceParams,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        timeout: Duration,
    ) -> Sequence {
        let inc = p.increment;
        let align = |x: u64| align_up(p.start, inc, x);
        let limit =
            align(p.max.saturating_add(1)).unwrap_or_else(|| u64::MAX - (u64::MAX - p.start) % inc);
        let now = clock.mono_ms();
        Sequence {
            name: name.to_string(),
            key: format!("seq/{name}/hwm"),
            floor_key: format!("seq/{name}/floor"),
            limit: AtomicU64::new(limit),
            max: AtomicU64::new(p.max),
            store,
            clock,
            timeout,
            hot: Hot {
                cur: AtomicU64::new(0),
                end: AtomicU64::new(0),
                refill_mark: AtomicU64::new(u64::MAX),
            },
            slow: Mutex::new(Slow {
                seg_base: 0,
                pending: VecDeque::new(),
                reserved_end: 0,
                floor: 0,
                floor_persisted: 0,
                floor_to_publish: 0,
                issued_done: 0,
                batch: p.batch,
                tuning: Tuning::of(&p),
                rate: 0.0,
                sample: (now, 0),
                last_error: None,
                owned: VecDeque::new(),
                snap_hwm: 0,
                snap_others_low: 0,
                members: false,
                member: None,
                low_published: 0,
                floor_seen: 0,
                epoch: 0,
            }),
            p,
            store_view: tokio::sync::Mutex::new(None),
            wake: Arc::new(Notify::new()),
            exhausted: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            counters: Counters::default(),
            scope: format!("seq/{name}"),
            on_lost: std::sync::OnceLock::new(),
        }
    }

    fn align(&self, x: u64) -> Option<u64> {
        align_up(self.p.start, self.p.increment, x)
    }

    /// Reserves the first segment.
    pub(crate) async fn prepare(&self) -> Result<(), IdgenError> {
        let mut view = self.store_view.lock().await;
        self.ensure_member(true)
            .await
            .map_err(|source| IdgenError::Store {
                generator: self.name.clone(),
                source,
            })?;
        let epoch = self.slow.lock().epoch;
        let (count, min_base) = self.plan(self.p.batch);
        match self.reserve_block(&mut view, count, min_base, false).await {
            Ok((b, e)) => {
                self.install(b, e, epoch);
                drop(view);
                // Other processes can tell at once what this one may issue
                // (best effort: the background task writes it otherwise).
                let _ = self.publish_low(0).await;
                Ok(())
            }
            Err(ReserveError::Exhausted) => Err(self.exhausted_error()),
            Err(ReserveError::Store(source)) => Err(IdgenError::Store {
                generator: self.name.clone(),
                source,
            }),
        }
    }

    fn exhausted_error(&self) -> IdgenError {
        self.exhausted.store(true, Ordering::Relaxed);
        IdgenError::Exhausted {
            generator: self.name.clone(),
            max: self.max.load(Ordering::Relaxed),
        }
    }

    /// The fast path: takes `n` ids from the current segment, or `None`.
    #[inline]
    fn try_take(&self, span: u64) -> Option<u64> {
        let hot = &self.hot;
        let mut c = hot.cur.load(Ordering::Acquire);
        loop {
            let e = hot.end.load(Ordering::Acquire);
            let new = c.checked_add(span)?;
            if new > e {
                return None;
            }
            match hot
                .cur
                .compare_exchange_weak(c, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if new >= hot.refill_mark.load(Ordering::Relaxed)
                        && hot.refill_mark.swap(u64::MAX, Ordering::Relaxed) != u64::MAX
                    {
                        self.wake.notify_one();
                    }
                    return Some(c);
                }
                Err(x) => c = x,
            }
        }
    }

    #[inline]
    fn emit(&self, out: &mut Vec<u64>, first: u64, n: u64) {
        let inc = self.p.increment;
        if inc == 1 {
            out.extend(first..first + n);
        } else {
            out.extend((0..n).map(|i| first + i * inc));
        }
    }

    fn span(&self, n: u64) -> Result<u64, IdgenError> {
        n.checked_mul(self.p.increment)
            .ok_or_else(|| IdgenError::BadRequest {
                generator: self.name.clone(),
                detail: format!("{n} ids do not fit in 64 bits"),
            })
    }

    /// See [`crate::idgen::Generator::try_next`].
    #[inline]
    pub(crate) fn try_next(&self, n: u64, out: &mut Vec<u64>) -> Result<bool, IdgenError> {
        let span = self.span(n)?;
        if let Some(c) = self.try_take(span) {
            self.emit(out, c, n);
            return Ok(true);
        }
        if n == 0 {
            return Ok(true);
        }
        if self.take_all(n, out) {
            return Ok(true);
        }
        if self.exhausted.load(Ordering::Relaxed) {
            return Err(self.exhausted_error());
        }
        Ok(false)
    }

    /// Takes `n` ids from the current and waiting segments if they hold that
    /// many; takes nothing otherwise (a partial claim would waste the rest of
    /// the cache, which matters while the store is down).
    fn take_all(&self, n: u64, out: &mut Vec<u64>) -> bool {
        let mut s = self.slow.lock();
        let inc = self.p.increment;
        let cur = self.hot.cur.load(Ordering::Acquire);
        let end = self.hot.end.load(Ordering::Acquire);
        let pending: u64 = s.pending.iter().map(|(b, e)| (e - b).div_ceil(inc)).sum();
        if end.saturating_sub(cur).div_ceil(inc) + pending < n {
            return false;
        }
        let before = out.len();
        if self.take_slow(&mut s, n, out) == n {
            return true;
        }
        out.truncate(before); // lost a race with the fast path: a rare gap
        false
    }

    /// Takes up to `need` ids from the current and pending segments, switching
    /// segments as they run out. Returns how many it took.
    fn take_slow(&self, s: &mut Slow, need: u64, out: &mut Vec<u64>) -> u64 {
        let inc = self.p.increment;
        let mut got = 0;
        while got < need {
            let want = need - got;
            if let Some(c) = self.try_take(want * inc) {
                self.emit(out, c, want);
                return need;
            }
            // Claim what is left of the current segment (keeps ids increasing),
            // then move to the next one.
            let end = self.hot.end.load(Ordering::Acquire);
            let c = self.hot.cur.fetch_max(end, Ordering::AcqRel);
            if c < end {
                let k = (end - c).div_ceil(inc).min(want);
                self.emit(out, c, k);
                got += k;
            }
            let Some((b, e)) = s.pending.pop_front() else {
                break;
            };
            self.switch_to(s, b, e);
        }
        got
    }

    /// Makes `[b, e)` the current segment. Caller holds the slow lock.
    fn switch_to(&self, s: &mut Slow, b: u64, e: u64) {
        let old_end = self.hot.end.load(Ordering::Acquire);
        // Store cur before end: a reader holding the old cursor then fails
        // its CAS; one holding the new cursor sees the old (lower) end and
        // fails its bound check.
        let old = self.hot.cur.swap(b, Ordering::AcqRel);
        self.hot.end.store(e, Ordering::Release);
        s.issued_done += (old.min(old_end).saturating_sub(s.seg_base)) / self.p.increment;
        s.seg_base = b;
        self.set_mark(s);
    }

    fn set_mark(&self, s: &Slow) {
        let mark = if s.pending.is_empty() {
            let b = s.seg_base;
            let e = self.hot.end.load(Ordering::Acquire);
            let len = e.saturating_sub(b);
            b + (len as f64 * (1.0 - self.p.refill_at)) as u64
        } else {
            u64::MAX
        };
        self.hot.refill_mark.store(mark, Ordering::Release);
        if mark != u64::MAX && self.hot.cur.load(Ordering::Acquire) >= mark {
            self.wake.notify_one();
        }
    }

    /// Adds a freshly reserved segment. Skips ids at or below the floor.
    /// Not when the cache was dropped since `epoch` (the reservation was
    /// made under a member record that is gone).
    fn install(&self, b: u64, e: u64, epoch: u64) {
        let mut s = self.slow.lock();
        s.reserved_end = s.reserved_end.max(e);
        if s.epoch != epoch || (s.members && s.member.is_none()) {
            return;
        }
        let b = match self.align(s.floor.saturating_add(1)) {
            Some(f) if s.floor > 0 => b.max(f),
            None => e,
            _ => b,
        };
        if b >= e {
            return;
        }
        let cur = self.hot.cur.load(Ordering::Acquire);
        let end = self.hot.end.load(Ordering::Acquire);
        if cur >= end && s.pending.is_empty() {
            self.switch_to(&mut s, b, e);
        } else {
            match s.pending.back_mut() {
                Some(last) if last.1 == b => last.1 = e,
                _ => s.pending.push_back((b, e)),
            }
            self.set_mark(&s);
        }
    }

    /// Size and lowest base of the next reservation; updates the rate.
    fn plan(&self, need: u64) -> (u64, u64) {
        let mut s = self.slow.lock();
        let now = self.clock.mono_ms();
        let cur = self.hot.cur.load(Ordering::Acquire);
        let end = self.hot.end.load(Ordering::Acquire);
        let issued = s.issued_done + cur.min(end).saturating_sub(s.seg_base) / self.p.increment;
        let dt = now.saturating_sub(s.sample.0);
        if dt >= 10 {
            let r = issued.saturating_sub(s.sample.1) as f64 * 1000.0 / dt as f64;
            s.rate = if s.rate == 0.0 { r } else { (s.rate + r) / 2.0 };
            s.sample = (now, issued);
            let t = s.tuning;
            let target = (s.rate * t.segment_ms as f64 / 1000.0) as u64;
            s.batch = target.clamp(t.min_batch, t.max_batch);
        }
        let min_base = match self.align(s.floor.saturating_add(1)) {
            Some(f) if s.floor > 0 => f.max(s.reserved_end),
            Some(_) => s.reserved_end,
            None => u64::MAX,
        };
        (s.batch.max(need), min_base)
    }

    /// One reservation of `count` ids at or above `min_base`. With
    /// `whole`, fails instead of returning a block cut short by `max`.
    async fn reserve_block(
        &self,
        view: &mut Option<Versioned>,
        count: u64,
        min_base: u64,
        whole: bool,
    ) -> Result<(u64, u64), ReserveError> {
        for _ in 0..64 {
            let current = match *view {
                Some(v) => Some(v),
                None => self
                    .store
                    .load(&self.key)
                    .await
                    .map_err(|e| self.failed(e))?,
            };
            let stored = current.map(|v| v.value).unwrap_or(0);
            let Some(base) = self.align(stored.max(min_base)) else {
                return Err(ReserveError::Exhausted);
            };
            let limit = self.limit.load(Ordering::Acquire);
            if base >= limit {
                return Err(ReserveError::Exhausted);
            }
            let wanted = base.saturating_add(count.saturating_mul(self.p.increment));
            if whole && wanted > limit {
                return Err(ReserveError::Exhausted);
            }
            let end = wanted.min(limit);
            *view = None;
            match self
                .store
                .compare_and_set(&self.key, current.map(|v| v.version), end)
                .await
            {
                Ok(Some(version)) => {
                    *view = Some(Versioned {
                        value: end,
                        version,
                    });
                    self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                    // `[stored, end)` went from nobody's to ours in one
                    // compare-and-swap: nobody else ever issues an id in it.
                    let mut s = self.slow.lock();
                    add_owned(&mut s.owned, stored, end);
                    if !s.members {
                        s.snap_hwm = s.snap_hwm.max(end);
                    }
                    return Ok((base, end));
                }
                Ok(None) => continue, // another process moved it: reload
                Err(e) => return Err(self.failed(e)),
            }
        }
        Err(self.failed(StoreError::Unavailable(
            "compare-and-swap kept failing (64 conflicts in a row)".into(),
        )))
    }

    fn failed(&self, e: StoreError) -> ReserveError {
        self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
        self.slow.lock().last_error = Some(e.to_string());
        ReserveError::Store(e)
    }

    fn unavailable(&self, source: StoreError) -> IdgenError {
        IdgenError::Unavailable {
            generator: self.name.clone(),
            source,
        }
    }

    /// See [`crate::idgen::Generator::next`].
    pub(crate) async fn next(&self, n: u64, out: &mut Vec<u64>) -> Result<(), IdgenError> {
        let span = self.span(n)?;
        if let Some(c) = self.try_take(span) {
            self.emit(out, c, n);
            return Ok(());
        }
        if self.exhausted.load(Ordering::Relaxed) {
            return Err(self.exhausted_error());
        }
        if self.stopped.load(Ordering::Relaxed) {
            return Err(IdgenError::Shutdown(self.name.clone()));
        }
        let before = out.len();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let result = self.next_slow(n, out, deadline).await;
        if result.is_err() {
            out.truncate(before);
        }
        result
    }

    async fn next_slow(
        &self,
        n: u64,
        out: &mut Vec<u64>,
        deadline: tokio::time::Instant,
    ) -> Result<(), IdgenError> {
        loop {
            if self.take_all(n, out) {
                return Ok(());
            }
            // Both buffers are used up: this request waits for the store.
            self.counters.waits.fetch_add(1, Ordering::Relaxed);
            let mut view = tokio::time::timeout_at(deadline, self.store_view.lock())
                .await
                .map_err(|_| self.unavailable(StoreError::Timeout(self.timeout)))?;
            // Someone may have refilled while we waited for the lock.
            if self.take_all(n, out) {
                return Ok(());
            }
            if self.exhausted.load(Ordering::Relaxed) {
                return Err(self.exhausted_error());
            }
            match tokio::time::timeout_at(deadline, self.ensure_member(false)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(self.unavailable(e)),
                Err(_) => return Err(self.unavailable(StoreError::Timeout(self.timeout))),
            }
            let epoch = self.slow.lock().epoch;
            let (count, min_base) = self.plan(n);
            let reserved = tokio::time::timeout_at(
                deadline,
                self.reserve_block(&mut view, count, min_base, false),
            )
            .await;
            match reserved {
                Ok(Ok((b, e))) => self.install(b, e, epoch),
                Ok(Err(ReserveError::Exhausted)) => return Err(self.exhausted_error()),
                Ok(Err(ReserveError::Store(e))) => return Err(self.unavailable(e)),
                Err(_) => {
                    self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(self.unavailable(StoreError::Timeout(self.timeout)));
                }
            }
        }
    }

    /// Whether the background task should reserve now.
    fn needs_refill(&self) -> bool {
        let s = self.slow.lock();
        if !s.pending.is_empty() || self.exhausted.load(Ordering::Relaxed) {
            return false;
        }
        let cur = self.hot.cur.load(Ordering::Acquire);
        let end = self.hot.end.load(Ordering::Acquire);
        let len = end.saturating_sub(s.seg_base) as f64;
        (end.saturating_sub(cur) as f64) < len * self.p.refill_at || cur >= end
    }

    fn floor_dirty(&self) -> bool {
        let s = self.slow.lock();
        s.floor_to_publish > s.floor_persisted
    }

    /// One round of background work: refill and/or persist the floor.
    /// Returns `Err` when the store failed (the caller backs off).
    pub(crate) async fn background_round(&self) -> Result<(), StoreError> {
        let lost = {
            let s = self.slow.lock();
            s.members && !s.member.as_ref().is_some_and(|m| m.state.is_valid())
        };
        if lost {
            // Dropped already (the lost-hook); make sure, then join again.
            self.drop_cache();
        }
        self.publish_low(0).await?;
        if !lost && !self.needs_refill() && !self.floor_dirty() {
            return Ok(());
        }
        let Ok(mut view) = tokio::time::timeout(self.timeout, self.store_view.lock()).await else {
            return Ok(()); // a foreground reservation is running; look again later
        };
        match tokio::time::timeout(self.timeout, self.ensure_member(false)).await {
            Ok(r) => r?,
            Err(_) => return Err(StoreError::Timeout(self.timeout)),
        }
        if self.needs_refill() {
            let epoch = self.slow.lock().epoch;
            let (count, min_base) = self.plan(0);
            match tokio::time::timeout(
                self.timeout,
                self.reserve_block(&mut view, count, min_base, false),
            )
            .await
            {
                Ok(Ok((b, e))) => self.install(b, e, epoch),
                Ok(Err(ReserveError::Exhausted)) => {
                    self.exhausted.store(true, Ordering::Relaxed);
                }
                Ok(Err(ReserveError::Store(e))) => return Err(e),
                Err(_) => {
                    self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(StoreError::Timeout(self.timeout));
                }
            }
        }
        if self.floor_dirty() {
            let floor = self.slow.lock().floor_to_publish;
            match tokio::time::timeout(self.timeout, self.persist_floor(&mut view, floor)).await {
                Ok(r) => r?,
                Err(_) => return Err(StoreError::Timeout(self.timeout)),
            }
        }
        drop(view);
        self.publish_low(0).await?;
        Ok(())
    }

    /// Makes `floor` durable and visible: raises the store's high-water mark
    /// above it (later reservations of every process start above it), then
    /// the followed floor key (processes holding it in their cache skip it).
    /// Never lowers either.
    async fn persist_floor(
        &self,
        view: &mut Option<Versioned>,
        floor: u64,
    ) -> Result<(), StoreError> {
        let target = self
            .align(floor.saturating_add(1))
            .unwrap_or(self.limit.load(Ordering::Acquire));
        self.raise_key(&self.key, view, target).await?;
        let mut floor_view = None;
        self.raise_key(&self.floor_key, &mut floor_view, floor)
            .await?;
        let mut s = self.slow.lock();
        s.floor_persisted = s.floor_persisted.max(floor);
        Ok(())
    }

    /// Compare-and-swap loop raising `key` to at least `target`.
    async fn raise_key(
        &self,
        key: &str,
        view: &mut Option<Versioned>,
        target: u64,
    ) -> Result<(), StoreError> {
        for _ in 0..64 {
            let current = match *view {
                Some(v) => Some(v),
                None => self.store.load(key).await.inspect_err(|e| {
                    self.note_error(e);
                })?,
            };
            if current.is_some_and(|v| v.value >= target) {
                return Ok(());
            }
            *view = None;
            match self
                .store
                .compare_and_set(key, current.map(|v| v.version), target)
                .await
            {
                Ok(Some(version)) => {
                    self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                    *view = Some(Versioned {
                        value: target,
                        version,
                    });
                    return Ok(());
                }
                Ok(None) => {}
                Err(e) => {
                    self.note_error(&e);
                    return Err(e);
                }
            }
        }
        Err(StoreError::Unavailable(
            "compare-and-swap kept failing (64 conflicts in a row)".into(),
        ))
    }

    /// Follows the floor other processes publish (see [`Sequence::persist_floor`]).
    pub(crate) fn follow_floor(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.store.follow(&self.floor_key)
    }

    fn note_error(&self, e: &StoreError) {
        self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
        self.slow.lock().last_error = Some(e.to_string());
    }

    /// See [`crate::idgen::Generator::observe`]: skips `id` here, and
    /// returns whether no other process can issue it either (else the
    /// caller runs [`Sequence::confirm`]).
    pub(crate) fn observe(&self, id: u64) -> bool {
        self.skip_past(id, false);
        self.slow.lock().safe(id)
    }

    /// A floor another process published (already in the store): skipped
    /// here, then acknowledged in the member record.
    pub(crate) async fn observe_published(&self, id: u64) {
        {
            let mut s = self.slow.lock();
            s.floor_seen = s.floor_seen.max(id);
        }
        self.skip_past(id, true);
        if let Err(e) = self.publish_low(id).await {
            tracing::debug!(error = %e, generator = %self.name, "acknowledging a floor failed; retrying");
        }
    }

    /// The lowest id this process may still issue: the cursor, or above
    /// the floor (later reservations start above it).
    fn low(&self, s: &Slow) -> u64 {
        let cur = self.hot.cur.load(Ordering::Acquire);
        let above_floor = match s.floor {
            0 => 0,
            f => self.align(f.saturating_add(1)).unwrap_or(u64::MAX),
        };
        cur.max(above_floor)
    }

    /// Writes this process's `low` into its member record when it moved to
    /// a new segment since the last write (about once per segment:
    /// reservations are what move it), or when the one written is at or
    /// below `floor` (a published floor: the write is the acknowledgement).
    async fn publish_low(&self, floor: u64) -> Result<(), StoreError> {
        let (lease, low) = {
            let s = self.slow.lock();
            let Some(lease) = s.member.clone().filter(|m| m.state.is_valid()) else {
                return Ok(());
            };
            let low = self.low(&s);
            let floor = floor.max(s.floor_seen);
            let moved = s.seg_base > s.low_published
                || (floor > 0 && s.low_published <= floor)
                || s.low_published == 0;
            if low <= s.low_published || !moved {
                return Ok(());
            }
            (lease, low)
        };
        match tokio::time::timeout(
            self.timeout,
            self.store.set_member(&self.scope, &lease, low),
        )
        .await
        {
            Ok(Ok(())) => {
                self.counters.store_writes.fetch_add(1, Ordering::Relaxed);
                let mut s = self.slow.lock();
                if s.member.as_ref().is_some_and(|m| m.handle == lease.handle) {
                    s.low_published = s.low_published.max(low);
                }
                Ok(())
            }
            Ok(Err(e)) => {
                self.note_error(&e);
                Err(e)
            }
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    /// Joins the store's members when the store has them and this process
    /// holds no valid member record (`first`: at prepare, finds out whether
    /// it has). Caller holds `store_view`.
    async fn ensure_member(&self, first: bool) -> Result<(), StoreError> {
        {
            let s = self.slow.lock();
            if !first && (!s.members || s.member.as_ref().is_some_and(|m| m.state.is_valid())) {
                return Ok(());
            }
        }
        let Some(lease) = self.store.join(&self.scope).await? else {
            return Ok(());
        };
        {
            let mut s = self.slow.lock();
            s.members = true;
            s.member = Some(lease.clone());
            s.low_published = 0;
        }
        if let Some(hook) = self.on_lost.get() {
            let hook = hook.clone();
            lease.state.on_lost(Box::new(move || hook()));
        }
        Ok(())
    }

    /// The member record is lost (or the generator stops): other processes
    /// no longer wait for this one, so nothing cached may be issued any
    /// more. The current segment is used up, waiting ones are dropped
    /// (gaps), and reservations in flight are not installed.
    pub(crate) fn drop_cache(&self) {
        let mut s = self.slow.lock();
        let end = self.hot.end.load(Ordering::Acquire);
        self.hot.cur.fetch_max(end, Ordering::AcqRel);
        s.pending.clear();
        s.epoch += 1;
        if s.member.as_ref().is_some_and(|m| !m.state.is_valid()) {
            s.member = None;
        }
        self.hot.refill_mark.store(u64::MAX, Ordering::Release);
        drop(s);
        self.wake.notify_one();
    }

    /// Leaves the members (clean shutdown), after dropping the cache.
    pub(crate) async fn leave(&self) {
        let lease = self.slow.lock().member.take();
        self.drop_cache();
        if let Some(lease) = lease {
            let _ = tokio::time::timeout(self.timeout, self.store.leave(&self.scope, &lease)).await;
        }
    }

    /// One consistent read of the high-water mark and the members; keeps it
    /// if it is newer than the one held.
    async fn snapshot(&self) -> Result<(), StoreError> {
        let m = self.store.members(&self.scope, &self.key).await?;
        let mut s = self.slow.lock();
        let me = s.member.as_ref().map(|l| l.handle);
        let hwm = m.key.unwrap_or(0);
        let others = m
            .members
            .iter()
            .filter(|(h, _)| Some(*h) != me)
            .map(|(_, low)| *low)
            .min()
            .unwrap_or(u64::MAX);
        if hwm >= s.snap_hwm {
            s.snap_hwm = hwm;
            s.snap_others_low = others;
        }
        Ok(())
    }

    /// The slow path of an explicit id `id` that another process may hold
    /// in its cache (module doc, "Explicit ids across processes"). Bounded
    /// by the allocator's timeout.
    pub(crate) async fn confirm(&self, id: u64) -> Result<(), IdgenError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let unconfirmed = |detail: String| IdgenError::Unconfirmed {
            generator: self.name.clone(),
            id,
            detail,
        };
        let bounded = |e: Result<Result<(), StoreError>, tokio::time::error::Elapsed>| match e {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(unconfirmed(format!("store: {e}"))),
            Err(_) => Err(unconfirmed(format!(
                "store: timed out after {:?}",
                self.timeout
            ))),
        };
        bounded(tokio::time::timeout_at(deadline, self.snapshot()).await)?;
        if self.slow.lock().safe(id) {
            return Ok(());
        }
        if id >= self.slow.lock().snap_hwm {
            // Above every reservation: reserve a segment above it (one
            // compare-and-swap). The range up to it becomes ours.
            let reserve = async {
                let mut view = self.store_view.lock().await;
                self.ensure_member(false)
                    .await
                    .map_err(ReserveError::Store)?;
                let epoch = self.slow.lock().epoch;
                let (count, min_base) = self.plan(0);
                let min_base = min_base.max(self.align(id.saturating_add(1)).unwrap_or(u64::MAX));
                let (b, e) = self
                    .reserve_block(&mut view, count, min_base, false)
                    .await?;
                self.install(b, e, epoch);
                Ok(())
            };
            match tokio::time::timeout_at(deadline, reserve).await {
                Ok(Ok(())) => {}
                Ok(Err(ReserveError::Exhausted)) => {
                    // Nothing can be reserved above it: nobody issues it.
                    self.exhausted.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Ok(Err(ReserveError::Store(e))) => return Err(unconfirmed(format!("store: {e}"))),
                Err(_) => {
                    return Err(unconfirmed(format!(
                        "store: timed out after {:?}",
                        self.timeout
                    )))
                }
            }
            if self.slow.lock().safe(id) {
                return Ok(());
            }
        }
        // Inside what others may hold: publish the floor, then wait until
        // every live member that may hold it has moved past it.
        let raise = async {
            let mut floor_view = None;
            self.raise_key(&self.floor_key, &mut floor_view, id).await
        };
        bounded(tokio::time::timeout_at(deadline, raise).await)?;
        self.wait_acks(id, deadline).await
    }

    /// Waits until no live member but this one has a `low` at or below
    /// `id` (each raises it after skipping the published floor).
    async fn wait_acks(&self, id: u64, deadline: tokio::time::Instant) -> Result<(), IdgenError> {
        let unconfirmed = |detail: String| IdgenError::Unconfirmed {
            generator: self.name.clone(),
            id,
            detail,
        };
        loop {
            let read =
                tokio::time::timeout_at(deadline, self.store.members(&self.scope, &self.key));
            let m = match read.await {
                Ok(Ok(m)) => m,
                Ok(Err(e)) => {
                    self.note_error(&e);
                    return Err(unconfirmed(format!("store: {e}")));
                }
                Err(_) => {
                    return Err(unconfirmed(format!(
                        "timed out after {:?} waiting for the store",
                        self.timeout
                    )))
                }
            };
            let me = self.slow.lock().member.as_ref().map(|l| l.handle);
            let behind: Vec<i64> = m
                .members
                .iter()
                .filter(|(h, low)| Some(*h) != me && *low <= id)
                .map(|(h, _)| *h)
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() + Duration::from_millis(5) >= deadline {
                return Err(unconfirmed(format!(
                    "{} other idgate process(es) did not acknowledge within {:?} (member {:x})",
                    behind.len(),
                    self.timeout,
                    behind[0]
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn skip_past(&self, id: u64, published: bool) {
        if id < self.hot.cur.load(Ordering::Relaxed) {
            return; // below everything this process can still issue
        }
        let mut s = self.slow.lock();
        if published {
            s.floor_persisted = s.floor_persisted.max(id);
        }
        if id <= s.floor {
            return;
        }
        s.floor = id;
        let target = self.align(id.saturating_add(1)).unwrap_or(u64::MAX);
        let end = self.hot.end.load(Ordering::Acquire);
        self.hot.cur.fetch_max(target.min(end), Ordering::AcqRel);
        while let Some(front) = s.pending.front_mut() {
            if front.1 <= target {
                s.pending.pop_front();
            } else {
                front.0 = front.0.max(target);
                break;
            }
        }
        self.set_mark(&s);
        if self.hot.cur.load(Ordering::Acquire) >= end {
            self.wake.notify_one();
        }
    }

    /// See [`crate::idgen::Generator::set_floor`].
    pub(crate) async fn set_floor(&self, value: u64) -> Result<(), IdgenError> {
        self.skip_past(value, false);
        let mut view = tokio::time::timeout(self.timeout, self.store_view.lock())
            .await
            .map_err(|_| self.store_error(StoreError::Timeout(self.timeout)))?;
        match tokio::time::timeout(self.timeout, self.persist_floor(&mut view, value)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(self.store_error(e)),
            Err(_) => return Err(self.store_error(StoreError::Timeout(self.timeout))),
        }
        drop(view);
        // Every other live process has skipped it before this returns.
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.wait_acks(value, deadline).await
    }

    fn store_error(&self, source: StoreError) -> IdgenError {
        IdgenError::Store {
            generator: self.name.clone(),
            source,
        }
    }

    /// Its parameters (`max` as first configured: see [`Sequence::max`]).
    pub(crate) fn params(&self) -> &SequenceParams {
        &self.p
    }

    /// Its parameters with the tunables in force now.
    pub(crate) fn current_params(&self) -> SequenceParams {
        let mut p = self.p.clone();
        let s = self.slow.lock();
        p.min_batch = s.tuning.min_batch;
        p.max_batch = s.tuning.max_batch;
        p.segment_ms = s.tuning.segment_ms;
        p.batch = s.tuning.batch;
        p.max = self.max();
        p
    }

    /// The largest id it may issue now.
    pub(crate) fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Applies a rule reload's new `batch`, `min_batch`, `max_batch`,
    /// `segment_seconds` and `max` (the other parameters of `p` must be the
    /// ones it runs with: the caller checks). The adaptive batch restarts at
    /// the new `batch`. A lower `max` is refused while this process holds
    /// reserved ids above it (they would be issued over it); a higher one
    /// ends an exhaustion.
    pub(crate) fn tune(&self, p: &SequenceParams) -> Result<(), String> {
        let inc = self.p.increment;
        let limit = align_up(self.p.start, inc, p.max.saturating_add(1))
            .unwrap_or_else(|| u64::MAX - (u64::MAX - self.p.start) % inc);
        let mut s = self.slow.lock();
        if limit < self.limit.load(Ordering::Acquire) && s.reserved_end > limit {
            return Err(format!(
                "max cannot go down to {} while this process holds ids reserved up to {} (lower it after they are issued, or raise the floor past them)",
                p.max,
                s.reserved_end.saturating_sub(1)
            ));
        }
        s.tuning = Tuning::of(p);
        s.batch = p.batch.clamp(p.min_batch, p.max_batch);
        self.max.store(p.max, Ordering::Relaxed);
        self.limit.store(limit, Ordering::Release);
        drop(s);
        self.exhausted.store(false, Ordering::Relaxed);
        self.wake.notify_one();
        Ok(())
    }

    /// End of the highest range this process reserved: positions below it
    /// are reserved (by us or by others before us) or skipped.
    pub(crate) fn reserved_end(&self) -> u64 {
        self.slow.lock().reserved_end
    }

    /// The store's high-water mark: no id at or above it was ever issued.
    pub(crate) async fn store_hwm(&self) -> Result<u64, IdgenError> {
        self.load_value(&self.key).await
    }

    /// The floor in the store: no process issues an id at or below it.
    pub(crate) async fn store_floor(&self) -> Result<u64, IdgenError> {
        self.load_value(&self.floor_key).await
    }

    async fn load_value(&self, key: &str) -> Result<u64, IdgenError> {
        match tokio::time::timeout(self.timeout, self.store.load(key)).await {
            Ok(Ok(v)) => Ok(v.map(|v| v.value).unwrap_or(0)),
            Ok(Err(e)) => Err(self.store_error(e)),
            Err(_) => Err(self.store_error(StoreError::Timeout(self.timeout))),
        }
    }

    /// Step between ids.
    pub(crate) fn increment(&self) -> u64 {
        self.p.increment
    }

    /// See [`crate::idgen::Generator::next_block`]: the first id of `n`
    /// consecutive ones (`increment` apart).
    pub(crate) async fn next_block(&self, n: u64) -> Result<u64, IdgenError> {
        if n == 0 {
            return Err(IdgenError::BadRequest {
                generator: self.name.clone(),
                detail: "a block needs a count of at least 1".into(),
            });
        }
        let span = self.span(n)?;
        if let Some(c) = self.try_take(span) {
            return Ok(c);
        }
        if self.exhausted.load(Ordering::Relaxed) {
            return Err(self.exhausted_error());
        }
        {
            // The current segment is too short but the waiting one holds
            // the block: give up the rest of the current one (a gap, never
            // a duplicate) and take the block from the waiting one.
            let mut s = self.slow.lock();
            if let Some(&(b, e)) = s.pending.front() {
                if e - b >= span {
                    s.pending.pop_front();
                    self.switch_to(&mut s, b, e);
                    drop(s);
                    if let Some(c) = self.try_take(span) {
                        return Ok(c);
                    }
                }
            }
        }
        // More than the cache holds in one piece: a block of its own,
        // reserved in the store (above every local segment so far). The
        // cache left below it is dropped (a gap), so ids issued here after
        // the block are above it, as Redis's INCR after INCRBY is.
        let block = self.reserve(n).await?;
        self.drop_cache();
        Ok(block.start)
    }

    /// See [`crate::idgen::Generator::reserve`].
    pub(crate) async fn reserve(&self, count: u64) -> Result<std::ops::Range<u64>, IdgenError> {
        if count == 0 {
            return Err(IdgenError::BadRequest {
                generator: self.name.clone(),
                detail: "reserve needs a count of at least 1".into(),
            });
        }
        self.span(count)?;
        let mut view = tokio::time::timeout(self.timeout, self.store_view.lock())
            .await
            .map_err(|_| self.store_error(StoreError::Timeout(self.timeout)))?;
        let min_base = self.plan(0).1;
        let r = tokio::time::timeout(
            self.timeout,
            self.reserve_block(&mut view, count, min_base, true),
        )
        .await;
        match r {
            Ok(Ok((b, e))) => {
                // Later local segments start above the block.
                let mut s = self.slow.lock();
                s.reserved_end = s.reserved_end.max(e);
                Ok(b..e)
            }
            Ok(Err(ReserveError::Exhausted)) => Err(IdgenError::Exhausted {
                generator: self.name.clone(),
                max: self.max.load(Ordering::Relaxed),
            }),
            Ok(Err(ReserveError::Store(e))) => Err(self.store_error(e)),
            Err(_) => Err(self.store_error(StoreError::Timeout(self.timeout))),
        }
    }

    /// Read-only view for stats.
    pub(crate) fn view(&self) -> SeqView {
        let s = self.slow.lock();
        let cur = self.hot.cur.load(Ordering::Acquire);
        let end = self.hot.end.load(Ordering::Acquire);
        let inc = self.p.increment;
        let pending: u64 = s.pending.iter().map(|(b, e)| (e - b).div_ceil(inc)).sum();
        let issued = s.issued_done + cur.min(end).saturating_sub(s.seg_base) / inc;
        let now = self.clock.mono_ms();
        let dt = now.saturating_sub(s.sample.0);
        let rate = if dt >= 1000 {
            issued.saturating_sub(s.sample.1) as f64 * 1000.0 / dt as f64
        } else {
            s.rate
        };
        SeqView {
            high_water: s.reserved_end,
            next_id: cur.min(end),
            cached_remaining: end.saturating_sub(cur).div_ceil(inc) + pending,
            batch: s.batch,
            rate,
            issued,
            floor: s.floor,
            waits: self.counters.waits.load(Ordering::Relaxed),
            store_errors: self.counters.store_errors.load(Ordering::Relaxed),
            store_writes: self.counters.store_writes.load(Ordering::Relaxed),
            last_error: s.last_error.clone(),
        }
    }
}

impl Slow {
    /// Whether no other process can issue `id` (module doc): it is in a
    /// range this process reserved, or below both the high-water mark and
    /// every other member's `low` of one consistent read.
    fn safe(&self, id: u64) -> bool {
        (id < self.snap_hwm && id < self.snap_others_low)
            || self.owned.iter().any(|&(b, e)| b <= id && id < e)
    }
}

/// Adds `[b, e)` to the owned ranges (merging with the last one when they
/// touch; forgetting the oldest beyond `OWNED_MAX`).
fn add_owned(owned: &mut VecDeque<(u64, u64)>, b: u64, e: u64) {
    if b >= e {
        return;
    }
    if let Some(last) = owned.back_mut() {
        if last.1 == b {
            last.1 = e;
            return;
        }
    }
    owned.push_back((b, e));
    if owned.len() > OWNED_MAX {
        owned.pop_front();
    }
}

/// Smallest `v >= x` with `v >= start` and `v ≡ start (mod inc)`; `None` on overflow.
fn align_up(start: u64, inc: u64, x: u64) -> Option<u64> {
    if x <= start {
        return Some(start);
    }
    let over = (x - start) % inc;
    if over == 0 {
        Some(x)
    } else {
        x.checked_add(inc - over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align() {
        assert_eq!(align_up(1, 1, 0), Some(1));
        assert_eq!(align_up(1, 1, 5), Some(5));
        assert_eq!(align_up(3, 10, 4), Some(13));
        assert_eq!(align_up(3, 10, 13), Some(13));
        assert_eq!(align_up(3, 10, u64::MAX), None);
    }
}
